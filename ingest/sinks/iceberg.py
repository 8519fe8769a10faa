"""Iceberg sink: appends carrying the commit record as a snapshot-summary property. Before committing, the
pipeline checks the newest record on the current snapshot lineage, so a replayed batch is a no-op."""

from __future__ import annotations

from datetime import datetime, UTC
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY, CommitRecord
from ingest.sinks import ddl_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class IcebergSink:
    def __init__(self, spark: "SparkSession", identifier: str, schema: "StructType", partition_by: list[str],
                 pipeline: str):
        self.spark, self.identifier, self.schema = spark, identifier, schema
        self.partition_by, self.pipeline = partition_by, pipeline
        self.display_name = f"iceberg:{identifier}"

    def ensure(self) -> None:
        catalog, namespace, _ = self.identifier.split(".")
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        partitioned = f" PARTITIONED BY ({', '.join(self.partition_by)})" if self.partition_by else ""
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.identifier} ({ddl_columns(self.schema)}) USING iceberg{partitioned} "
            "TBLPROPERTIES ('format-version'='2', 'write.format.default'='parquet', "
            "'commit.retry.num-retries'='10', 'write.metadata.delete-after-commit.enabled'='true', "
            "'write.metadata.previous-versions-max'='100')")

    def commits(self) -> list[CommitRecord]:
        # Snapshots on the current lineage (rolled-back branches excluded), oldest first.
        rows = self.spark.sql(
            f"SELECT s.committed_at, s.summary['{COMMIT_KEY}'] AS record "
            f"FROM {self.identifier}.snapshots s JOIN {self.identifier}.history h ON s.snapshot_id = h.snapshot_id "
            f"WHERE h.is_current_ancestor AND s.summary['{COMMIT_KEY}'] IS NOT NULL "
            f"ORDER BY h.made_current_at, s.committed_at").collect()
        records = [CommitRecord.from_json(row["record"]) for row in rows]
        return [r for r in records if r is not None and r.pipeline == self.pipeline]

    def last_commit(self) -> CommitRecord | None:
        """The pipeline's newest record on the current snapshot lineage (what `commits()[-1]` gives), found by
        walking the table's snapshots from the current one through their parents in the JVM: no Spark job, which
        in a driver that has just started is most of a restart's table reading."""
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001 - py4j
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.identifier)  # noqa: SLF001
        table.refresh()  # Spark's catalog caches tables: read the catalog's current metadata
        snapshot = table.currentSnapshot()
        while snapshot is not None:
            record = CommitRecord.from_json(snapshot.summary().get(COMMIT_KEY))
            if record is not None and record.pipeline == self.pipeline:
                return record
            parent = snapshot.parentId()
            snapshot = table.snapshot(parent) if parent is not None else None  # None: expired
        return None

    def last_commit_time(self) -> datetime | None:
        rows = self.spark.sql(
            f"SELECT CAST(s.committed_at AS DOUBLE) AS epoch, s.summary['{COMMIT_KEY}'] AS record "
            f"FROM {self.identifier}.snapshots s WHERE s.summary['{COMMIT_KEY}'] IS NOT NULL "
            f"ORDER BY s.committed_at DESC LIMIT 200").collect()
        times = [row["epoch"] for row in rows
                 if (record := CommitRecord.from_json(row["record"])) and record.pipeline == self.pipeline]
        return datetime.fromtimestamp(max(times), UTC) if times else None

    def append(self, frame: "DataFrame", record: CommitRecord, may_be_replay: bool = True) -> None:
        # Iceberg has no commit-time transaction id; the pipeline's own replay check covers it.
        frame.writeTo(self.identifier).option(f"snapshot-property.{COMMIT_KEY}", record.to_json()).append()

    def read(self) -> "DataFrame":
        return self.spark.table(self.identifier)
