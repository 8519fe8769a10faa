"""The per-pipeline driver lock: a second driver is refused, a standby takes over when the holder dies (kill -9
included), and a stopped standby gives up without the lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ingest.driver_lock import DriverLock
from ingest.errors import DriverLockHeld

HOLDER = """
import sys, time
from ingest.driver_lock import DriverLock
DriverLock("orders", "s3a://bucket/checkpoints/orders", sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _holder(tmp_path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_driver_is_refused_naming_the_holder_and_the_fix(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(DriverLockHeld, match=rf"another driver \(pid {holder.pid}\) .* --standby"):
            DriverLock("orders", "s3a://bucket/checkpoints/orders", tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_a_standby_takes_over_within_a_poll_of_the_holders_kill_minus_9(tmp_path):
    holder = _holder(tmp_path)
    standby = DriverLock("orders", "s3a://bucket/checkpoints/orders", tmp_path)
    taken: dict[str, float] = {}

    def wait() -> None:
        if standby.wait(threading.Event()):
            taken["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    assert "at" not in taken  # held: the standby keeps waiting
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed = time.monotonic()
    waiter.join(10)
    assert taken["at"] - killed < 1.0
    assert standby.holder() == str(os.getpid())
    standby.release()


def test_different_checkpoints_do_not_share_a_lock_and_release_frees_it(tmp_path):
    first = DriverLock("orders", "s3a://bucket/checkpoints/a", tmp_path)
    other = DriverLock("orders", "s3a://bucket/checkpoints/b", tmp_path)
    first.acquire()
    other.acquire()
    first.release()
    again = DriverLock("orders", "s3a://bucket/checkpoints/a", tmp_path)
    again.acquire()
    again.release()
    other.release()


def test_a_stopped_standby_returns_without_the_lock(tmp_path):
    holder = _holder(tmp_path)
    try:
        stop = threading.Event()
        stop.set()
        assert DriverLock("orders", "s3a://bucket/checkpoints/orders", tmp_path).wait(stop) is False
    finally:
        holder.kill()
        holder.wait()
