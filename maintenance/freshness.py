"""`lakeline freshness`: is each table fresh against its pipeline's SLA (`freshness:` in the pipeline YAML)?

A table is stale when records are waiting in the source and its newest commit is older than `max_staleness`, or
when more than `max_lag_records` are waiting. An idle source with everything ingested is fresh however old the
last commit is. `as_of` is the moment judged (the Airflow run passes its data interval end).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ingest.commits import Offsets
from ingest.config import PipelineConfig, parse_duration
from ingest.errors import ConfigError
from ingest.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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

    def to_json(self) -> dict:
        return asdict(self)


def source_lag(table_end: Offsets, watermarks: dict[tuple[str, int], tuple[int, int]]) -> int:
    """Records in the source that the table does not hold yet (a partition it has never seen counts whole)."""
    return sum(max(0, high - max(low, table_end.get(part, low))) for part, (low, high) in watermarks.items())


def evaluate(config: PipelineConfig, last_commit_at: datetime | None, lag: int, as_of: datetime) -> FreshnessReport:
    """Pure SLA check."""
    sla = config.freshness
    limit = parse_duration(sla.max_staleness)
    staleness = None if last_commit_at is None else max(0.0, (as_of - last_commit_at).total_seconds())
    problems = []
    if lag > 0 and (staleness is None or staleness > limit):
        since = "no commit yet" if staleness is None else f"newest commit {staleness:,.0f}s old"
        problems.append(f"{lag:,} records waiting and {since} (limit {sla.max_staleness})")
    if sla.max_lag_records is not None and lag > sla.max_lag_records:
        problems.append(f"source lag {lag:,} records > max_lag_records {sla.max_lag_records:,}")
    return FreshnessReport(config.pipeline, as_of.isoformat(), last_commit_at.isoformat() if last_commit_at else None,
                           staleness, lag, limit, sla.max_lag_records, not problems, problems)


def check(config: PipelineConfig, settings: Settings, spark: "SparkSession", as_of: datetime) -> FreshnessReport:
    """Observe the table's newest commit and the source's lag, then evaluate the SLA."""
    from pyspark.errors import AnalysisException

    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.sinks import sinks_for

    if config.source.kind != "kafka":
        raise ConfigError(f"pipeline {config.pipeline}: freshness checks support Kafka sources only so far")
    main, _ = sinks_for(spark, config, settings)
    try:
        record = main.last_commit()
    except AnalysisException:  # the table does not exist yet: nothing ingested
        record = None
    admin = KafkaAdmin(settings)
    topics = admin.resolve_topics(config.source.topics, config.source.topic_pattern)
    watermarks = {(t, p): wm for t in topics for p, wm in admin.watermarks(t).items()}
    lag = source_lag(dict(record.end) if record else {}, watermarks)
    return evaluate(config, main.last_commit_time() if record else None, lag, as_of)
