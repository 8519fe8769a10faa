"""One driver per pipeline on a host, and a warm standby that takes over the moment it dies.

The lock is an exclusive `flock` on a local file named after the pipeline's checkpoint location. The kernel
releases it when the holding process exits for any reason, kill -9 included, so a standby polling for it knows
within one poll interval that the driver is gone: no heartbeat timeout to wait out. It covers one host only; a
driver on another host is seen through the checkpoint heartbeat (`checkpoint restore` refuses while it is fresh).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path

from ingest.errors import DriverLockHeld

POLL_SECONDS = 0.05



class DriverLock:
    """Exclusive per-pipeline lock. `acquire()` fails fast; `wait()` blocks (polling) until it is free."""

    def __init__(self, pipeline: str, checkpoint_location: str, directory: str | Path | None = None):
        # `directory`: the setting lock_dir (LAKELINE_LOCK_DIR); default <temp dir>/lakeline-locks.
        base = Path(directory or Path(tempfile.gettempdir()) / "lakeline-locks")
        digest = hashlib.sha256(checkpoint_location.encode()).hexdigest()[:16]
        self.pipeline = pipeline
        self.path = base / f"{pipeline}-{digest}.lock"
        self._fd: int | None = None

    def _try(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid the current holder wrote, or '?'."""
        try:
            return self.path.read_text().strip() or "?"
        except FileNotFoundError:
            return "?"

    def acquire(self) -> None:
        if not self._try():
            raise DriverLockHeld(
                f"pipeline {self.pipeline}: another driver (pid {self.holder()}) is running on this host "
                f"(lock {self.path}). Stop it first, or start this one with --standby to take over when it exits.")

    def wait(self, stop: threading.Event) -> bool:
        """Block until the lock is ours (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self._try():
                return True
            time.sleep(POLL_SECONDS)
        return False

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
