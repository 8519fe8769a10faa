"""Per-table maintenance policy (conf/tables/<name>.yaml) and the pure decisions made from it.

A table file says *how* a table is kept healthy; everything about *which* table (format, location or identifier,
partition column, checkpoint backups) comes from the pipeline YAML it points to. No Spark here: `decide()` takes
a measured `TableHealth`, the policy and `now`, and returns the compaction `Plan`. `retention_problems()` does the
same for the retention guards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ingest.config import NAME, PipelineConfig, load_pipeline, parse_duration, validation_problems
from ingest.errors import ConfigError
from ingest.formats import format_for
from ingest.yaml_loading import load_yaml_mapping
from ingest.partitioning import PartitionField, key_matches, partition_key, recency_key

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}

# Hard floors no table file can go below (a shorter value is refused at load time).
HARD_MIN_RETAIN = timedelta(hours=1)
HARD_MIN_ORPHAN_AGE = timedelta(hours=1)



def parse_size(value: str | int) -> int:
    """'128MB' -> 134217728 (binary units: KB=1024). Plain integers are bytes."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; use e.g. 128MB, 1GB or a number of bytes")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "B").upper()])


def format_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}GB"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Compaction(_Strict):
    target_file_size: str = "128MB"
    # A partition is compacted only with at least this many files below target_file_size / 2 ...
    min_small_files: Annotated[int, Field(ge=2)] = 5
    # ... and when that share of its files is small.
    small_file_ratio: Annotated[float, Field(gt=0, le=1)] = 0.3
    max_bytes_per_run: str = "10GB"
    # Partitions whose newest data file is younger than this are being written by the stream: skipped ...
    hot_partition_window: str = "1h"
    # ... unless they hold more files than this: the bound on files per partition while the stream writes it
    # (compacted first in a run, outside max_bytes_per_run).
    # A compaction commit only replaces the files it read, so the stream's appends never conflict with it.
    max_files_per_partition: Annotated[int, Field(ge=2)] | None = None
    sort_by: list[str] = []
    zorder_by: list[str] = []

    @field_validator("target_file_size", "max_bytes_per_run")
    @classmethod
    def _size(cls, value: str) -> str:
        if parse_size(value) <= 0:
            raise ValueError(f"{value!r} must be greater than 0")
        return value

    @field_validator("hot_partition_window")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    @model_validator(mode="after")
    def _one_layout(self) -> "Compaction":
        if self.sort_by and self.zorder_by:
            raise ValueError("set at most one of sort_by and zorder_by")
        return self

    @property
    def target_bytes(self) -> int:
        return parse_size(self.target_file_size)

    @property
    def small_below(self) -> int:
        """A file is 'small' below half the target (a compacted file is rarely exactly on target)."""
        return self.target_bytes // 2

    @property
    def max_bytes(self) -> int:
        return parse_size(self.max_bytes_per_run)

    @property
    def hot_window(self) -> timedelta:
        return parse_duration(self.hot_partition_window)


