"""Maintenance's side of a table: `TableMaintenance`, reached as `LakeTable.maintenance`.

The stream never calls these; `maintenance/` (health, compaction, retention, drills) and the benchmarks do. Each
format has its own (`delta_maintenance.py`, `iceberg_maintenance.py`), so callers never branch on the format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame


@dataclass
class TableFiles:
    """A table's live data files and its version history, as measured (maintenance.health turns this into the
    per-partition health the policy decides on)."""

    location: str
    # (partition key 'col=value/col=value' (ingest.partitioning.partition_key) or '', bytes, newest write time)
    files: list[tuple[str, int, datetime | None]]
    versions: int  # Delta versions in the log / Iceberg snapshots retained
    current_version: int | None
    metadata_bytes: int  # _delta_log or Iceberg metadata folder
    oldest_version_at: datetime | None
    last_compaction_at: datetime | None


@dataclass(frozen=True)
class Layout:
    """How compaction lays out the rewritten files."""

    target_bytes: int
    small_below: int
    sort_by: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()


@dataclass
class Rewrite:
    """What one compaction commit did: the files it removed and added (the commit's own metrics)."""

    files_removed: int
    files_added: int
    bytes_rewritten: int

    def __add__(self, other: "Rewrite") -> "Rewrite":
        """Two commits' counts summed (a rewrite of several partitions, a commit each)."""
        return Rewrite(self.files_removed + other.files_removed, self.files_added + other.files_added,
                       self.bytes_rewritten + other.bytes_rewritten)


class RewriteNeedsSpark(Exception):
    """A Spark-free rewrite cannot do this table (table features its library does not write): use Spark's."""


class PartitionRewriter(Protocol):
    """Compaction without Spark (`TableFormat.rewriter`): each partition in a commit of its own."""

    def rewrite_partitions(self, partitions: "Sequence[str]", layout: Layout,
                           committing: "Callable[[], AbstractContextManager]" = nullcontext) -> Rewrite:
        """The counts of the commits alone. CommitConflict when a commit lost to a conflicting writer,
        RewriteNeedsSpark when the table needs Spark's rewrite. `committing` wraps each commit and its retries
        where the library makes the commit a step of its own (pyiceberg; delta-rs' OPTIMIZE is one call)."""


@dataclass
class RetentionOutcome:
    """What retention removed (or, in a dry run, would remove)."""

    orphan_older_than: timedelta  # the orphan age the format really applied
    files_deleted: list[str] = field(default_factory=list)
    orphan_files: list[str] = field(default_factory=list)
    snapshots_expired: int | None = None  # None: the format has no snapshots to expire
    expire_before: str | None = None
    notes: list[str] = field(default_factory=list)


class TableMaintenance(ABC):
    """Measure, compact, expire and drop one table (the `LakeTable` it was reached from, in the same session)."""

    @abstractmethod
    def measure(self) -> TableFiles:
        """Live data files per partition (keyed by the table's partitioning names and values) and the version
        history."""

    def file_counts(self) -> dict[str, int]:
        """Live data files per partition key now (what a compaction run reports as there after it, the stream's
        new files included). Formats override it with a lighter query than `measure`."""
        counts: dict[str, int] = {}
        for partition, _, _ in self.measure().files:
            counts[partition] = counts.get(partition, 0) + 1
        return counts

    @abstractmethod
    def rewrite_partitions(self, partitions: "Sequence[str] | None", layout: Layout) -> Rewrite:
        """Compact these partitions (keys from `measure`; None: the whole table) in one atomic commit; the counts
        are those of that commit alone (files the stream adds meanwhile are not in them)."""

    def tidy_metadata(self) -> int:
        """After compaction: rewrite what the format's metadata needs (Iceberg manifests). Returns the count."""
        return 0

    def retention_floor(self) -> tuple[timedelta | None, str]:
        """The table's own minimum retention window and the property that sets it (None: the format has none)."""
        return None, ""

    @abstractmethod
    def remove_expired(self, retain: timedelta, orphan_older_than: timedelta, now: datetime,
                       dry_run: bool) -> RetentionOutcome:
        """Remove versions older than `retain` (keeping the one holding the pipeline's newest commit record) and
        the files only they reference, plus orphan files older than `orphan_older_than`."""

    @abstractmethod
    def replace_rows(self, frame: "DataFrame") -> None:
        """Overwrite the table's partitions with `frame` (benchmarks: lay out the same rows in other files)."""

    @abstractmethod
    def drop(self) -> None:
        """Drop the table and its files (drill and benchmark copies only)."""
