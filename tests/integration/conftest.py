"""Integration fixtures: one real local stack (KRaft broker + moto) per test session on free ports, in a tmp
state dir, and one SparkSession pointed at it. A component that cannot start fails the run with the reason."""

from __future__ import annotations

import os
import signal
import time
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


def _driver_children(pid: int) -> list[int]:
    """Descendants of `pid` that are pipeline or benchmark drivers started by a test (not the stack, not the
    session's own Spark JVM)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop()
        queue.extend(children.get(child, []))
        try:
            argv = (Path("/proc") / str(child) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ingest.cli" in argv or b"bench" in argv or any(a.startswith(b"bench.") for a in argv):
            found.append(child)
    return found


@pytest.fixture(autouse=True)
def no_leftover_drivers():
    """A test that fails while a driver subprocess runs must not leave it running: on a 2-core runner a leftover
    local[N] driver slows every later test and can push the suite past CI's time limit."""
    yield
    leftovers = _driver_children(os.getpid())
    for pid in leftovers:
        print(f"[test] killing a driver the test left running: pid {pid}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    for pid in leftovers:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child
            except ChildProcessError:
                pass  # a grandchild: init reaps it
            time.sleep(0.1)