class Retention(_Strict):
    # Versions/snapshots (and the files only they reference) younger than this are kept: the time-travel window.
    retain: str = "168h"
    # Refuse any run (including --retain overrides) with a shorter window than this.
    min_retain: str = "24h"
    # Files no version references are deleted only when older than this (an in-flight commit's files are young).
    orphan_older_than: str = "72h"
    min_orphan_age: str = "24h"
    # Dev and test tables only: lets min_retain / min_orphan_age go below the 1h floors. A Delta table still keeps
    # its own delta.deletedFileRetentionDuration floor (7 days by default). A window shorter than the longest
    # commit can delete the files of a commit still in flight.
    allow_short_windows: bool = False

    @field_validator("retain", "min_retain", "orphan_older_than", "min_orphan_age")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    @model_validator(mode="after")
    def _floors(self) -> "Retention":
        fix = "; or, for a dev/test table only, set retention.allow_short_windows: true"
        if self.min_retain_delta < HARD_MIN_RETAIN and not self.allow_short_windows:
            raise ValueError(f"min_retain must be at least {_fmt(HARD_MIN_RETAIN)}{fix}")
        if self.min_orphan_age_delta < HARD_MIN_ORPHAN_AGE and not self.allow_short_windows:
            raise ValueError(f"min_orphan_age must be at least {_fmt(HARD_MIN_ORPHAN_AGE)}{fix}")
        if self.retain_delta < self.min_retain_delta:
            raise ValueError(f"retain {self.retain} is shorter than min_retain {self.min_retain}; raise retain")
        if self.orphan_delta < self.min_orphan_age_delta:
            raise ValueError(f"orphan_older_than {self.orphan_older_than} is shorter than min_orphan_age "
                             f"{self.min_orphan_age}; raise orphan_older_than")
        return self

    @property
    def retain_delta(self) -> timedelta:
        return parse_duration(self.retain)

    @property
    def min_retain_delta(self) -> timedelta:
        return parse_duration(self.min_retain)

    @property
    def orphan_delta(self) -> timedelta:
        return parse_duration(self.orphan_older_than)

    @property
    def min_orphan_age_delta(self) -> timedelta:
        return parse_duration(self.min_orphan_age)


class TablePolicy(_Strict):
    table: str
    pipeline: str
    # main, dead_letters, or routed: every table the pipeline's sink.route has made (found when the command runs)
    which: Literal["main", "dead_letters", "routed"] = "main"
    compaction: Compaction = Compaction()
    retention: Retention = Retention()

    @field_validator("table")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r} must start with a letter and use letters, digits and _ (it becomes a "
                             f"DAG id)")
        return value


@dataclass(frozen=True)
class MaintainedTable:
    """A loaded table file: the policy plus the pipeline it points to."""

    path: Path
    policy: TablePolicy
    pipeline: PipelineConfig

    @property
    def name(self) -> str:
        return self.policy.table

    @property
    def format(self) -> str:
        return self.pipeline.sink.format

    @property
    def partitioning(self) -> list[PartitionField]:
        """The table's partition fields (none for the dead-letter table)."""
        return [] if self.policy.which == "dead_letters" else self.pipeline.partitioning

    def routed(self, table: str) -> "MaintainedTable":
        """One routed table under this policy (`which: routed`): its own configuration (ingest.routing)."""
        from ingest.routing import table_config

        return MaintainedTable(self.path, self.policy.model_copy(update={"which": "main", "table": table}),
                               table_config(self.pipeline, table))

    def sink_table(self) -> str | None:
        return self.pipeline.sink.dead_letters if self.policy.which == "dead_letters" else None

    def columns_check(self, columns: list[str]) -> None:
        """Sort/Z-order columns must exist in the table (checked once the schema is known)."""
        wanted = self.policy.compaction.sort_by or self.policy.compaction.zorder_by
        missing = [c for c in wanted if c not in columns]
        if missing:
            key = "sort_by" if self.policy.compaction.sort_by else "zorder_by"
            raise ConfigError(f"{self.path}: compaction.{key}: column(s) {missing} are not in the table; "
                              f"use some of {sorted(columns)}")


def _fmt(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:g}h"


