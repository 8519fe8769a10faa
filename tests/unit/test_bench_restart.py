"""bench.restart's measuring parts, without a stack: the kill and restart, and the first new commit in run events."""

from __future__ import annotations

import subprocess
import time

from bench.restart import first_commit_after, kill_and_restart
from ingest.events import BatchCommitted, Events, JsonLines, RunStarted


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_kill_and_restart_kills_the_group_and_times_the_first_new_commit():
    old = _sleeper()
    started: list[subprocess.Popen] = []
    polls: list[float] = []

    def restart() -> subprocess.Popen:
        started.append(_sleeper())
        return started[-1]

    def first_commit(since: float) -> float | None:
        polls.append(since)
        return since + 1.5 if len(polls) >= 3 else None  # the restarted driver commits on the third look

    try:
        seconds, killed, new = kill_and_restart(old, restart, first_commit, timeout=10, poll=0.01)
        assert old.returncode == -9  # kill -9, and waited for
        assert new is started[0] and new.poll() is None
        assert seconds == 1.5 and polls == [killed] * 3 and abs(killed - time.time()) < 5
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_first_commit_after_takes_the_first_batch_with_records_after_the_kill(tmp_path):
    events_file = tmp_path / "run.events.jsonl"
    assert first_commit_after(events_file, 0) is None  # no events yet: the driver has not started
    with events_file.open("w") as out:
        events = Events(JsonLines(out))
        events.emit(RunStarted(pipeline="p", action="resume", reason="", lineage="l", spark_seconds=1.0,
                               read_seconds=1.0, at=100.0))
        for batch, (at, rows) in enumerate([(90.0, 5), (101.0, 0), (102.0, 7), (103.0, 3)]):
            events.emit(BatchCommitted(pipeline="p", batch_id=batch, rows=rows, dead_letters=0, at=at))
    assert first_commit_after(events_file, 95.0) == 102.0  # not the earlier run's, not the empty batch
