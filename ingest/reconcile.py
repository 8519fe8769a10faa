"""`lakeline reconcile`: the exactly-once audit. Every offset in the source's retained range must appear exactly
once across the table, the routed tables (sink.route) and the dead-letter table, and the main table's committed
offset ranges must chain without gaps or overlaps."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.config import PipelineConfig
from ingest.kinesis_offsets import pad_sequence
from ingest.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SAMPLE = 20


@dataclass
class ReconcileReport:
    pipeline: str
    produced: int
    rows: int
    dead_letters: int
    duplicates: int
    missing: int
    out_of_range: int
    dead_letters_by_reason: dict[str, int]
    missing_sample: list[dict] = field(default_factory=list)
    duplicate_sample: list[dict] = field(default_factory=list)
    per_partition: list[dict] = field(default_factory=list)
    commits: int = 0
    replayed: int = 0  # dead letters a replay appended to the main table (counted once, in rows)
    ranges_contiguous: bool = True
    ranges_non_overlapping: bool = True
    range_problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.duplicates == 0 and self.missing == 0

    def to_json(self) -> dict:
        return {**asdict(self), "exact": self.exact}


def kinesis_retained(config: PipelineConfig, settings: Settings) -> list[tuple[str, str, int]]:
    """Every record the stream retains, as (stream, shard, sequence): each shard read from TRIM_HORIZON to now."""
    from ingest.adapters.kinesis import KinesisClient, client_options

    client = KinesisClient(client_options(settings))
    stream = config.source.stream
    out = []
    for shard in client.list_shards(stream):
        for records, _ended, _caught_up in client.pages(stream, shard.shard_id, "TRIM_HORIZON", max_empty_pages=50):
            out += [(stream, shard.shard_id, int(r["SequenceNumber"])) for r in records]
    return out


def _reconcile_kinesis(config: PipelineConfig, settings: Settings, spark: "SparkSession") -> ReconcileReport:
    """Kinesis: the stream's retained records (read shard by shard) vs main ∪ dead-letter coordinates."""
    from pyspark.sql import functions as F

    from ingest.formats import tables_for

    retained = kinesis_retained(config, settings)
    names = ["_stream", "_shard", "_sequence"]
    main, dead = tables_for(spark, config, settings)
    table = _rows(spark, config, settings, main, names)
    letters, replayed = _pending(spark, config, settings, main, dead, names)
    coords = table.unionByName(letters.select(*names)).cache()
    expected = spark.createDataFrame([(s, h, pad_sequence(q)) for s, h, q in retained],
                                     "_stream string, _shard string, _sequence string").cache()
    try:
        rows, dead_letters = table.count(), letters.count()
        by_reason = {r["_error"]: r["count"] for r in letters.groupBy("_error").count().collect()}
        dup_rows = coords.groupBy(*names).count().filter("count > 1")
        duplicates = dup_rows.agg(F.coalesce(F.sum(F.col("count") - 1), F.lit(0))).first()[0]
        dup_sample = [r.asDict() for r in dup_rows.limit(SAMPLE).collect()]
        absent = expected.join(coords, names, "left_anti")
        missing = absent.count()
        missing_sample = [r.asDict() for r in absent.orderBy(*names).limit(SAMPLE).collect()]
        out_of_range = coords.join(expected, names, "left_anti").count()
        held = {(r["_stream"], r["_shard"]): r["count"] for r in coords.groupBy("_stream", "_shard").count().collect()}
    finally:
        coords.unpersist()
        expected.unpersist()
    spans: dict[tuple[str, str], list[int]] = {}
    for stream, shard, seq in retained:
        span = spans.setdefault((stream, shard), [seq, seq, 0])
        span[0], span[1], span[2] = min(span[0], seq), max(span[1], seq), span[2] + 1
    per_partition = [{"topic": t, "partition": p, "low": low, "high": high + 1, "produced": n,
                      "landed": held.get((t, p), 0)} for (t, p), (low, high, n) in sorted(spans.items())]
    commits = main.commits()
    contiguous, non_overlapping, problems = check_ranges(commits, {k: v[0] for k, v in spans.items()},
                                                         main.history_complete())
    return ReconcileReport(config.pipeline, len(retained), rows, dead_letters, int(duplicates) + replayed[1],
                           missing, out_of_range, by_reason, missing_sample, dup_sample, per_partition, len(commits),
                           replayed[0], contiguous, non_overlapping, problems)