def resolve_table_file(name_or_path: str, conf_dir: str | Path = "conf") -> Path:
    """`orders_delta` -> conf/tables/orders_delta.yaml; a path to an existing file is taken as is."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        return candidate
    path = Path(conf_dir) / "tables" / f"{name_or_path}.yaml"
    if not path.is_file():
        folder = Path(conf_dir) / "tables"
        known = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
        raise ConfigError(f"{path}: no such table file; known tables: {', '.join(known) or 'none'} "
                          f"(use --conf-dir or a path to a table YAML)")
    return path


def load_table(name_or_path: str, conf_dir: str | Path = "conf") -> MaintainedTable:
    """Read and validate a table file and the pipeline it names. Errors are `file: key: fix`."""
    path = resolve_table_file(name_or_path, conf_dir)
    if not path.is_file():
        raise ConfigError(f"{path}: no such table file (tables live in conf/tables/).")
    data = load_yaml_mapping(path, "table, pipeline, compaction, retention")
    try:
        policy = TablePolicy.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(path, exc)
        raise ConfigError("invalid table config:\n  " + "\n  ".join(problems)) from None
    pipeline_path = (path.parent / policy.pipeline).resolve()
    if not pipeline_path.is_file():
        raise ConfigError(f"{path}: pipeline: {pipeline_path} does not exist; give the pipeline YAML's path "
                          f"relative to this file (e.g. ../pipelines/orders_delta.yaml)")
    pipeline = load_pipeline(pipeline_path)
    if policy.which == "routed" and pipeline.sink.route is None:
        raise ConfigError(f"{path}: which: routed applies to the tables a pipeline's sink.route makes, and "
                          f"{pipeline_path.name} has no sink.route; use which: main or dead_letters")
    problem = format_for(pipeline.sink.format).layout_problem(policy.compaction.sort_by, policy.compaction.zorder_by)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    return MaintainedTable(path, policy, pipeline)


# ---- health (the measured input of the decisions) ----------------------------------------------------------
@dataclass
class PartitionHealth:
    partition: str  # e.g. "event_date=2026-11-20/customer_id_bucket=3"; "" for an unpartitioned table
    files: int
    bytes: int
    small_files: int  # files below the policy's small threshold
    newest_file_at: datetime | None = None  # modification time of its newest data file
    size_histogram: dict[str, int] = field(default_factory=dict)

    @property
    def small_ratio(self) -> float:
        return self.small_files / self.files if self.files else 0.0


@dataclass
class TableHealth:
    table: str
    format: str
    location: str
    partition_columns: list[str]
    time_columns: list[str]  # the partition columns of time transforms: "newest first" sorts by them
    target_file_size: int
    small_below: int
    partitions: list[PartitionHealth]
    versions: int  # Delta versions in the log / Iceberg snapshots retained
    current_version: int | None
    metadata_bytes: int  # _delta_log or Iceberg metadata folder
    oldest_version_at: datetime | None
    last_compaction_at: datetime | None
    measured_at: datetime
    file_sizes: list[int] = field(default_factory=list)  # every live data file, for the plot

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def small_files(self) -> int:
        return sum(p.small_files for p in self.partitions)


# ---- compaction decision -----------------------------------------------------------------------------------
@dataclass
class PartitionChoice:
    partition: str
    action: Literal["compact", "skip"]
    reason: str
    files: int
    bytes: int
    small_files: int
    writing: bool = False  # the stream writes it now: its newest file is within hot_partition_window


@dataclass
class Plan:
    table: str
    chosen: list[PartitionChoice]  # to compact, newest first
    skipped: list[PartitionChoice]
    bytes_planned: int
    # With an interval: how many chosen partitions went quiet in it, and how many are backlog from before it.
    from_interval: int = 0
    backlog: int = 0
    # Chosen although hot (the stream writes them): over max_files_per_partition.
    hot: list[str] = field(default_factory=list)

    @property
    def partitions(self) -> list[str]:
        return [c.partition for c in self.chosen]

    @property
    def hot_over_bound(self) -> int:
        return len(self.hot)

    def bound_only(self) -> "Plan":
        """Only the partitions chosen for the bound (hot and over max_files_per_partition); the others are left
        to the next compaction run."""
        hot = set(self.hot)
        left = [PartitionChoice(c.partition, "skip", "not over max_files_per_partition: left to the compaction run",
                                c.files, c.bytes, c.small_files, c.writing)
                for c in self.chosen if c.partition not in hot]
        chosen = [c for c in self.chosen if c.partition in hot]
        return Plan(self.table, chosen, self.skipped + left, sum(c.bytes for c in chosen), 0, 0, list(self.hot))


# A files-bound run (`lakeline compact --bound-only`, every few minutes) rewrites a hot partition at this share of
# max_files_per_partition: the rest is room for what the stream adds until the next run, so the bound holds.
BOUND_RUN_TRIGGER = 0.5


def bound_run_policy(compaction: Compaction) -> Compaction:
    """The policy a files-bound run decides by: hot partitions chosen at BOUND_RUN_TRIGGER of the bound."""
    if compaction.max_files_per_partition is None:
        return compaction
    trigger = max(2, int(compaction.max_files_per_partition * BOUND_RUN_TRIGGER))
    return compaction.model_copy(update={"max_files_per_partition": trigger})


def settled_range(interval: tuple[datetime | None, datetime], compaction: Compaction
                  ) -> tuple[datetime | None, datetime]:
    """The write times in which a partition "went quiet in" a scheduler interval [start, end): its newest file is in
    [start - hot window, end - hot window), so by the interval end it has been quiet for a whole hot window.
    `start` None means no lower bound."""
    start, end = interval
    window = compaction.hot_window
    return (start - window if start is not None else None), end - window


def decide(health: TableHealth, compaction: Compaction, now: datetime, only: list[str] | None = None,
           include_hot: bool = False, interval: tuple[datetime | None, datetime] | None = None) -> Plan:
    """Which partitions to compact: over threshold (enough small files and a high enough small share), newest
    first, skipping the hot partition (newest file younger than the hot window) unless `include_hot` or it holds
    more than `max_files_per_partition` files, until `max_bytes_per_run` is used. Partitions over
    `max_files_per_partition` come first and outside the byte budget: the bound holds whatever else waits (a
    budget spent on settled partitions first left the partition the stream writes growing without bound).
    `only` restricts the candidates to those partitions: keys naming some or all of their columns
    (`event_date=2026-11-20` selects every bucket of that day), or bare values for a table with one partition
    column.

    With `interval` (a scheduler run's data interval; `now` is its end): the partitions that went quiet in it
    (`settled_range`) come next, then the backlog, partitions that settled earlier and are still over threshold
    (left by an earlier run's byte budget, or by a run that never ran). Partitions still being written are hot
    at `now`. So each run keeps the bound, then does its own interval's work, and nothing settled is ever left
    for good."""
    chosen: list[PartitionChoice] = []
    skipped: list[PartitionChoice] = []
    budget = compaction.max_bytes
    used = 0
    ordered = sorted(health.partitions, key=lambda p: recency_key(p.partition, health.time_columns), reverse=True)
    wanted = None if not only else [w if "=" in w or len(health.partition_columns) != 1
                                    else partition_key([(health.partition_columns[0], w)]) for w in only]
    own: set[str] = set()
    if interval is not None:
        low, high = settled_range(interval, compaction)
        own = {p.partition for p in ordered if p.newest_file_at is not None
               and (low is None or p.newest_file_at >= low) and p.newest_file_at < high}
        ordered = [p for p in ordered if p.partition in own] + [p for p in ordered if p.partition not in own]
    if compaction.max_files_per_partition is not None:
        ordered = [p for p in ordered if p.files > compaction.max_files_per_partition] + \
            [p for p in ordered if p.files <= compaction.max_files_per_partition]

    live: list[str] = []
    bounded: set[str] = set()  # chosen over max_files_per_partition: outside the byte budget

    def writing(part: PartitionHealth) -> bool:
        return part.newest_file_at is not None and now - part.newest_file_at < compaction.hot_window

    def record(part: PartitionHealth, action: str, reason: str) -> None:
        (chosen if action == "compact" else skipped).append(
            PartitionChoice(part.partition, action, reason, part.files, part.bytes, part.small_files, writing(part)))

    for part in ordered:
        if wanted is not None and not any(key_matches(part.partition, w) for w in wanted):
            continue
        if part.small_files < compaction.min_small_files:
            record(part, "skip", f"{part.small_files} small files < min_small_files {compaction.min_small_files}")
            continue
        if part.small_ratio < compaction.small_file_ratio:
            record(part, "skip", f"small-file ratio {part.small_ratio:.2f} < {compaction.small_file_ratio}")
            continue
        hot = not include_hot and writing(part)
        over_bound = compaction.max_files_per_partition is not None \
            and part.files > compaction.max_files_per_partition
        if hot and not over_bound:
            age = (now - part.newest_file_at).total_seconds()
            # A scheduled run decides as of its interval's end: files the stream wrote since are newer than that.
            newest = f"newest file {age:.0f}s old" if age >= 0 else "newest file written after the decision time"
            record(part, "skip", f"hot: {newest} < hot_partition_window {compaction.hot_partition_window} "
                                 "(the stream is writing it)")
            continue
        if not over_bound:
            if used + part.bytes > budget and any(c.partition not in bounded for c in chosen):
                record(part, "skip", f"max_bytes_per_run {compaction.max_bytes_per_run} reached")
                continue
            used += part.bytes
        else:
            bounded.add(part.partition)
        origin = "" if interval is None or hot else (", went quiet in this interval" if part.partition in own
                                                     else ", backlog from before this interval")
        bound = f", hot but over max_files_per_partition {compaction.max_files_per_partition}" if hot else ""
        if hot:
            live.append(part.partition)
        record(part, "compact",
               f"{part.small_files}/{part.files} files small (ratio {part.small_ratio:.2f}){origin}{bound}")
    if wanted is not None:
        for missing in [w for w in wanted if not any(key_matches(p.partition, w) for p in health.partitions)]:
            columns = ", ".join(health.partition_columns)
            reason = "no such partition" if "=" in missing else \
                f"a bare value needs one partition column; name it as column=value ({columns})"
            skipped.append(PartitionChoice(missing, "skip", reason, 0, 0, 0))
    from_interval = sum(1 for c in chosen if c.partition in own)
    backlog = len(chosen) - from_interval - len(live) if interval else 0
    return Plan(health.table, chosen, skipped, sum(c.bytes for c in chosen), from_interval, backlog, live)


def size_histogram(sizes: list[int], target: int) -> dict[str, int]:
    """Counts per bucket relative to the target size: <1%, 1-10%, 10-50%, 50-100%, >=100% of target."""
    edges = [(0.01, "<1%"), (0.10, "1-10%"), (0.50, "10-50%"), (1.0, "50-100%")]
    out = {label: 0 for _, label in edges} | {">=100%": 0}
    for size in sizes:
        share = size / target if target else 1.0
        label = next((label for limit, label in edges if share < limit), ">=100%")
        out[label] += 1
    return out


# ---- retention guards --------------------------------------------------------------------------------------
@dataclass
class RetentionRequest:
    retain: timedelta
    orphan_older_than: timedelta


def retention_problems(retention: Retention, request: RetentionRequest, table_min: timedelta | None = None,
                       table_min_key: str = "") -> list[str]:
    """Why a retention run must be refused (empty: allowed). `table_min` is the table's own floor, e.g. Delta's
    delta.deletedFileRetentionDuration."""
    problems = []
    if request.retain < retention.min_retain_delta:
        problems.append(f"retain {_fmt(request.retain)} is shorter than retention.min_retain "
                        f"{retention.min_retain}: readers and restores within the time-travel window would lose "
                        f"the files of older versions. Use at least {retention.min_retain}, or lower min_retain "
                        f"in the table file if the time-travel window really is shorter")
    if table_min is not None and request.retain < table_min:
        problems.append(f"retain {_fmt(request.retain)} is shorter than the table's {table_min_key} "
                        f"({_fmt(table_min)}): raise retain, or lower {table_min_key} on the table deliberately")
    if request.orphan_older_than < retention.min_orphan_age_delta:
        problems.append(f"orphan_older_than {_fmt(request.orphan_older_than)} is shorter than "
                        f"retention.min_orphan_age {retention.min_orphan_age}: files of a commit in flight are "
                        f"not referenced yet and would be deleted. Use at least {retention.min_orphan_age}")
    return problems
