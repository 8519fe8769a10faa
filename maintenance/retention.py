"""Retention: Delta VACUUM; Iceberg expire_snapshots and orphan-file removal (the table format's
`table.maintenance.remove_expired`). Dry-run unless told otherwise.

Guards (maintenance.policy.retention_problems), checked before anything is read or deleted:
- the time-travel window `retain` may not go below `retention.min_retain` nor, for Delta, below the table's
  delta.deletedFileRetentionDuration;
- orphan files (written by a writer that died before committing, or by a commit still in flight) are removed
  only when older than `orphan_older_than`, itself never below `min_orphan_age`;
- Iceberg: the newest snapshot carrying this pipeline's commit record (its resume offsets) is never expired,
  whatever `retain` says, so a stream that was idle while compaction ran still resumes exactly.
Checkpoint backups never need old table files for exactly-once (a restore resumes from the offsets in the table's
own commits); backups older than the window are reported, because they can no longer time-travel to their
table version.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.errors import RetentionRefused
from maintenance.checkpoints import list_backups
from maintenance.health import open_table
from maintenance.policy import MaintainedTable, RetentionRequest, retention_problems

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings


@dataclass
class RetentionResult:
    table: str
    format: str
    dry_run: bool
    retain_hours: float
    orphan_older_than_hours: float
    expire_before: str | None = None
    snapshots_expired: int | None = None  # None: the format has no snapshots to expire (Delta)
    files_deleted: list[str] = field(default_factory=list)  # or: that would be deleted (dry run)
    orphan_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        data = asdict(self)
        data["files_deleted_count"] = len(self.files_deleted)
        data["orphan_files_count"] = len(self.orphan_files)
        data["files_deleted"] = self.files_deleted[:200]
        data["orphan_files"] = self.orphan_files[:200]
        return data

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        what = "" if self.snapshots_expired is None else f"{self.snapshots_expired} snapshot(s) expired, "
        return (f"{self.table}: {'DRY RUN: ' if self.dry_run else ''}{what}{verb} {len(self.files_deleted)} "
                f"unreferenced file(s) older than {self.retain_hours:g}h and {len(self.orphan_files)} orphan "
                f"file(s) older than {self.orphan_older_than_hours:g}h, in {self.seconds:.1f}s")


def retain(spark: "SparkSession", table: MaintainedTable, settings: "Settings", now: datetime,
           dry_run: bool = True, retain_override: timedelta | None = None,
           orphan_override: timedelta | None = None) -> RetentionResult:
    """Check the guards, then run retention (or only report, with `dry_run`)."""
    started = time.monotonic()
    policy = table.policy.retention
    request = RetentionRequest(retain_override or policy.retain_delta, orphan_override or policy.orphan_delta)
    lake = open_table(spark, table, settings)
    table_min, table_key = lake.maintenance.retention_floor()
    problems = retention_problems(policy, request, table_min, table_key)
    if problems:
        raise RetentionRefused(f"{table.path}: retention refused for {table.name}:\n  - " + "\n  - ".join(problems))
    result = RetentionResult(table.name, table.format, dry_run, request.retain.total_seconds() / 3600,
                             request.orphan_older_than.total_seconds() / 3600)
    if policy.allow_short_windows:
        result.notes.append("retention.allow_short_windows is on: the 1h floors do not apply (dev/test tables only)")
    result.notes += _backup_notes(spark, table, settings, request.retain, now)
    outcome = lake.maintenance.remove_expired(request.retain, request.orphan_older_than, now, dry_run)
    result.orphan_older_than_hours = outcome.orphan_older_than.total_seconds() / 3600
    result.notes += outcome.notes
    result.expire_before, result.files_deleted, result.orphan_files = (outcome.expire_before, outcome.files_deleted,
                                                                       outcome.orphan_files)
    result.snapshots_expired = outcome.snapshots_expired
    result.seconds = time.monotonic() - started
    return result


def _backup_notes(spark, table: MaintainedTable, settings, retain_window: timedelta, now: datetime) -> list[str]:
    root = table.pipeline.backup_location(settings)
    times = []
    for backup_id in list_backups(HadoopFS(spark), root):
        try:
            times.append(datetime.strptime(backup_id.split("-", 1)[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))
        except (IndexError, ValueError):
            continue
    old = [t for t in times if t < now - retain_window]
    if not old:
        return []
    return [f"{len(old)} checkpoint backup(s) predate the {retain_window.total_seconds() / 3600:g}h window: they "
            f"stay restorable (a restore resumes from the table's commit offsets), but the table versions they "
            f"saw can no longer be read by time travel"]
