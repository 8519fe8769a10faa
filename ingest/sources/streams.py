"""The streaming sources a pipeline reads, built on the driver: Spark's Kafka source, or Lakeline's Kinesis source
(`ingest.sources.kinesis`), each resumed where the start plan says, with the record coordinates shaped alike."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ingest.kinesis_offsets import starting_positions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.checkpoint import StartPlan
    from ingest.commits import Offsets
    from ingest.config import PipelineConfig
    from ingest.settings import Settings

# Consumer properties Lakeline sets on Spark's Kafka source unless the pipeline's source.options say otherwise.
# fetch.max.wait.ms: a micro-batch's range nearly always ends at the log end, and each partition's task then makes
# one more fetch that the broker holds for fetch.max.wait.ms (default 500 ms) waiting for data that is not part of
# the batch. With 2 tasks per core that cost 1 s per batch at trickle rates (bench/results/tuning-2026-11-22.md).
# max.poll.records / max.partition.fetch.bytes: Spark's Kafka reader asks the broker for the partition's offset
# range after every poll (two ListOffsets requests, and a seek that drops the rest of the fetched data). With the
# consumer's default 500 records per poll that happened every 500 records: reading 1M records cost 5.2-5.4 CPU s
# in the executor and 0.9-1.0 in the broker; with these settings 2.6-3.6 and 0.1 (bench/results/tuning-2026-11-24.md).
KAFKA_SOURCE_DEFAULTS = {"fetch.max.wait.ms": "10", "max.poll.records": "20000",
                         "max.partition.fetch.bytes": str(4 * 1024 * 1024)}


def planned_range(query: "StreamingQuery") -> "tuple[Offsets, Offsets] | None":
    """The running Kafka micro-batch's planned positions, (start, end) per (topic, partition), from the query's own
    offset bookkeeping on the driver: no data read. Valid inside foreachBatch (Spark sets both before it runs a
    batch). A query's first batch starts at the source's initial offsets (the start plan's, earliest resolved to
    numbers), which Spark keeps in the checkpoint's sources/ log. None for a source that is not Spark's Kafka
    source."""
    execution = query._jsq.streamingQuery()  # noqa: SLF001 - py4j: the MicroBatchExecution
    end = _kafka_progress(execution.availableOffsets())
    start = _kafka_progress(execution.committedOffsets())
    if start == {}:
        start = _kafka_progress(execution.availableOffsets(), initial=True)
    if not start or not end:
        return None
    return start, end


def _kafka_progress(progress, initial: bool = False) -> "Offsets | None":
    """Offsets of a StreamProgress (stream -> offset); with `initial`, each stream's initial offsets instead."""
    from ingest.commits import offsets_from_json

    entries = progress.toSeq()
    offsets: Offsets = {}
    for index in range(entries.size()):
        stream, offset = entries.apply(index)._1(), entries.apply(index)._2()  # noqa: SLF001 - Scala tuple
        if stream.getClass().getSimpleName() != "KafkaMicroBatchStream":
            return None
        offsets.update(offsets_from_json(json.loads((stream.initialOffset() if initial else offset).json())))
    return offsets


def source_stream(spark: "SparkSession", config: "PipelineConfig", settings: "Settings",
                  plan: "StartPlan", until_arrival: float | None = None) -> "DataFrame":
    """The pipeline's source as a streaming frame of coordinates + `_key` + `_raw` (ingest.transforms shapes).
    `until_arrival` (Kinesis, epoch seconds): plan only records that arrived by then (an available-now run)."""
    from ingest.transforms import kafka_coordinates, kinesis_coordinates

    if config.source.kind == "kinesis":
        return kinesis_coordinates(_kinesis(spark, config, settings, plan, until_arrival))
    return kafka_coordinates(_kafka(spark, config, settings, plan))


def _kafka_starting_offsets(config: "PipelineConfig", plan: "StartPlan", admin: "KafkaAdmin",
                            topics: list[str]) -> str:
    if plan.starting_offsets is None:
        return config.source.starting_offsets
    spec: dict[str, dict[str, int]] = {}
    for topic in topics:
        for part in admin.partitions(topic):
            # -2 = earliest: a partition the table has never seen is read from its beginning.
            spec.setdefault(topic, {})[str(part)] = plan.starting_offsets.get((topic, part), -2)
    return json.dumps(spec)


def _kafka(spark: "SparkSession", config: "PipelineConfig", settings: "Settings", plan: "StartPlan") -> "DataFrame":
    from ingest.adapters.kafka_admin import KafkaAdmin, java_client_config

    src = config.source
    # A metadata request before Spark's consumer starts: a refused login, an untrusted certificate or a missing
    # topic fails here at once, naming the setting to fix, instead of as a consumer's stack trace.
    admin = KafkaAdmin(settings)
    topics = admin.resolve_topics(src.topics, src.topic_pattern)
    reader = spark.readStream.format("kafka")
    for key, value in {**KAFKA_SOURCE_DEFAULTS, **java_client_config(settings), **src.options}.items():
        reader = reader.option(f"kafka.{key}", value)
    if src.topics:
        reader = reader.option("subscribe", ",".join(src.topics))
    else:
        reader = reader.option("subscribePattern", src.topic_pattern)
    reader = reader.option("startingOffsets", _kafka_starting_offsets(config, plan, admin, topics))
    reader = reader.option("failOnDataLoss", "true")
    if src.include_headers:
        reader = reader.option("includeHeaders", "true")
    if src.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(src.max_offsets_per_trigger))
    return reader.load()


def _kinesis(spark: "SparkSession", config: "PipelineConfig", settings: "Settings", plan: "StartPlan",
             until_arrival: float | None) -> "DataFrame":
    from ingest.adapters.kinesis import client_options
    from ingest.sources.kinesis import register

    src = config.source
    register(spark)
    reader = (spark.readStream.format("lakeline-kinesis").option("stream", src.stream)
              .option("starting_position", src.reader_starting_position)
              .option("max_records_per_batch", str(src.max_records_per_batch)))
    if plan.starting_offsets is not None:
        # Rebuild: shards the table holds resume after their last recorded sequence number, others from
        # TRIM_HORIZON (like Kafka's earliest for a partition the table has never seen).
        reader = reader.option("starting_positions", json.dumps(starting_positions(plan.starting_offsets, src.stream)))
    if until_arrival is not None:
        reader = reader.option("until_arrival", repr(until_arrival))
    # Endpoint, region and credentials travel as options to the Python workers (never printed).
    return reader.options(**client_options(settings)).load()
