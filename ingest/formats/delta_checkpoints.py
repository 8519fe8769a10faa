"""Delta log checkpoints written off the commit path.

Delta-Spark writes a log checkpoint inside the commit whose version is a multiple of `delta.checkpointInterval`
(10 by default): about 1.2 s of Spark jobs on the local stack, against 0.35 s for the commit itself, so every tenth
batch of a stream is four times slower (the p99 spike of bench.latency). Lakeline instead writes the checkpoint
with delta-rs (the same library its analyst read uses) on a thread of its own: about 0.1 s, while the stream goes
on. The tables Lakeline creates carry `delta.checkpointInterval` = 2^31 - 1 (SPARK_CHECKPOINT_INTERVAL), so Spark
never writes one inside a commit: with 1000 it still did at every thousandth version, and that commit's batch took
15 s on bench.steady (the checkpoint built from the table's whole state, then Delta's expired-log cleanup listing
the whole log). The expired-log cleanup Spark ran after its checkpoints runs here instead, after this process's
first checkpoint and every LOG_CLEANUP_EVERY-th: delta-rs `cleanup_metadata` deletes the log files older than the
table's `delta.logRetentionDuration` (30 days by default) that a checkpoint covers, as Spark's did. A table Lakeline
made that another writer commits to for long without a Lakeline pipeline gets no checkpoints from that writer: set
its `delta.checkpointInterval` back (e.g. to 100) for it.

Why this is safe: a checkpoint is a summary of versions that can no longer change. It is one object written whole
(a reader sees it entirely or not at all), and `_last_checkpoint` is only a hint. A checkpoint interrupted by a
crash leaves at most an unreferenced object. delta-rs keeps every action a reader needs (protocol and metadata
with their table features, files, `txn` application ids), which `tests/integration/test_sinks.py` checks through
Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ingest.formats.background import EveryNCommits

LOG_CHECKPOINT_EVERY = 10  # commits by this process between two checkpoints (Delta's own default cadence)
SPARK_CHECKPOINT_INTERVAL = 2**31 - 1  # delta.checkpointInterval on tables Lakeline creates: Spark never checkpoints
LOG_CLEANUP_EVERY = 100  # checkpoints between two expired-log cleanups (and the first of a process)
CHECKPOINT_INTERVAL_KEY = "delta.checkpointInterval"
DEFAULT_SPARK_INTERVAL = 10  # Delta's default when the table does not set the property


class CheckpointableTable(Protocol):
    """What the checkpointer needs of a delta-rs `DeltaTable`."""

    def update_incremental(self) -> None: ...
    def create_checkpoint(self) -> None: ...
    def cleanup_metadata(self) -> None: ...
    def version(self) -> int: ...


def takes_over(table_interval: str | None) -> bool:
    """Whether Lakeline should write a table's checkpoints: only where Spark's own cadence (the table's
    `delta.checkpointInterval`, 10 when unset) is sparser than Lakeline's. A table whose owner keeps Delta's
    default, or set a dense interval on purpose, is left to Spark."""
    try:
        interval = int(table_interval) if table_interval is not None else DEFAULT_SPARK_INTERVAL
    except ValueError:
        return False
    return interval > LOG_CHECKPOINT_EVERY


class LogCheckpointer(EveryNCommits):
    """Writes a table's log checkpoint after the first commit of this process and then after every
    `every`-th, on a background thread, one at a time (a commit made while one runs is covered by the next), and
    removes the expired log files after the first checkpoint and every `cleanup_every`-th. A failed checkpoint is
    logged and retried at the next cadence; it never fails a commit."""

    what = "log checkpoint"
    consequence = "Readers still read the table, only more log files each time."

    def __init__(self, name: str, open_table: Callable[[], CheckpointableTable], every: int = LOG_CHECKPOINT_EVERY,
                 cleanup_every: int = LOG_CLEANUP_EVERY):
        super().__init__(name, every)
        self.cleanup_every = cleanup_every
        self.cleanups = 0
        from deltalake.exceptions import DeltaError  # delta-rs loads only where a table takes checkpoints over

        self.retryable = (DeltaError, OSError)
        self._open_table = open_table
        self._table: CheckpointableTable | None = None

    @property
    def written(self) -> list[tuple[int, float]]:
        """(version, seconds) of each checkpoint written."""
        return [(int(version), seconds) for version, seconds in self.done]

    def _work(self) -> int:
        if self._table is None:
            self._table = self._open_table()
        else:
            self._table.update_incremental()
        self._table.create_checkpoint()
        if len(self.done) % self.cleanup_every == 0:  # `done` holds the runs before this one
            self._table.cleanup_metadata()
            self.cleanups += 1
        return self._table.version()
