"""Table upkeep a running pipeline does itself, off the commit path: after the first commit of a process and then
after every `every`-th, on a thread of its own, one run at a time. A failed run is logged and retried at the next
cadence; it never fails or delays a commit. Used for Delta log checkpoints (delta_checkpoints) and Iceberg snapshot
expiry (iceberg_history)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class EveryNCommits:
    """Subclasses give `what` (for the log), `consequence` (what a failure means for readers), `retryable`
    (the exception types a failed run may raise) and `_work()`; `done` holds (result, seconds) of each run."""

    what = "upkeep"
    consequence = ""
    retryable: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, name: str, every: int):
        self.name = name
        self.every = every
        self._since = every  # the first commit of a process runs it: the table's state is unknown until then
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.done: list[tuple[object, float]] = []
        self.failures = 0

    def committed(self) -> None:
        """Call after each commit to the table. Returns at once."""
        with self._lock:
            self._since += 1
            if self._since < self.every or (self._thread is not None and self._thread.is_alive()):
                return
            self._since = 0
            self._thread = threading.Thread(target=self._run, name=f"lakeline-{self.what.replace(' ', '-')}-"
                                                                  f"{self.name}", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a running run to end (tests, and a clean stop)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _work(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            result = self._work()
        except self.retryable as exc:
            self.failures += 1
            log.warning("%s: %s failed (%s: %s); retried after %d more commits. %s", self.name, self.what,
                        type(exc).__name__, exc, self.every, self.consequence)
            return
        seconds = time.perf_counter() - start
        self.done.append((result, seconds))
        log.debug("%s: %s (%s) in %.2f s", self.name, self.what, result, seconds)


class CountingUpkeep(EveryNCommits):
    """EveryNCommits over a callable that returns how many things one run changed (snapshots expired, manifests
    replaced); `total` sums them over this process. Subclasses give `what`, `consequence` and `retryable`."""

    def __init__(self, name: str, work: Callable[[], int], every: int):
        super().__init__(name, every)
        self._call = work

    def _work(self) -> int:
        return self._call()

    @property
    def total(self) -> int:
        """What this process's runs changed, summed."""
        return sum(int(result) for result, _ in self.done)
