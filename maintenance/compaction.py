"""Policy-driven compaction: measure, decide (maintenance.policy.decide), then rewrite the chosen partitions one
at a time, newest first.

The rewrite is the table format's (`table.maintenance.rewrite_partition`): Delta OPTIMIZE (bin-pack, or ZORDER BY when
configured), Iceberg rewrite_data_files (binpack / sort / zorder) with partial progress off, then its manifests
(`tidy_metadata`). Each partition is one atomic commit: it lands whole or not at all. A commit conflict with the
live stream is retried with backoff; when the attempts run out the partition is skipped with a warning and the run
goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ingest.errors import CommitConflict
from ingest.formats import LakeTable, format_for
from ingest.formats.table_maintenance import Layout
from ingest.retry import retrying
from maintenance.health import collect_health, open_table
from maintenance.policy import MaintainedTable, decide, format_size, settled_range

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings

ATTEMPTS = 4


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


def compact(spark: "SparkSession", table: MaintainedTable, settings: "Settings", now: datetime,
            dry_run: bool = False, partitions: list[str] | None = None, include_hot: bool = False,
            interval: tuple[datetime | None, datetime] | None = None,
            sleep: Callable[[float], None] = time.sleep,
            on_progress: Callable[[int, int, PartitionResult], None] | None = None) -> CompactionResult:
    """Compact the partitions the policy selects (or only `partitions`, or only those that settled in a
    scheduler `interval`). `now` decides what is hot. `on_progress(done, total, partition)` after each partition."""
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
        log.info(f"  interval: {plan.from_interval} partition(s) went quiet in it (newest file in "
             f"[{low.isoformat() if low else '-'}, {high.isoformat()})), {plan.backlog} from the backlog before it")
    for skip in plan.skipped:
        log.info(f"  skip {skip.partition or '(table)'}: {skip.reason}")
    if dry_run:
        for choice in plan.chosen:
            log.info(f"  would compact {choice.partition or '(table)'}: {choice.reason}")
            result.partitions.append(PartitionResult(choice.partition, "planned", choice.reason, choice.files,
                                                     choice.files))
        result.seconds = time.monotonic() - started
        return result
    lake = open_table(spark, table, settings)
    if plan.chosen:
        table.columns_check(lake.read().columns)
    compaction = table.policy.compaction
    layout = Layout(compaction.target_bytes, compaction.small_below, tuple(compaction.sort_by),
                    tuple(compaction.zorder_by))
    classify = format_for(table.format).classify
    for index, choice in enumerate(plan.chosen, start=1):
        part = _compact_partition(lake, layout, choice.partition, choice.files, classify, sleep)
        result.partitions.append(part)
        if on_progress is not None:
            on_progress(index, len(plan.chosen), part)
        log.info(f"  {index}/{len(plan.chosen)} {choice.partition or '(table)'}: {part.status}, files "
             f"{part.files_before} -> {part.files_after}, {format_size(part.bytes_rewritten)} in "
             f"{part.seconds:.1f}s{'' if part.status == 'compacted' else ' (' + part.reason + ')'}")
    if any(p.status == "compacted" for p in result.partitions):
        tidied = _with_retries(lake.maintenance.tidy_metadata, "rewrite_manifests", classify, sleep)[0]
        result.manifests_rewritten = tidied or 0
    result.seconds = time.monotonic() - started
    return result


def _with_retries(action, what: str, classify, sleep) -> tuple[object | None, int, str]:
    """(result, attempts, error). Conflicts (by the format's classification) are retried with backoff; after
    ATTEMPTS the action is given up with a warning; other errors propagate."""
    tries = 0

    def attempt():
        nonlocal tries
        tries += 1
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - classified: only conflicts are retried
            if classify(exc) is not CommitConflict:
                raise
            raise CommitConflict(str(exc).splitlines()[0][:200]) from exc

    def on_retry(number: int, _error: BaseException, delay: float) -> None:
        log.info(f"  {what}: commit conflict with a concurrent writer, retry {number} in {delay:.0f}s")

    try:
        for trying in retrying((CommitConflict,), ATTEMPTS, on_retry=on_retry, sleep=sleep):
            with trying:
                return attempt(), tries, ""
    except CommitConflict as exc:
        log.warning(f"{what}: still conflicting after {tries} attempts, skipped ({exc})")
        return None, tries, f"conflict after {tries} attempts: {exc}"
    raise AssertionError("unreachable")


def _compact_partition(lake: LakeTable, layout: Layout, partition: str, files_before: int, classify,
                       sleep) -> PartitionResult:
    started = time.monotonic()
    outcome, attempts, error = _with_retries(lambda: lake.maintenance.rewrite_partition(partition or None, layout),
                                             partition or lake.ref, classify, sleep)
    seconds = time.monotonic() - started
    if outcome is None:
        return PartitionResult(partition, "skipped", error, files_before, files_before, 0, seconds, attempts)
    return PartitionResult(partition, "compacted", f"{outcome.files_removed} files rewritten into "
                           f"{outcome.files_added}", files_before,
                           files_before - outcome.files_removed + outcome.files_added, outcome.bytes_rewritten,
                           seconds, attempts)
