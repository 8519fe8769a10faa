"""Apache Iceberg: the commit record as a snapshot-summary property (the pipeline checks the newest record on the
current snapshot lineage before committing, so a replayed batch is a no-op); rewrite_data_files +
rewrite_manifests for compaction, expire_snapshots + orphan removal for retention, pyiceberg for the analyst
read. Tables live in the shared JDBC/SQL catalog that Spark and pyiceberg both read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY, CommitRecord
from ingest.errors import CommitConflict, ConfigError, LakelineError, UnknownCommitOutcome
from ingest.formats import (Layout, LakeTable, RetentionOutcome, Rewrite, TableFiles, TableFormat, ddl_columns,
                            java_raised, utc_from_millis)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from ingest.config import PipelineConfig
    from ingest.settings import Settings

# The catalog's compare-and-swap of the metadata pointer lost (nothing landed), or a rewrite found its input files
# changed under it; and the commit whose outcome the catalog could not confirm.
_CONFLICTS = ("org.apache.iceberg.exceptions.CommitFailedException",
              "org.apache.iceberg.exceptions.ValidationException")
_UNKNOWN = ("org.apache.iceberg.exceptions.CommitStateUnknownException",)


def iceberg_catalog(settings: "Settings"):
    """The shared SQL catalog, as pyiceberg sees it."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = settings.require("iceberg_catalog_uri", "LAKELINE_ICEBERG_CATALOG_URI", "open the Iceberg catalog")
    if uri.startswith("jdbc:"):
        # Spark takes the jdbc: form; pyiceberg needs a SQLAlchemy URL and its driver.
        raise ConfigError(f"LAKELINE_ICEBERG_CATALOG_URI is a JDBC URI ({uri.split('?', 1)[0]}): the Spark-free read "
                          "(pyiceberg) needs the SQLAlchemy form of the catalog database, which Lakeline only has "
                          "for the embedded sqlite:/// catalog. Read this table through Spark instead.")
    properties = {"s3.region": settings.aws_region}
    if settings.s3_endpoint:
        properties["s3.endpoint"] = settings.s3_endpoint
    for name, value in settings.aws_credentials().items():
        properties["s3." + name.replace("_", "-")] = value
    return SqlCatalog(settings.iceberg_catalog_name, uri=uri, **properties)


class IcebergFormat(TableFormat):
    name = "iceberg"
    version_noun = "snapshots"
    metadata_noun = "metadata"

    def stored(self, data_type: "DataType") -> "DataType":
        """Iceberg has no tinyint or smallint: Spark writes them as int."""
        from pyspark.sql.types import ByteType, IntegerType, ShortType

        from ingest.types import rebuild

        return rebuild(data_type, lambda t: IntegerType() if isinstance(t, (ByteType, ShortType)) else t)

    def ref(self, config: "PipelineConfig", settings: "Settings", table: str | None = None) -> str:
        return config.iceberg_identifier(settings, table)

    def open(self, spark, ref, schema=None, partition_by=None, pipeline="") -> "IcebergLakeTable":
        return IcebergLakeTable(spark, ref, schema, list(partition_by or []), pipeline)

    def classify(self, exc: BaseException) -> type[LakelineError] | None:
        if java_raised(exc, *_UNKNOWN):
            return UnknownCommitOutcome
        if java_raised(exc, *_CONFLICTS):
            return CommitConflict
        return None

    def register_for_analyst(self, ref: str, settings: "Settings", connection, name: str) -> None:
        identifier = ref.split(".", 1)[1]  # drop the catalog name
        iceberg_catalog(settings).load_table(identifier).scan().to_duckdb(name, connection=connection)


