"""Who may drive a pipeline: the host lock (ingest.driver_lock), the lease across hosts (ingest.lease), and the warm
standby that waits for both. `drive(pipeline, standby)` takes them, keeps the lease renewed while the block runs,
and gives both back at its end."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ingest.driver_lock import DriverLock
from ingest.errors import LeaseHeld
from ingest.events import LeaseWaiting, StandbyReady, StandbyStopped, StandbyTakingOver
from ingest.preflight import check_start

if TYPE_CHECKING:
    from ingest.pipeline import Pipeline


@contextmanager
def drive(pipeline: "Pipeline", standby: bool = False) -> Iterator[bool]:
    """Check the start (ingest.preflight: a missing source or an unreachable catalog fails here, with nothing taken
    or written), then take the pipeline's host lock and lease (refused at once when another driver holds either:
    DriverLockHeld, LeaseHeld), or with `standby` warm up first and wait for them. Yields True once this process
    drives the pipeline, False when a standby was stopped (SIGTERM/SIGINT) before taking over. The lease
    (`pipeline.lease`, None off S3) is renewed until the block ends; losing it calls `pipeline.lost_lease`."""
    check_start(pipeline.config, pipeline.settings)  # before the lock file, the lease or any table exists
    location = pipeline.config.checkpoint_location(pipeline.settings)
    lock, lease = DriverLock(pipeline.config.pipeline, location, pipeline.settings.lock_dir), pipeline.lease
    if standby:
        if not _wait_as_standby(pipeline, lock):
            yield False
            return
    else:
        lock.acquire()
        if lease is not None:
            try:
                lease.acquire()
            except BaseException:
                lock.release()
                raise
    if lease is not None:
        lease.keep_renewed(pipeline.lost_lease)
    try:
        yield True
    finally:
        if lease is not None:
            lease.release()
        lock.release()


def _wait_as_standby(pipeline: "Pipeline", lock: DriverLock) -> bool:
    """Warm up, then wait for the host lock and the lease. False when stopped (SIGTERM/SIGINT) before taking over."""
    name, events, lease = pipeline.config.pipeline, pipeline.events, pipeline.lease
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def waiting(state) -> None:
        events.emit(LeaseWaiting(pipeline=name, holder_host=state.host, holder_pid=state.pid, ttl_s=lease.ttl))

    try:
        events.emit(StandbyReady(pipeline=name, warm_seconds=pipeline.warm_up(), lock=str(lock.path)))
        if not lock.wait(stop):
            events.emit(StandbyStopped(pipeline=name))
            return False
        if lease is not None:
            try:
                lease.acquire(wait=stop, on_wait=waiting)
            except LeaseHeld:
                lock.release()
                if stop.is_set():
                    events.emit(StandbyStopped(pipeline=name))
                    return False
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    events.emit(StandbyTakingOver(pipeline=name))
    return True
