"""Integration fixtures: one real local stack (KRaft broker + moto) per test session on free ports, in a tmp
state dir, and one SparkSession pointed at it. A component that cannot start fails the run with the reason."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from infra import stack as local_stack
from infra.procs import ComponentError


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory):
    """The stack's endpoints in this process's environment for the session, every variable restored after it."""
    state = tmp_path_factory.mktemp("lakeline-state")
    with pytest.MonkeyPatch.context() as env_patch:
        env_patch.setenv("LAKELINE_STATE_DIR", str(state))
        try:
            info = local_stack.up(state, echo=lambda msg: print(f"[stack] {msg}"))
        except ComponentError as exc:
            pytest.fail(f"local stack could not start: {exc}", pytrace=False)
        env = info.env()
        for key, value in env.items():
            env_patch.setenv(key, value)
        yield {"state": state, "info": info, "env": env}
        local_stack.down(state, echo=lambda msg: None)


@pytest.fixture(scope="session")
def settings(stack_env):
    from ingest.settings import load_settings

    return load_settings()


@pytest.fixture(scope="session")
def spark(settings):
    from ingest.spark import build_spark

    session = build_spark(settings, "lakeline-tests", extra={"spark.driver.memory": "3g"})
    yield session
    session.stop()


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