def reconcile(config: PipelineConfig, settings: Settings, spark: "SparkSession") -> ReconcileReport:
    from pyspark.sql import functions as F

    from ingest.formats import tables_for

    if config.source.kind == "kinesis":
        return _reconcile_kinesis(config, settings, spark)
    admin = KafkaAdmin(settings)
    topics = admin.resolve_topics(config.source.topics, config.source.topic_pattern)
    ranges = {(t, p): wm for t in topics for p, wm in admin.watermarks(t).items()}
    main, dead = tables_for(spark, config, settings)
    table = _rows(spark, config, settings, main, ["_topic", "_kafka_partition", "_offset"])
    letters, replayed = _pending(spark, config, settings, main, dead, ["_topic", "_kafka_partition", "_offset"])
    coords = table.unionByName(letters.select("_topic", "_kafka_partition", "_offset")).cache()
    try:
        rows, dead_letters = table.count(), letters.count()
        by_reason = {r["_error"]: r["count"] for r in letters.groupBy("_error").count().collect()}
        dup_rows = coords.groupBy(*coords.columns).count().filter("count > 1")
        duplicates = dup_rows.agg(F.coalesce(F.sum(F.col("count") - 1), F.lit(0))).first()[0]
        dup_sample = [r.asDict() for r in dup_rows.limit(SAMPLE).collect()]

        expected = None
        for (topic, part), (low, high) in ranges.items():
            span = spark.range(low, high).select(F.lit(topic).alias("_topic"), F.lit(part).cast("int")
                                                 .alias("_kafka_partition"), F.col("id").alias("_offset"))
            expected = span if expected is None else expected.unionByName(span)
        produced = sum(high - low for low, high in ranges.values())
        if expected is None:
            missing, missing_sample = 0, []
        else:
            absent = expected.join(coords, ["_topic", "_kafka_partition", "_offset"], "left_anti").cache()
            missing = absent.count()
            missing_sample = [r.asDict() for r in absent.orderBy("_topic", "_kafka_partition", "_offset")
                              .limit(SAMPLE).collect()]
            absent.unpersist()
        in_range = F.lit(False)
        for (topic, part), (low, high) in ranges.items():
            in_range = in_range | ((F.col("_topic") == topic) & (F.col("_kafka_partition") == part)
                                   & F.col("_offset").between(low, high - 1))
        out_of_range = coords.filter(~in_range).count()
        held = {(r["_topic"], r["_kafka_partition"]): r["count"] for r in coords.groupBy("_topic", "_kafka_partition")
                .count().collect()}
        per_partition = [{"topic": t, "partition": p, "low": low, "high": high, "produced": high - low,
                          "landed": held.get((t, p), 0)} for (t, p), (low, high) in sorted(ranges.items())]
    finally:
        coords.unpersist()

    commits = main.commits()
    contiguous, non_overlapping, problems = check_ranges(commits, {k: v[0] for k, v in ranges.items()},
                                                         main.history_complete())
    return ReconcileReport(config.pipeline, produced, rows, dead_letters, int(duplicates) + replayed[1], missing,
                           out_of_range, by_reason, missing_sample, dup_sample, per_partition, len(commits),
                           replayed[0], contiguous, non_overlapping, problems)


def _rows(spark, config: PipelineConfig, settings: Settings, main, names: list[str]):
    """The coordinates of every row: the main table's and, for a routed pipeline, every routed table's."""
    from ingest.formats import routed_tables_for

    rows = main.read().select(*names)
    for table in routed_tables_for(spark, config, settings, main):
        rows = rows.unionByName(table.read().select(*names))
    return rows


def _pending(spark, config: PipelineConfig, settings: Settings, main, dead, names: list[str]):
    """(the dead letters not replayed yet, (replayed, duplicates)). A record in both tables was replayed when its
    row landed later than its dead letter; a batch writes both tables with one ingest time, so a record the
    pipeline itself put in both would show the same time: that is a duplicate. The data decides, so this holds
    after retention has removed old commit history."""
    from pyspark.sql import functions as F

    from ingest.replay import pending_dead_letters

    letters = dead.read()
    pending = pending_dead_letters(letters, main.read(), names)
    both = letters.select(*names, F.col("_ingested_at").alias("__dead_at")).join(
        main.read().select(*names, F.col("_ingested_at").alias("__row_at")), names)
    counts = both.agg(F.sum((F.col("__row_at") > F.col("__dead_at")).cast("long")).alias("replayed"),
                      F.sum((F.col("__row_at") <= F.col("__dead_at")).cast("long")).alias("twice")).first()
    return pending, (int(counts["replayed"] or 0), int(counts["twice"] or 0))


def check_ranges(commits, low_watermarks: dict, history_complete: bool = True) -> tuple[bool, bool, list[str]]:
    """Each commit covers [start, end) per partition; consecutive commits must chain exactly. With the table's
    whole history, a partition's first commit must start at the oldest retained offset; with expired history the
    oldest commit kept may start anywhere (the data checks, duplicates and missing, still cover every record)."""
    contiguous, non_overlapping, problems = True, True, []
    previous_end: dict = {}
    for record in commits:
        for part, start in record.start.items():
            end = record.end.get(part, start)
            # the first commit for a partition should start at the oldest retained offset
            expected_start = previous_end.get(part, low_watermarks.get(part, start) if history_complete else start)
            if start > expected_start:
                contiguous = False
                problems.append(f"gap on {part[0]}[{part[1]}]: batch {record.batch_id} starts at {start}, "
                                f"previous commit ended at {expected_start}")
            elif start < expected_start and part in previous_end:
                non_overlapping = False
                problems.append(f"overlap on {part[0]}[{part[1]}]: batch {record.batch_id} starts at {start}, "
                                f"previous commit ended at {expected_start}")
            previous_end[part] = max(end, previous_end.get(part, end))
    return contiguous, non_overlapping, problems[:SAMPLE]
