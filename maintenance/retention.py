"""Retention: Delta VACUUM; Iceberg expire_snapshots and orphan-file removal. Dry-run unless told otherwise.

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

import re
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY
from maintenance.health import table_ref
from maintenance.policy import MaintainedTable, RetentionRefused, RetentionRequest, retention_problems

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings

_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(week|day|hour|minute|second)s?\s*$", re.IGNORECASE)
_UNIT = {"week": 604800, "day": 86400, "hour": 3600, "minute": 60, "second": 1}
DELTA_DEFAULT_DELETED_RETENTION = timedelta(weeks=1)


@dataclass
class RetentionResult:
    table: str
    format: str
    dry_run: bool
    retain_hours: float
    orphan_older_than_hours: float
    expire_before: str | None = None
    snapshots_expired: int = 0
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
        what = f"{self.snapshots_expired} snapshot(s) expired, " if self.format == "iceberg" else ""
        return (f"{self.table}: {'DRY RUN: ' if self.dry_run else ''}{what}{verb} {len(self.files_deleted)} "
                f"unreferenced file(s) older than {self.retain_hours:g}h and {len(self.orphan_files)} orphan "
                f"file(s) older than {self.orphan_older_than_hours:g}h, in {self.seconds:.1f}s")


def parse_interval(value: str | None) -> timedelta | None:
    """Delta table property values such as 'interval 1 week' / 'interval 168 hours'."""
    if not value:
        return None
    match = _INTERVAL.match(value)
    if not match:
        return None
    return timedelta(seconds=int(match.group(1)) * _UNIT[match.group(2).lower()])


def retain(spark: "SparkSession", table: MaintainedTable, settings: "Settings", now: datetime,
           dry_run: bool = True, retain_override: timedelta | None = None,
           orphan_override: timedelta | None = None, echo=print) -> RetentionResult:
    """Check the guards, then run retention (or only report, with `dry_run`)."""
    started = time.monotonic()
    policy = table.policy.retention
    request = RetentionRequest(retain_override or policy.retain_delta, orphan_override or policy.orphan_delta)
    ref = table_ref(table, settings)
    table_min, table_key = None, ""
    if table.format == "delta":
        table_min = _delta_deleted_retention(spark, ref)
        table_key = "delta.deletedFileRetentionDuration"
    problems = retention_problems(policy, request, table_min, table_key)
    if problems:
        raise RetentionRefused(f"{table.path}: retention refused for {table.name}:\n  - " + "\n  - ".join(problems))
    result = RetentionResult(table.name, table.format, dry_run, request.retain.total_seconds() / 3600,
                             request.orphan_older_than.total_seconds() / 3600)
    if policy.allow_short_windows:
        result.notes.append("retention.allow_short_windows is on: the 1h floors do not apply (dev/test tables only)")
    result.notes += _backup_notes(spark, table, settings, request.retain, now)
    if table.format == "delta":
        _delta_vacuum(spark, ref, request, dry_run, result)
    else:
        _iceberg_retention(spark, table, ref, request, now, dry_run, result, echo)
    result.seconds = time.monotonic() - started
    return result


def _delta_deleted_retention(spark, location: str) -> timedelta:
    from delta.tables import DeltaTable

    props = DeltaTable.forPath(spark, location).detail().select("properties").first()["properties"] or {}
    return parse_interval(props.get("delta.deletedFileRetentionDuration")) or DELTA_DEFAULT_DELETED_RETENTION


def _delta_vacuum(spark, location: str, request: RetentionRequest, dry_run: bool, result: RetentionResult) -> None:
    """VACUUM deletes files no version within `retain` references, including orphans older than `retain`; Delta
    has a single interval for both, so the orphan interval used is max(retain, orphan_older_than)."""
    hours = max(request.retain, request.orphan_older_than).total_seconds() / 3600
    result.orphan_older_than_hours = hours
    result.notes.append("Delta VACUUM uses one interval for unreferenced and orphan files: "
                        f"max(retain, orphan_older_than) = {hours:g}h")
    listed = [r[0] for r in spark.sql(f"VACUUM delta.`{location}` RETAIN {hours} HOURS DRY RUN").collect()]
    result.files_deleted = listed
    if not dry_run and listed:
        spark.sql(f"VACUUM delta.`{location}` RETAIN {hours} HOURS")


def _iceberg_retention(spark, table: MaintainedTable, ident: str, request: RetentionRequest, now: datetime,
                       dry_run: bool, result: RetentionResult, echo) -> None:
    from pyspark.sql import functions as F

    catalog, namespace, name = ident.split(".")
    cutoff = now - request.retain
    protected_ms = spark.sql(
        f"SELECT max(unix_millis(s.committed_at)) FROM {ident}.snapshots s JOIN {ident}.history h "
        f"ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor AND s.summary['{COMMIT_KEY}'] IS NOT NULL"
    ).first()[0]
    protected = datetime.fromtimestamp(protected_ms / 1000, UTC) if protected_ms is not None else None
    if protected is not None and protected <= cutoff:
        result.notes.append(f"kept the snapshot of {protected.isoformat(timespec='seconds')} and later: it holds "
                            f"the pipeline's newest commit record (resume offsets)")
        cutoff = protected
    result.expire_before = cutoff.isoformat(timespec="seconds")
    stamp = cutoff.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    current = spark.sql(f"SELECT snapshot_id FROM {ident}.history WHERE is_current_ancestor "
                        f"ORDER BY made_current_at DESC LIMIT 1").collect()
    expiring = spark.table(f"{ident}.snapshots").where(F.col("committed_at") < F.lit(stamp).cast("timestamp"))
    if current:
        expiring = expiring.where(F.col("snapshot_id") != current[0][0])
    result.snapshots_expired = expiring.count()
    if not dry_run and result.snapshots_expired:
        row = spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{namespace}.{name}', "
                        f"older_than => TIMESTAMP '{stamp}', retain_last => 1)").first()
        result.files_deleted = [f"{row['deleted_data_files_count']} data files",
                                f"{row['deleted_manifest_files_count']} manifests",
                                f"{row['deleted_manifest_lists_count']} manifest lists"]
    result.orphan_files = remove_iceberg_orphans(spark, ident, now - request.orphan_older_than, dry_run)


def remove_iceberg_orphans(spark, ident: str, older_than: datetime, dry_run: bool) -> list[str]:
    """Files under the table location that no snapshot references and that are older than `older_than`.

    Uses Iceberg's action API rather than the procedure: the procedure hard-codes a 24 h floor against the
    wall clock, while Lakeline's floor is the table file's min_orphan_age and `now` is a parameter (the DAG's
    data interval end). Deletion goes through the recording callback only when not a dry run."""
    from pyspark.java_gateway import ensure_callback_server_started

    jvm = spark._jvm  # noqa: SLF001
    ensure_callback_server_started(spark.sparkContext._gateway)  # noqa: SLF001
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ident)  # noqa: SLF001
    recorder = _Recorder()
    action = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)  # noqa: SLF001
              .deleteOrphanFiles(iceberg_table).olderThan(int(older_than.timestamp() * 1000))
              .deleteWith(recorder))
    action.execute()
    found = sorted(recorder.paths)
    if not dry_run:
        io = iceberg_table.io()
        for path in found:
            io.deleteFile(path)
    return found


class _Recorder:
    """java.util.function.Consumer<String> that only records what the action would delete."""

    def __init__(self):
        self.paths: list[str] = []

    def accept(self, path):
        self.paths.append(str(path))

    class Java:
        implements = ["java.util.function.Consumer"]


def _backup_notes(spark, table: MaintainedTable, settings, retain_window: timedelta, now: datetime) -> list[str]:
    from ingest.adapters.hadoop_fs import HadoopFS
    from maintenance.checkpoints import list_backups

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
