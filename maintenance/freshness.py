"""`lakeline freshness`: is each table fresh against its pipeline's SLA (`freshness:` in the pipeline YAML)?

A table is stale when records are waiting in the source and its newest commit is older than `max_staleness`, or
when more than `max_lag_records` are waiting. An idle source with everything ingested is fresh however old the
last commit is. `as_of` is the moment judged (the Airflow run passes its data interval end).

Kafka lag comes from the partition watermarks. Kinesis has no such count: the check reads each shard from the
table's recorded position and counts the records behind it, up to KINESIS_LAG_SCAN_LIMIT in all; past that the
lag is reported as "at least" (still enough to judge a max_lag_records below the limit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ingest import kinesis_offsets as ko
from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.adapters.kinesis import KinesisClient, client_options
from ingest.commits import CommitRecord, Offsets
from ingest.config import PipelineConfig, parse_duration
from ingest.errors import ConfigError
from ingest.formats import format_for, tables_for
from ingest.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.kinesis_offsets import ShardInfo

KINESIS_LAG_SCAN_LIMIT = 100_000


@dataclass
class FreshnessReport:
    pipeline: str
    as_of: str
    last_commit_at: str | None
    staleness_seconds: float | None
    lag_records: int
    max_staleness_seconds: float
    max_lag_records: int | None
    ok: bool
    problems: list[str] = field(default_factory=list)
    lag_exact: bool = True  # False: lag_records is a lower bound (Kinesis, scan limit reached)
    table_exists: bool = True  # False: the pipeline has not run (nothing ingested; its first start creates it)

    def to_json(self) -> dict:
        return asdict(self)


def source_lag(table_end: Offsets, watermarks: dict[tuple[str, int], tuple[int, int]]) -> int:
    """Records in the source that the table does not hold yet (a partition it has never seen counts whole)."""
    return sum(max(0, high - max(low, table_end.get(part, low))) for part, (low, high) in watermarks.items())


def kinesis_lag(stream: str, shards: "list[ShardInfo]", table_end: Offsets, starting_position: str,
                pages: Callable[[str, str, int], Iterable[list]], limit: int = KINESIS_LAG_SCAN_LIMIT
                ) -> tuple[int, bool]:
    """(records behind the table's end over all shards, exact?). `pages(shard_id, position, budget)` yields record
    pages from a shard position to its tip. A shard the table has never seen counts from where the pipeline would
    start it (a child of a known shard, or TRIM_HORIZON: all of it; LATEST: nothing)."""
    listed = {s.shard_id for s in shards}
    count = 0
    for shard in shards:
        end = table_end.get((stream, shard.shard_id))
        if end is not None:
            position = ko.after(end - 1)
        elif not any(p in listed for p in shard.parents) and starting_position == "LATEST":
            continue
        else:
            position = ko.initial_position(shard, starting_position, listed, 0.0)
        for page in pages(shard.shard_id, position, limit - count):
            count += len(page)
            if count >= limit:
                return count, False
    return count, True


def evaluate(config: PipelineConfig, last_commit_at: datetime | None, lag: int, as_of: datetime,
             lag_exact: bool = True, table_exists: bool = True) -> FreshnessReport:
    """Pure SLA check. With lag_exact False, `lag` is a lower bound of the records waiting. A table that does not
    exist yet is judged like one without a commit: stale once records wait, fresh while the source is empty."""
    sla = config.freshness
    limit = parse_duration(sla.max_staleness).total_seconds()
    staleness = None if last_commit_at is None else max(0.0, (as_of - last_commit_at).total_seconds())
    problems = []
    waiting = f"{'' if lag_exact else 'at least '}{lag:,}"
    if lag > 0 and (staleness is None or staleness > limit):
        since = "no commit yet" if staleness is None else f"newest commit {staleness:,.0f}s old"
        if not table_exists:
            since += " (the table does not exist: the pipeline has not run)"
        problems.append(f"{waiting} records waiting and {since} (limit {sla.max_staleness})")
    if sla.max_lag_records is not None and lag > sla.max_lag_records:
        problems.append(f"source lag {waiting} records > max_lag_records {sla.max_lag_records:,}")
    return FreshnessReport(config.pipeline, as_of.isoformat(), last_commit_at.isoformat() if last_commit_at else None,
                           staleness, lag, limit, sla.max_lag_records, not problems, problems, lag_exact,
                           table_exists)


def check(config: PipelineConfig, settings: Settings, spark: "SparkSession | None", as_of: datetime
          ) -> FreshnessReport:
    """Observe the table's newest commit and the source's lag, then evaluate the SLA. The table is read through
    its Spark-free reader facet, or through `spark` when given (an Iceberg JDBC catalog, which only Spark opens)."""
    record = last_at = None
    if spark is None:
        fmt = format_for(config.sink.format)
        reader = fmt.reader(fmt.ref(config, settings), settings)
        exists = reader.exists()
        newest = reader.last_commit(config.pipeline) if exists else None
        if newest is not None:
            record, last_at = newest.record, newest.committed_at
    else:
        from pyspark.errors import AnalysisException  # heavy: pyspark loads with the session that calls this

        exists = True
        main, _ = tables_for(spark, config, settings)
        try:
            record = main.last_commit()
        except AnalysisException:  # the table does not exist yet (a JDBC catalog Spark alone can ask)
            exists = False
        last_at = main.last_commit_time() if record else None
    lag, exact = observe_lag(config, settings, record)
    return evaluate(config, last_at, lag, as_of, lag_exact=exact, table_exists=exists)


def observe_lag(config: PipelineConfig, settings: Settings, record: "CommitRecord | None") -> tuple[int, bool]:
    """(records waiting in the source behind the table's newest commit `record`, exact?), without Spark: Kafka's
    watermarks, or Kinesis shards read from the recorded positions (see the module's docstring)."""
    if config.source.kind == "kinesis":
        client, stream = KinesisClient(client_options(settings)), config.source.stream

        def pages(shard_id: str, position: str, budget: int):
            for records, _ended, _caught_up in client.pages(stream, shard_id, position, page_limit=budget):
                yield records

        return kinesis_lag(stream, client.list_shards(stream), dict(record.end) if record else {},
                           config.source.reader_starting_position, pages)
    if config.source.kind != "kafka":
        raise ConfigError(f"pipeline {config.pipeline}: freshness checks support Kafka and Kinesis sources")
    admin = KafkaAdmin(settings)
    topics = admin.resolve_topics(config.source.topics, config.source.topic_pattern)
    watermarks = {(t, p): wm for t in topics for p, wm in admin.watermarks(t).items()}
    return source_lag(dict(record.end) if record else {}, watermarks), True
