"""The Delta log checkpointer's cadence, single flight and failure handling, against a fake delta-rs table."""

from __future__ import annotations

import threading

import pytest
from deltalake.exceptions import DeltaError

from ingest.formats.delta_checkpoints import SPARK_CHECKPOINT_INTERVAL, LogCheckpointer, takes_over


class FakeTable:
    def __init__(self, fail: int = 0, gate: threading.Event | None = None):
        self.version_ = 0
        self.checkpoints: list[int] = []
        self.cleanups: list[int] = []
        self.fail = fail
        self.gate = gate

    def update_incremental(self) -> None:
        pass

    def create_checkpoint(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail:
            self.fail -= 1
            raise DeltaError("store unreachable")
        self.checkpoints.append(self.version_)

    def cleanup_metadata(self) -> None:
        self.cleanups.append(self.version_)

    def version(self) -> int:
        return self.version_


def commit(checkpointer: LogCheckpointer, table: FakeTable, times: int) -> None:
    for _ in range(times):
        table.version_ += 1
        checkpointer.committed()
        checkpointer.wait(10)


def test_first_commit_of_a_process_and_then_every_tenth_checkpoints():
    table = FakeTable()
    opened = []
    checkpointer = LogCheckpointer("t", lambda: opened.append(1) or table, every=10)
    commit(checkpointer, table, 25)
    assert table.checkpoints == [1, 11, 21]
    assert [version for version, _ in checkpointer.written] == [1, 11, 21]
    assert opened == [1]  # opened once, then updated incrementally


def test_expired_log_files_go_after_the_first_checkpoint_and_every_nth():
    table = FakeTable(fail=1)  # a failed checkpoint is not counted
    checkpointer = LogCheckpointer("t", lambda: table, every=1, cleanup_every=3)
    commit(checkpointer, table, 8)
    assert table.checkpoints == [2, 3, 4, 5, 6, 7, 8]
    assert table.cleanups == [2, 5, 8] and checkpointer.cleanups == 3


def test_spark_never_checkpoints_inside_a_commit_on_a_table_lakeline_makes():
    assert SPARK_CHECKPOINT_INTERVAL == 2**31 - 1  # Delta reads the property as an Int
    assert takes_over(str(SPARK_CHECKPOINT_INTERVAL))


def test_commits_during_a_running_checkpoint_start_no_second_one():
    gate = threading.Event()
    table = FakeTable(gate=gate)
    checkpointer = LogCheckpointer("t", lambda: table, every=2)
    for _ in range(7):  # the first starts a checkpoint that blocks; later due ones find it still running
        table.version_ += 1
        checkpointer.committed()
    gate.set()
    checkpointer.wait(10)
    assert len(table.checkpoints) == 1
    commit(checkpointer, table, 2)  # the cadence goes on after it
    assert len(table.checkpoints) == 2


def test_a_failed_checkpoint_is_logged_and_retried_at_the_next_cadence(caplog):
    table = FakeTable(fail=1)
    checkpointer = LogCheckpointer("orders", lambda: table, every=3)
    commit(checkpointer, table, 1)
    assert checkpointer.failures == 1 and table.checkpoints == []
    assert "orders: log checkpoint failed (DeltaError: store unreachable)" in caplog.text
    commit(checkpointer, table, 3)
    assert table.checkpoints == [4]


@pytest.mark.parametrize("interval, expected", [
    (None, False),      # Delta's default 10: Spark checkpoints as often as Lakeline would
    ("10", False), ("5", False),
    ("11", True), ("1000", True),
    ("ten", False),     # not ours to interpret: leave the table to Spark
])
def test_lakeline_takes_over_only_where_the_table_leaves_checkpoints_sparser(interval, expected):
    assert takes_over(interval) is expected
