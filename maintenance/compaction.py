"""Policy-driven compaction: measure, decide (maintenance.policy.decide), then rewrite the chosen partitions one
at a time, newest first.

Delta: OPTIMIZE (bin-pack, or ZORDER BY when configured) per partition through delta-spark. Iceberg:
rewrite_data_files (binpack / sort / zorder) per partition with partial progress off, then rewrite_manifests.
Each partition is one atomic commit: it lands whole or not at all. A commit conflict with the live stream is
retried with backoff; when the attempts run out the partition is skipped with a warning and the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from maintenance.health import collect_health, table_ref
from maintenance.policy import MaintainedTable, decide, format_size, settled_range

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings

ATTEMPTS = 4
_CONFLICTS = ("CommitFailedException", "ConcurrentAppendException", "ConcurrentDeleteReadException",
              "ConcurrentDeleteDeleteException", "ConcurrentTransactionException", "ConcurrentWriteException",
              "MetadataChangedException", "ProtocolChangedException", "ValidationException",
              "DELTA_CONCURRENT", "FileAlreadyExistsException")


def is_conflict(exc: BaseException) -> bool:
    """A commit lost a race with another writer (the stream): nothing of ours landed, safe to retry."""
    text = f"{type(exc).__name__}: {exc}"
    return any(name in text for name in _CONFLICTS)


@dataclass
class PartitionResult:
    partition: str
    status: str  # compacted | skipped | failed | planned
    reason: str
    files_before: int
    files_after: int
    bytes_rewritten: int = 0
    seconds: float = 0.0
    attempts: int = 0


@dataclass
class CompactionResult:
    table: str
    format: str
    dry_run: bool
    partitions: list[PartitionResult] = field(default_factory=list)
    skipped_by_policy: list[dict] = field(default_factory=list)
    manifests_rewritten: int = 0
    seconds: float = 0.0
    # The scheduler interval of the run (ISO start or None, ISO end); chosen partitions that went quiet in it and
    # those that are backlog from before it.
    interval: list[str | None] | None = None
    from_interval: int = 0
    backlog: int = 0

    @property
    def files_before(self) -> int:
        return sum(p.files_before for p in self.partitions)

    @property
    def files_after(self) -> int:
        return sum(p.files_after for p in self.partitions)

    @property
    def bytes_rewritten(self) -> int:
        return sum(p.bytes_rewritten for p in self.partitions)

    def to_json(self) -> dict:
        data = asdict(self)
        mb_s = self.bytes_rewritten / 1024 ** 2 / self.seconds if self.seconds else 0.0
        data.update(files_before=self.files_before, files_after=self.files_after,
                    bytes_rewritten=self.bytes_rewritten, mb_per_s=round(mb_s, 2), seconds=round(self.seconds, 2))
        return data

    def summary(self) -> str:
        done = [p for p in self.partitions if p.status == "compacted"]
        mb_s = self.bytes_rewritten / 1024 ** 2 / self.seconds if self.seconds else 0.0
        verb = "would compact" if self.dry_run else "compacted"
        return (f"{self.table}: {verb} {len(done) if not self.dry_run else len(self.partitions)} partition(s), "
                f"files {self.files_before} -> {self.files_after if not self.dry_run else '?'}, "
                f"{format_size(self.bytes_rewritten)} rewritten in {self.seconds:.1f}s ({mb_s:.1f} MB/s); "
                f"{len(self.skipped_by_policy)} left alone by policy, "
                f"{sum(1 for p in self.partitions if p.status in ('skipped', 'failed'))} skipped after conflicts")


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * done / total) if total else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


def compact(spark: "SparkSession", table: MaintainedTable, settings: "Settings", now: datetime,
            dry_run: bool = False, partitions: list[str] | None = None, include_hot: bool = False,
            interval: tuple[datetime | None, datetime] | None = None,
            echo: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> CompactionResult:
    """Compact the partitions the policy selects (or only `partitions`, or only those that settled in a
    scheduler `interval`). `now` decides what is hot."""
    started = time.monotonic()
    health = collect_health(spark, table, settings, now)
    plan = decide(health, table.policy.compaction, now, only=partitions, include_hot=include_hot, interval=interval)
    result = CompactionResult(table.name, table.format, dry_run,
                              skipped_by_policy=[asdict(s) for s in plan.skipped],
                              interval=None if interval is None else [
                                  interval[0].isoformat() if interval[0] else None, interval[1].isoformat()],
                              from_interval=plan.from_interval, backlog=plan.backlog)
    if interval is not None:
        low, high = settled_range(interval, table.policy.compaction)
        echo(f"  interval: {plan.from_interval} partition(s) went quiet in it (newest file in "
             f"[{low.isoformat() if low else '-'}, {high.isoformat()})), {plan.backlog} from the backlog before it")
    for skip in plan.skipped:
        echo(f"  skip {skip.partition or '(table)'}: {skip.reason}")
    if dry_run:
        for choice in plan.chosen:
            echo(f"  would compact {choice.partition or '(table)'}: {choice.reason}")
            result.partitions.append(PartitionResult(choice.partition, "planned", choice.reason, choice.files,
                                                     choice.files))
        result.seconds = time.monotonic() - started
        return result
    if plan.chosen:
        _check_layout_columns(spark, table, settings)
    runner = _delta_rewrite if table.format == "delta" else _iceberg_rewrite
    for index, choice in enumerate(plan.chosen, start=1):
        part = _compact_partition(spark, table, settings, choice.partition, choice.files, runner, echo, sleep)
        result.partitions.append(part)
        echo(f"  {_bar(index, len(plan.chosen))} {choice.partition or '(table)'}: {part.status}, files "
             f"{part.files_before} -> {part.files_after}, {format_size(part.bytes_rewritten)} in "
             f"{part.seconds:.1f}s{'' if part.status == 'compacted' else ' (' + part.reason + ')'}")
    if table.format == "iceberg" and any(p.status == "compacted" for p in result.partitions):
        result.manifests_rewritten = _with_retries(lambda: _iceberg_rewrite_manifests(spark, table, settings),
                                                   "rewrite_manifests", echo, sleep)[0] or 0
    result.seconds = time.monotonic() - started
    return result


def _with_retries(action, what: str, echo, sleep) -> tuple[object | None, int, str]:
    """(result, attempts, error). Conflicts are retried with backoff; other errors propagate."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action(), attempt, ""
        except Exception as exc:  # noqa: BLE001 - classified: only conflicts are retried
            if not is_conflict(exc):
                raise
            message = str(exc).splitlines()[0][:200]
            if attempt == ATTEMPTS:
                echo(f"  WARNING {what}: still conflicting after {attempt} attempts, skipped ({message})")
                return None, attempt, f"conflict after {attempt} attempts: {message}"
            delay = min(1.0 * 2 ** (attempt - 1), 8.0)
            echo(f"  {what}: commit conflict with a concurrent writer, retry {attempt} in {delay:.0f}s")
            sleep(delay)
    raise AssertionError("unreachable")


