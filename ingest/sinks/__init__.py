"""Table sinks: idempotent appends that carry Lakeline's commit record (offsets in the table's own commits)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ingest.commits import CommitRecord

if TYPE_CHECKING:
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ingest.config import PipelineConfig
    from ingest.settings import Settings


class TableSink(Protocol):
    """One table (Delta or Iceberg) written by one pipeline."""

    display_name: str

    def ensure(self) -> None:
        """Create the table if it does not exist (schema and partitioning from config)."""

    def commits(self) -> list[CommitRecord]:
        """This pipeline's commit records, oldest first (commits by others, e.g. compaction, are skipped)."""

    def last_commit(self) -> CommitRecord | None:
        """This pipeline's newest commit record on the table's current lineage of versions/snapshots."""

    def last_commit_time(self) -> "datetime | None":
        """When this pipeline's newest commit landed, by the table's own clock (UTC)."""

    def append(self, frame: "DataFrame", record: CommitRecord, may_be_replay: bool = True) -> None:
        """Append `frame` atomically with `record` in the same commit. The pipeline skips a replay of a
        (lineage, batch) the table already holds; with `may_be_replay` the sink also checks at commit time where
        the format can (Delta's txnAppId/txnVersion)."""

    def read(self) -> "DataFrame":
        """The table's current rows."""


def sinks_for(spark: "SparkSession", config: "PipelineConfig", settings: "Settings") -> tuple[TableSink, TableSink]:
    """(main table, dead-letter table) for the pipeline's sink format."""
    from ingest.transforms import coordinates_for, dead_letter_schema, table_schema

    partition = [config.sink.partition.column] if config.sink.partition else []
    dead_schema = dead_letter_schema(coordinates_for(config))
    if config.sink.format == "delta":
        from ingest.sinks.delta import DeltaSink

        return (DeltaSink(spark, config.delta_location(settings), table_schema(config), partition, config.pipeline),
                DeltaSink(spark, config.delta_location(settings, config.sink.dead_letters), dead_schema,
                          [], config.pipeline))
    from ingest.sinks.iceberg import IcebergSink

    return (IcebergSink(spark, config.iceberg_identifier(settings), table_schema(config), partition,
                        config.pipeline),
            IcebergSink(spark, config.iceberg_identifier(settings, config.sink.dead_letters), dead_schema,
                        [], config.pipeline))


def ddl_columns(schema: "StructType") -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
                     for f in schema.fields)