class IcebergLakeTable(LakeTable):
    def __init__(self, spark: "SparkSession", identifier: str, schema: "StructType | None", partition_by: list[str],
                 pipeline: str):
        super().__init__(spark, identifier, schema, partition_by, pipeline)
        self.identifier = identifier
        self.display_name = f"iceberg:{identifier}"

    @property
    def _names(self) -> tuple[str, str, str]:
        catalog, namespace, name = self.identifier.split(".")
        return catalog, namespace, name

    # ---- the pipeline's side ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        catalog, namespace, _ = self._names
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        partitioned = f" PARTITIONED BY ({', '.join(self.partition_by)})" if self.partition_by else ""
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.identifier} ({ddl_columns(self.schema)}) USING iceberg{partitioned} "
            "TBLPROPERTIES ('format-version'='2', 'write.format.default'='parquet', "
            "'commit.retry.num-retries'='10', 'write.metadata.delete-after-commit.enabled'='true', "
            "'write.metadata.previous-versions-max'='100')")

    def append(self, frame: "DataFrame", record: CommitRecord, may_be_replay: bool = True) -> None:
        # Iceberg has no commit-time transaction id; the pipeline's own replay check covers it.
        frame.writeTo(self.identifier).option(f"snapshot-property.{COMMIT_KEY}", record.to_json()).append()

    def commits(self) -> list[CommitRecord]:
        # Snapshots on the current lineage (rolled-back branches excluded), oldest first.
        rows = self.spark.sql(
            f"SELECT s.committed_at, s.summary['{COMMIT_KEY}'] AS record "
            f"FROM {self.identifier}.snapshots s JOIN {self.identifier}.history h ON s.snapshot_id = h.snapshot_id "
            f"WHERE h.is_current_ancestor AND s.summary['{COMMIT_KEY}'] IS NOT NULL "
            f"ORDER BY h.made_current_at, s.committed_at").collect()
        records = [CommitRecord.from_json(row["record"]) for row in rows]
        return [r for r in records if r is not None and r.pipeline == self.pipeline]

    def _java_table(self):
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001 - py4j
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.identifier)  # noqa: SLF001

    def last_commit(self) -> CommitRecord | None:
        """Found by walking the table's snapshots from the current one through their parents in the JVM: no Spark
        job, which in a driver that has just started is most of a restart's table reading."""
        table = self._java_table()
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

    def read(self) -> "DataFrame":
        return self.spark.table(self.identifier)

    @property
    def sql_name(self) -> str:
        return self.identifier

    # ---- maintenance's side ----------------------------------------------------------------------------------
    def _location(self) -> str:
        for row in self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.identifier}").collect():
            if row[0] == "Location":
                return row[1].rstrip("/")
        raise AssertionError(f"{self.identifier}: DESCRIBE TABLE EXTENDED has no Location")

    def _current_snapshot_id(self) -> int | None:
        current = self.spark.sql(f"SELECT snapshot_id FROM {self.identifier}.history WHERE is_current_ancestor "
                                 f"ORDER BY made_current_at DESC LIMIT 1").collect()
        return int(current[0][0]) if current else None

    def measure(self, partition_column: str | None) -> TableFiles:
        from pyspark.sql import functions as F

        from ingest.adapters.hadoop_fs import HadoopFS

        ident, column = self.identifier, partition_column
        part = F.concat(F.lit(f"{column}="), F.col(f"partition.{column}").cast("string")) if column else F.lit("")
        files = self.spark.table(f"{ident}.files").where("content = 0")
        sizes = [(r["p"], int(r["file_size_in_bytes"]))
                 for r in files.select(part.alias("p"), "file_size_in_bytes").collect()]
        updated = {r["p"]: utc_from_millis(r["updated_ms"]) for r in self.spark.table(f"{ident}.partitions").select(
            part.alias("p"), F.unix_millis("last_updated_at").alias("updated_ms")).collect()}
        committed_ms = F.unix_millis("committed_at")
        stats = self.spark.table(f"{ident}.snapshots").agg(
            F.count("*").alias("n"), F.min(committed_ms).alias("oldest"),
            F.max(F.when(F.col("operation") == "replace", committed_ms)).alias("replaced")).first()
        location = self._location()
        metadata = HadoopFS(self.spark).list_status(f"{location}/metadata")
        return TableFiles(location, [(p, s, updated.get(p)) for p, s in sizes], int(stats["n"]),
                          self._current_snapshot_id(), sum(size for _, size, _ in metadata),
                          utc_from_millis(stats["oldest"]), utc_from_millis(stats["replaced"]))

    def rewrite_partition(self, partition: tuple[str, str] | None, layout: Layout) -> Rewrite:
        catalog, namespace, name = self._names
        args = [f"table => '{namespace}.{name}'"]
        if layout.zorder_by:
            args += ["strategy => 'sort'", f"sort_order => 'zorder({', '.join(layout.zorder_by)})'"]
        elif layout.sort_by:
            order = ", ".join(f"{c} ASC NULLS LAST" for c in layout.sort_by)
            args += ["strategy => 'sort'", f"sort_order => '{order}'"]
        else:
            args.append("strategy => 'binpack'")
        if partition is not None:
            column, value = partition
            args.append(f"where => \"{column} = '{value}'\"")
        options = {"target-file-size-bytes": layout.target_bytes, "min-file-size-bytes": layout.small_below,
                   "min-input-files": 2, "partial-progress.enabled": "false"}
        args.append("options => map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")")
        row = self.spark.sql(f"CALL {catalog}.system.rewrite_data_files({', '.join(args)})").first()
        return Rewrite(int(row["rewritten_data_files_count"]), int(row["added_data_files_count"]),
                       int(row["rewritten_bytes_count"]))

    def tidy_metadata(self) -> int:
        catalog, namespace, name = self._names
        row = self.spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => '{namespace}.{name}')").first()
        return int(row["rewritten_manifests_count"])

    def retention_floor(self) -> tuple[timedelta | None, str]:
        return None, ""

    def remove_expired(self, retain: timedelta, orphan_older_than: timedelta, now: datetime,
                       dry_run: bool) -> RetentionOutcome:
        """expire_snapshots older than `retain`, never the newest snapshot holding the pipeline's commit record
        (its resume offsets), then orphan files older than `orphan_older_than`."""
        from pyspark.sql import functions as F

        catalog, namespace, name = self._names
        ident = self.identifier
        outcome = RetentionOutcome(orphan_older_than, snapshots_expired=0)
        cutoff = now - retain
        protected_ms = self.spark.sql(
            f"SELECT max(unix_millis(s.committed_at)) FROM {ident}.snapshots s JOIN {ident}.history h "
            f"ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor AND s.summary['{COMMIT_KEY}'] IS NOT NULL"
        ).first()[0]
        protected = utc_from_millis(protected_ms)
        if protected is not None and protected <= cutoff:
            outcome.notes.append(f"kept the snapshot of {protected.isoformat(timespec='seconds')} and later: it "
                                 f"holds the pipeline's newest commit record (resume offsets)")
            cutoff = protected
        outcome.expire_before = cutoff.isoformat(timespec="seconds")
        stamp = cutoff.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        expiring = self.spark.table(f"{ident}.snapshots").where(F.col("committed_at") < F.lit(stamp).cast("timestamp"))
        current = self._current_snapshot_id()
        if current is not None:
            expiring = expiring.where(F.col("snapshot_id") != current)
        outcome.snapshots_expired = expiring.count()
        if not dry_run and outcome.snapshots_expired:
            row = self.spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{namespace}.{name}', "
                                 f"older_than => TIMESTAMP '{stamp}', retain_last => 1)").first()
            outcome.files_deleted = [f"{row['deleted_data_files_count']} data files",
                                     f"{row['deleted_manifest_files_count']} manifests",
                                     f"{row['deleted_manifest_lists_count']} manifest lists"]
        outcome.orphan_files = self.remove_orphans(now - orphan_older_than, dry_run)
        return outcome

    def remove_orphans(self, older_than: datetime, dry_run: bool) -> list[str]:
        """Files under the table location that no snapshot references and that are older than `older_than`.

        Uses Iceberg's action API rather than the procedure: the procedure hard-codes a 24 h floor against the
        wall clock, while Lakeline's floor is the table file's min_orphan_age and `now` is a parameter (the DAG's
        data interval end). Deletion goes through the recording callback only when not a dry run."""
        from pyspark.java_gateway import ensure_callback_server_started

        spark = self.spark
        ensure_callback_server_started(spark.sparkContext._gateway)  # noqa: SLF001
        table = self._java_table()
        recorder = _Recorder()
        (spark._jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)  # noqa: SLF001
         .deleteOrphanFiles(table).olderThan(int(older_than.timestamp() * 1000)).deleteWith(recorder).execute())
        found = sorted(recorder.paths)
        if not dry_run:
            io = table.io()
            for path in found:
                io.deleteFile(path)
        return found

    def replace_rows(self, frame: "DataFrame") -> None:
        (frame.writeTo(self.identifier).option("distribution-mode", "none").option("fanout-enabled", "true")
         .overwritePartitions())

    def drop(self) -> None:
        """Drop the table with its files, then its namespace once no table is left in it."""
        catalog, namespace, _ = self._names
        self.spark.sql(f"DROP TABLE IF EXISTS {self.identifier} PURGE")
        if self.spark.sql(f"SHOW NAMESPACES IN {catalog} LIKE '{namespace}'").count() and \
                not self.spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").count():
            self.spark.sql(f"DROP NAMESPACE IF EXISTS {catalog}.{namespace}")


class _Recorder:
    """java.util.function.Consumer<String> that only records what the action would delete."""

    def __init__(self):
        self.paths: list[str] = []

    def accept(self, path):
        self.paths.append(str(path))

    class Java:
        implements = ["java.util.function.Consumer"]
