"""Small process helpers for the local stack: free ports, waiting with a deadline, owned-process stop."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from collections.abc import Callable


MARKER_ENV = "LAKELINE_STACK_MARKER"


class ComponentError(RuntimeError):
    """A local-stack component failed to start or answer; the message names the component and why."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def wait_until(check: Callable[[], bool], timeout: float, what: str, alive: Callable[[], bool] | None = None,
               log: Path | None = None) -> None:
    """Poll `check` until true; fail early if `alive` turns false, or at the deadline, with the log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if alive is not None and not alive():
            raise ComponentError(f"{what} exited during start-up. Last log lines ({log}):\n{tail(log) if log else ''}")
        time.sleep(0.25)
    raise ComponentError(f"{what} did not become healthy within {timeout:.0f}s. Last log lines ({log}):\n"
                         f"{tail(log) if log else ''}")


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """True if `pid` runs and (when given) was started with MARKER_ENV=`marker` (guards against pid reuse)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    except (FileNotFoundError, IndexError):
        return False
    return marker is None or f"{MARKER_ENV}={marker}".encode() in environ


def marked_env(marker: str) -> dict[str, str]:
    """The environment for a child process that `pid_alive(pid, marker)` will recognise as ours."""
    return {**os.environ, MARKER_ENV: marker}


def stop_pid(pid: int, marker: str, timeout: float = 20.0) -> bool:
    """SIGTERM the process group we started (then SIGKILL after `timeout`). Returns False if it was not ours/alive."""
    if not pid_alive(pid, marker):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
