"""Integration fixtures: one real local stack (KRaft broker + moto) per test session on free ports, in a tmp
state dir, and one SparkSession pointed at it. A component that cannot start fails the run with the reason."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from infra import stack as local_stack
from infra.procs import ComponentError


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory):
    state = tmp_path_factory.mktemp("lakeline-state")
    saved = {k: os.environ.get(k) for k in ("LAKELINE_STATE_DIR", "LAKELINE_ENV_FILE")}
    os.environ["LAKELINE_STATE_DIR"] = str(state)
    try:
        info = local_stack.up(state, echo=lambda msg: print(f"[stack] {msg}"))
    except ComponentError as exc:
        pytest.fail(f"local stack could not start: {exc}", pytrace=False)
    env = info.env()
    os.environ.update(env)
    yield {"state": state, "info": info, "env": env}
    local_stack.down(state, echo=lambda msg: None)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


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
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else 0
            argv = (entry / "cmdline").read_bytes().split(b"\0") if parent == os.getpid() else []
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
        if b"lakeline" in argv or b"bench" in argv or any(a.startswith(b"bench.") for a in argv):
            found.append(int(entry.name))
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
