"""Policy-driven compaction: measure, decide (maintenance.policy.decide), then rewrite the chosen partitions in
commits: each hot partition the stream writes (chosen because it is over max_files_per_partition) in a commit of
its own, first; the settled partitions together, up to SETTLED_PER_COMMIT per commit.

The rewrite is the table format's (`table.maintenance.rewrite_partitions`): Delta OPTIMIZE (bin-pack, or ZORDER BY
when configured), Iceberg rewrite_data_files (binpack / sort / zorder) with partial progress off, then its manifests
(`tidy_metadata`). Each commit is atomic: its partitions land whole or not at all. A commit conflict with the live
stream is retried with backoff; when the attempts run out the commit's partitions are skipped with a warning and
the run goes on.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ingest.errors import CommitConflict
from ingest.formats import LakeTable, format_for
from ingest.formats.table_maintenance import Layout, PartitionRewriter, RewriteNeedsSpark, TableFiles
from ingest.retry import retrying
from maintenance.health import collect_health, health_json, measure_without_spark, open_table, table_ref
from maintenance.policy import (MaintainedTable, PartitionChoice, Plan, bound_run_policy, decide, format_size,
                                settled_range)
from maintenance.yielding import at_stream_weight, commits_at_stream_weight, spark_jobs_running

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings

ATTEMPTS = 4
# Beside a live stream each commit costs 10-30 s of fixed work whatever it rewrites (a Spark job, the table's state,
# the commit and its conflict check), so a backlog of settled partitions of a few small files each took 20 minutes
# one partition at a time. Bounded so the partition filter stays small.
SETTLED_PER_COMMIT = 100


@dataclass
class CommitResult:
    """One compaction commit: the partitions it covered and what it did, from the commit's own metrics (files the
    stream added meanwhile are not in them)."""

    partitions: list[str]
    status: str  # compacted | skipped
    reason: str
    files_rewritten: int = 0  # files the commit removed
    files_written: int = 0  # files the commit added
    bytes_rewritten: int = 0
    seconds: float = 0.0
    attempts: int = 0
    spark: bool = True  # rewritten by Spark (False: by the format's own library, no JVM)


@dataclass
class PartitionResult:
    """One partition of a run. The counts are measured, never derived: a live stream keeps adding files while the
    run works, so `files_before - files_rewritten + files_written` is not what is there after (it can even be
    below zero: the commit may rewrite files the stream added after `files_before` was counted)."""

    partition: str
    status: str  # compacted | skipped | failed | planned
    reason: str
    files_before: int  # live files in the partition when the run measured it (the plan's count)
    files_now: int | None = None  # live files counted afresh after the run, the stream's new ones included
    commit: int | None = None  # its commit: an index into CompactionResult.commits


def files_added_meanwhile(before: int, rewritten: int, written: int, now: int | None) -> int | None:
    """Files other writers (the stream) added while the run worked: what is there now beyond what the plan saw
    net of the compaction commit. None when there is no count after the run."""
    return None if now is None else now - (before - rewritten + written)


@dataclass
class CompactionResult:
    table: str
    format: str
    dry_run: bool
    partitions: list[PartitionResult] = field(default_factory=list)
    commits: list[CommitResult] = field(default_factory=list)
    skipped_by_policy: list[dict] = field(default_factory=list)
    manifests_rewritten: int = 0
    seconds: float = 0.0
    # The scheduler interval of the run (ISO start or None, ISO end); chosen partitions that went quiet in it and
    # those that are backlog from before it.
    interval: list[str | None] | None = None
    from_interval: int = 0
    backlog: int = 0
    hot_over_bound: int = 0  # chosen although the stream writes them: over max_files_per_partition
    health: dict | None = None  # the table as measured for the plan (maintenance.health.health_json)
    table_files_now: int | None = None  # live files in the whole table counted after the run

    @property
    def files_before(self) -> int:
        return sum(p.files_before for p in self.partitions)

    @property
    def files_rewritten(self) -> int:
        return sum(c.files_rewritten for c in self.commits)

    @property
    def files_written(self) -> int:
        return sum(c.files_written for c in self.commits)

    @property
    def files_now(self) -> int | None:
        counts = [p.files_now for p in self.partitions]
        return None if self.dry_run or None in counts else sum(counts)

    @property
    def bytes_rewritten(self) -> int:
        return sum(c.bytes_rewritten for c in self.commits)

    def to_json(self) -> dict:
        data = asdict(self)
        mb_s = self.bytes_rewritten / 1024 ** 2 / self.seconds if self.seconds else 0.0
        data.update(files_before=self.files_before, files_rewritten=self.files_rewritten,
                    files_written=self.files_written, files_now=self.files_now,
                    bytes_rewritten=self.bytes_rewritten, mb_per_s=round(mb_s, 2), seconds=round(self.seconds, 2))
        return data

    def summary(self) -> str:
        failed = sum(1 for p in self.partitions if p.status in ("skipped", "failed"))
        tail = f"{len(self.skipped_by_policy)} left alone by policy, {failed} skipped after conflicts"
        if self.dry_run:
            return (f"{self.table}: would compact {len(self.partitions)} partition(s) holding {self.files_before} "
                    f"files; {tail}")
        done = [p for p in self.partitions if p.status == "compacted"]
        mb_s = self.bytes_rewritten / 1024 ** 2 / self.seconds if self.seconds else 0.0
        now = self.files_now
        meanwhile = files_added_meanwhile(self.files_before, self.files_rewritten, self.files_written, now)
        added = f" ({meanwhile} added by the stream meanwhile)" if meanwhile is not None and meanwhile > 0 else ""
        counted = "not counted after the run" if now is None else f"{now} there now{added}"
        commits = sum(1 for c in self.commits if c.status == "compacted")
        return (f"{self.table}: compacted {len(done)} partition(s) in {commits} commit(s), rewrote "
                f"{self.files_rewritten} files into {self.files_written}; files in them: {self.files_before} when "
                f"planned, {counted}; "
                f"{format_size(self.bytes_rewritten)} rewritten in {self.seconds:.1f}s ({mb_s:.1f} MB/s); {tail}")


def compact(spark: "SparkSession | None", table: MaintainedTable, settings: "Settings", now: datetime,
            dry_run: bool = False, partitions: list[str] | None = None, include_hot: bool = False,
            interval: tuple[datetime | None, datetime] | None = None,
            sleep: Callable[[float], None] = time.sleep,
            on_progress: Callable[[int, int, PartitionResult], None] | None = None,
            measured: TableFiles | None = None,
            start_spark: "Callable[[], SparkSession] | None" = None, bound_only: bool = False) -> CompactionResult:
    """Compact the partitions the policy selects (or only `partitions`, or only those that settled in a
    scheduler `interval`). `now` decides what is hot. `on_progress(done, total, partition)` after each partition.
    Given the table `measured` (maintenance.health.measure_without_spark), the plan needs no Spark: a dry run none
    at all, and a real run starts it (`start_spark`, when `spark` is None) only when the plan rewrites something.
    A hot partition over the bound is rewritten by the format's own library where it can (no JVM: seconds, where
    Spark's rewrite beside a stream took minutes). `bound_only`: only those, and never Spark (what only Spark can
    rewrite is skipped, left to the next compaction run)."""
    started = time.monotonic()
    if bound_only and measured is None and spark is None:
        log.info(f"  {table.name}: not measurable without Spark; its bound is left to the compaction run")
        return CompactionResult(table.name, table.format, dry_run, seconds=time.monotonic() - started)
    health = collect_health(spark, table, settings, now, measured=measured)
    policy = bound_run_policy(table.policy.compaction) if bound_only else table.policy.compaction
    plan = decide(health, policy, now, only=partitions, include_hot=include_hot, interval=interval)
    if bound_only:
        plan = plan.bound_only()
    result = CompactionResult(table.name, table.format, dry_run,
                              skipped_by_policy=[asdict(s) for s in plan.skipped],
                              interval=None if interval is None else [
                                  interval[0].isoformat() if interval[0] else None, interval[1].isoformat()],
                              from_interval=plan.from_interval, backlog=plan.backlog,
                              hot_over_bound=plan.hot_over_bound, health=health_json(health))
    if interval is not None:
        low, high = settled_range(interval, table.policy.compaction)
        log.info(f"  interval: {plan.from_interval} partition(s) went quiet in it (newest file in "
                 f"[{low.isoformat() if low else '-'}, {high.isoformat()})), {plan.backlog} from the backlog before "
                 f"it, {plan.hot_over_bound} hot over max_files_per_partition")
    for line in skip_lines(plan, bound_only):
        log.info(line)
    if dry_run:
        for choice in plan.chosen:
            log.info(f"  would compact {choice.partition or '(table)'}: {choice.reason}")
            result.partitions.append(PartitionResult(choice.partition, "planned", choice.reason, choice.files))
        result.seconds = time.monotonic() - started
        return result
    if not plan.chosen:
        result.seconds = time.monotonic() - started
        return result
    compaction = table.policy.compaction
    layout = Layout(compaction.target_bytes, compaction.small_below, tuple(compaction.sort_by),
                    tuple(compaction.zorder_by))
    classify = format_for(table.format).classify
    hot = set(plan.hot)
    rewriter = format_for(table.format).rewriter(table_ref(table, settings), settings, layout,
                                                 table.partitioning) if hot else None
    lake: LakeTable | None = None

    def in_spark() -> LakeTable:
        nonlocal spark, lake
        if lake is None:
            if spark is None and start_spark is not None:
                spark = start_spark()
            lake = open_table(spark, table, settings)
            table.columns_check(lake.read().columns)
        return lake

    groups = commit_groups(plan.chosen, hot)
    done = 0
    for number, group in enumerate(groups, start=1):
        names = [c.partition for c in group]
        commit = None
        if rewriter is not None and names[0] in hot:
            commit = _commit_without_spark(rewriter, layout, names, sleep)
            if commit is None:
                rewriter = None  # the table needs Spark's rewrite: so do the partitions after this one
        if commit is None and bound_only:
            commit = CommitResult(names, "skipped", "needs Spark's rewrite: left to the compaction run")
        elif commit is None:
            commit = _commit(in_spark(), layout, names, classify, sleep,
                             lambda: commits_at_stream_weight(spark_jobs_running(spark)))
        result.commits.append(commit)
        for choice in group:
            part = PartitionResult(choice.partition, commit.status, commit.reason, choice.files,
                                   commit=len(result.commits) - 1)
            result.partitions.append(part)
            done += 1
            if on_progress is not None:
                on_progress(done, len(plan.chosen), part)
        log.info(f"  commit {number}/{len(groups)} ({_names(group)}{'' if commit.spark else ', without Spark'}): "
                 f"{commit.status}, {commit.files_rewritten} "
                 f"files rewritten into {commit.files_written} ({sum(c.files for c in group)} when planned), "
                 f"{format_size(commit.bytes_rewritten)} in {commit.seconds:.1f}s"
                 f"{'' if commit.status == 'compacted' else ' (' + commit.reason + ')'}")
    if lake is not None and any(p.status == "compacted" for p in result.partitions):
        tidied = _with_retries(lake.maintenance.tidy_metadata, "rewrite_manifests", classify, sleep)[0]
        result.manifests_rewritten = tidied or 0
    if result.partitions:
        counts = _counts_now(lake, table, settings)
        count_after(result.partitions, counts)
        result.table_files_now = None if counts is None else sum(counts.values())
    result.seconds = time.monotonic() - started
    return result


def skip_lines(plan: Plan, bound_only: bool) -> list[str]:
    """The log lines for the partitions a run leaves. A files-bound run (every minute or few, on tables of hundreds
    of partitions) names only those the stream writes and counts the rest; `--output json` lists them all."""
    shown = [skip for skip in plan.skipped if skip.writing or not bound_only]
    lines = [f"  skip {skip.partition or '(table)'}: {skip.reason}" for skip in shown]
    if len(shown) < len(plan.skipped):
        lines.append(f"  {len(plan.skipped) - len(shown)} partition(s) the stream is not writing: left to the "
                     "compaction runs")
    return lines


def count_after(partitions: list[PartitionResult], counts: dict[str, int] | None) -> None:
    """Set each partition's `files_now` from a fresh count of the table's live files (None: not counted)."""
    for part in partitions:
        part.files_now = None if counts is None else counts.get(part.partition, 0)


def _counts_now(lake: LakeTable | None, table: MaintainedTable, settings: "Settings") -> dict[str, int] | None:
    """Spark's count where the run started it, else the format library's (measure_without_spark)."""
    try:
        if lake is not None:
            return lake.maintenance.file_counts()
        measured = measure_without_spark(table, settings)
        return None if measured is None else dict(Counter(partition for partition, _, _ in measured.files))
    except Exception as exc:  # noqa: BLE001 - the compaction is done; only its report lacks the count after
        log.warning(f"files after the compaction not counted: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return None


def _with_retries(action, what: str, classify, sleep) -> tuple[object | None, int, str]:
    """(result, attempts, error). Conflicts (by the format's classification) are retried with backoff; after
    ATTEMPTS the action is given up with a warning; other errors propagate."""
    tries = 0

    def attempt():
        nonlocal tries
        tries += 1
        try:
            return action()
        except CommitConflict:
            raise
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


def commit_groups(chosen: list[PartitionChoice], hot: set[str],
                  per_commit: int = SETTLED_PER_COMMIT) -> list[list[PartitionChoice]]:
    """The commits of a run, in the plan's order: each hot partition alone and first (it keeps the bound, and a
    conflict with the stream retries it alone), then the settled ones, `per_commit` to a commit."""
    settled = [c for c in chosen if c.partition not in hot]
    return [[c] for c in chosen if c.partition in hot] + \
        [settled[i:i + per_commit] for i in range(0, len(settled), per_commit)]


def _names(group: list[PartitionChoice]) -> str:
    first = group[0].partition or "(table)"
    return first if len(group) == 1 else f"{first} and {len(group) - 1} more"


def _commit_without_spark(rewriter: PartitionRewriter, layout: Layout, partitions: list[str],
                          sleep) -> CommitResult | None:
    """One partition's commit through the format's own library; None when the table needs Spark's rewrite."""
    started = time.monotonic()
    try:
        outcome, attempts, error = _with_retries(lambda: rewriter.rewrite_partitions(partitions, layout,
                                                                                      at_stream_weight),
                                                 partitions[0], lambda _exc: None, sleep)
    except RewriteNeedsSpark as exc:
        log.info(f"  {partitions[0]}: rewritten through Spark ({exc})")
        return None
    seconds = time.monotonic() - started
    if outcome is None:
        return CommitResult(partitions, "skipped", error, seconds=seconds, attempts=attempts, spark=False)
    return CommitResult(partitions, "compacted", f"{outcome.files_removed} files rewritten into "
                        f"{outcome.files_added}", outcome.files_removed, outcome.files_added,
                        outcome.bytes_rewritten, seconds, attempts, spark=False)


def _commit(lake: LakeTable, layout: Layout, partitions: list[str], classify, sleep,
            committing: Callable[[], AbstractContextManager] = nullcontext) -> CommitResult:
    started = time.monotonic()
    chosen = None if partitions == [""] else partitions

    def rewrite():
        with committing():
            return lake.maintenance.rewrite_partitions(chosen, layout)

    outcome, attempts, error = _with_retries(rewrite, partitions[0] or lake.ref, classify, sleep)
    seconds = time.monotonic() - started
    if outcome is None:
        return CommitResult(partitions, "skipped", error, seconds=seconds, attempts=attempts)
    return CommitResult(partitions, "compacted", f"{outcome.files_removed} files rewritten into "
                        f"{outcome.files_added}", outcome.files_removed, outcome.files_added,
                        outcome.bytes_rewritten, seconds, attempts)
