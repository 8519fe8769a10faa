"""Integration fixtures (the stack, its settings and the SparkSession are session fixtures in tests/conftest.py):
a conf dir per test, and no driver subprocess left running after a test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest


@pytest.fixture
def conf_dir(tmp_path) -> Path:
    path = tmp_path / "conf"
    path.mkdir()
    return path


def _leftover_drivers() -> list[int]:
    """Pipeline or benchmark drivers this test process started that still run (not the stack, not the session's
    own Spark JVM). A driver's JVM exits with it, so direct children are enough."""
    found = []
    for child in psutil.Process().children():
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue  # the process ended while we looked
        if "lakeline" in argv or "bench" in argv or any(a.startswith("bench.") for a in argv):
            found.append(child.pid)
    return found


@pytest.fixture(autouse=True)
def no_leftover_drivers():
    """A test that fails while a driver subprocess runs must not leave it running: on a 2-core runner a leftover
    local[N] driver slows every later test and can push the suite past CI's time limit."""
    yield
    for pid in _leftover_drivers():
        print(f"[test] killing a driver the test left running: pid {pid}")
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            continue  # already gone, or reaped by its Popen


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated metadata DB in the session's throwaway AIRFLOW_HOME (set in tests/conftest.py)."""
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{done.stderr[-3000:]}", pytrace=False)