def _compact_partition(spark, table, settings, partition, files_before, runner, echo, sleep) -> PartitionResult:
    started = time.monotonic()
    outcome, attempts, error = _with_retries(lambda: runner(spark, table, settings, partition),
                                             partition or table.name, echo, sleep)
    seconds = time.monotonic() - started
    if outcome is None:
        return PartitionResult(partition, "skipped", error, files_before, files_before, 0, seconds, attempts)
    removed, added, rewritten = outcome
    return PartitionResult(partition, "compacted", f"{removed} files rewritten into {added}", files_before,
                           files_before - removed + added, rewritten, seconds, attempts)


def _predicate(table: MaintainedTable, partition: str) -> str | None:
    if not partition:
        return None
    column, _, value = partition.partition("=")
    return f"`{column}` = '{value}'"


def _check_layout_columns(spark, table: MaintainedTable, settings) -> None:
    ref = table_ref(table, settings)
    frame = spark.read.format("delta").load(ref) if table.format == "delta" else spark.table(ref)
    table.columns_check(frame.columns)


def _delta_rewrite(spark, table: MaintainedTable, settings, partition: str) -> tuple[int, int, int]:
    from delta.tables import DeltaTable

    compaction = table.policy.compaction
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(compaction.target_bytes))
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(compaction.small_below))
    builder = DeltaTable.forPath(spark, table_ref(table, settings)).optimize()
    where = _predicate(table, partition)
    if where:
        builder = builder.where(where)
    metrics = (builder.executeZOrderBy(*compaction.zorder_by) if compaction.zorder_by
               else builder.executeCompaction()).select("metrics").first()["metrics"]
    return (int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]),
            int(metrics["filesRemoved"]["totalSize"] or 0))


def _iceberg_names(table: MaintainedTable, settings) -> tuple[str, str]:
    catalog, namespace, name = table_ref(table, settings).split(".")
    return catalog, f"{namespace}.{name}"


def _iceberg_rewrite(spark, table: MaintainedTable, settings, partition: str) -> tuple[int, int, int]:
    compaction = table.policy.compaction
    catalog, name = _iceberg_names(table, settings)
    args = [f"table => '{name}'"]
    if compaction.zorder_by:
        args += ["strategy => 'sort'", f"sort_order => 'zorder({', '.join(compaction.zorder_by)})'"]
    elif compaction.sort_by:
        order = ", ".join(f"{c} ASC NULLS LAST" for c in compaction.sort_by)
        args += ["strategy => 'sort'", f"sort_order => '{order}'"]
    else:
        args.append("strategy => 'binpack'")
    where = _predicate(table, partition)
    if where:
        args.append(f"where => \"{where.replace('`', '')}\"")
    options = {"target-file-size-bytes": compaction.target_bytes, "min-file-size-bytes": compaction.small_below,
               "min-input-files": 2, "partial-progress.enabled": "false"}
    args.append("options => map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")")
    row = spark.sql(f"CALL {catalog}.system.rewrite_data_files({', '.join(args)})").first()
    return int(row["rewritten_data_files_count"]), int(row["added_data_files_count"]), \
        int(row["rewritten_bytes_count"])


def _iceberg_rewrite_manifests(spark, table: MaintainedTable, settings) -> int:
    catalog, name = _iceberg_names(table, settings)
    row = spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => '{name}')").first()
    return int(row["rewritten_manifests_count"])
