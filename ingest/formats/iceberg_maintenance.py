"""Iceberg maintenance: file stats from the metadata tables, rewrite_data_files + rewrite_manifests for compaction,
expire_snapshots + orphan removal for retention. pyspark is imported inside the functions that need it (they run in
a Spark session anyway)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.commits import COMMIT_KEY
from ingest.errors import ConfigError
from ingest.formats import utc_from_millis
from ingest.formats.iceberg_manifests import UPKEEP_KEY
from ingest.formats.table_maintenance import Layout, RetentionOutcome, Rewrite, TableFiles, TableMaintenance
from ingest.partitioning import parse_key, partition_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from ingest.formats.iceberg import IcebergLakeTable
    from ingest.partitioning import PartitionField

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def shown_value(field: "PartitionField", value: str | None) -> str | None:
    """A partition value as Iceberg stores it (its text in Spark) -> as Lakeline shows it on both formats: hour,
    month and year ordinals become 2026-11-20-13, 2026-11 and 2026."""
    kind = field.transform.kind
    if value is None or kind not in ("hour", "month", "year"):
        return value
    ordinal = int(value)
    if kind == "hour":
        return (_EPOCH + timedelta(hours=ordinal)).strftime("%Y-%m-%d-%H")
    if kind == "month":
        return f"{1970 + ordinal // 12:04d}-{ordinal % 12 + 1:02d}"
    return f"{1970 + ordinal:04d}"


def stored_value(field: "PartitionField", value: str):
    """The inverse of `shown_value`, as the Java literal Iceberg's expression wants (ints for ordinals, buckets,
    integers and dates (days since epoch), bool, else the text, which Iceberg converts to the term's type)."""
    from pyspark.sql.types import BooleanType, ByteType, DateType, IntegerType, LongType, ShortType

    kind = field.transform.kind
    if kind == "hour":
        moment = datetime.strptime(value, "%Y-%m-%d-%H").replace(tzinfo=UTC)
        return int((moment - _EPOCH).total_seconds() // 3600)
    if kind == "month":
        year, month = value.split("-")
        return (int(year) - 1970) * 12 + int(month) - 1
    if kind == "year":
        return int(value) - 1970
    if kind == "day" or (kind == "identity" and isinstance(field.source_type, DateType)):
        return (datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC) - _EPOCH).days
    if kind == "bucket" or isinstance(field.source_type, (ByteType, ShortType, IntegerType, LongType)):
        return int(value)
    if isinstance(field.source_type, BooleanType):
        return value == "true"
    return value


class IcebergMaintenance(TableMaintenance):
    def __init__(self, table: "IcebergLakeTable"):
        self.table = table
        self.spark, self.identifier, self.partitioning = table.spark, table.identifier, table.partitioning

    def _location(self) -> str:
        for row in self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.identifier}").collect():
            if row[0] == "Location":
                return row[1].rstrip("/")
        raise AssertionError(f"{self.identifier}: DESCRIBE TABLE EXTENDED has no Location")

    def _current_snapshot_id(self) -> int | None:
        current = self.spark.sql(f"SELECT snapshot_id FROM {self.identifier}.history WHERE is_current_ancestor "
                                 f"ORDER BY made_current_at DESC LIMIT 1").collect()
        return int(current[0][0]) if current else None

    def _partition_values(self) -> list:
        """Columns giving each partition field's value as text, in declared order (by position in the table's
        spec, so a table whose fields still have Iceberg's default names reads the same)."""
        from pyspark.sql import functions as F

        names = [str(f.name()) for f in self.table.java_table().spec().fields()]
        if len(names) != len(self.partitioning):
            raise ConfigError(f"{self.table.display_name} has {len(names)} partition field(s) "
                              f"({', '.join(names)}), sink.partition declares {len(self.partitioning)}")
        return [F.col("partition").getField(name).cast("string").alias(f"p{i}") for i, name in enumerate(names)]

    def _key(self, row) -> str:
        return partition_key([(field.column, shown_value(field, row[f"p{i}"]))
                              for i, field in enumerate(self.partitioning)])

    def measure(self) -> TableFiles:
        from pyspark.sql import functions as F

        ident = self.identifier
        values = self._partition_values()
        files = self.spark.table(f"{ident}.files").where("content = 0")
        sizes = [(self._key(r), int(r["file_size_in_bytes"]))
                 for r in files.select(*values, "file_size_in_bytes").collect()]
        # An unpartitioned table's `partitions` table has no partition column.
        updated = {self._key(r): utc_from_millis(r["updated_ms"]) for r in self.spark.table(f"{ident}.partitions")
                   .select(*values, F.unix_millis("last_updated_at").alias("updated_ms")).collect()}
        committed_ms = F.unix_millis("committed_at")
        stats = self.spark.table(f"{ident}.snapshots").agg(
            F.count("*").alias("n"), F.min(committed_ms).alias("oldest"),
            # the pipeline's manifest merges are `replace` snapshots too, but not compactions
            F.max(F.when((F.col("operation") == "replace") & F.col("summary")[UPKEEP_KEY].isNull(), committed_ms))
            .alias("replaced")).first()
        location = self._location()
        metadata = HadoopFS(self.spark).list_status(f"{location}/metadata")
        return TableFiles(location, [(p, s, updated.get(p)) for p, s in sizes], int(stats["n"]),
                          self._current_snapshot_id(), sum(size for _, size, _ in metadata),
                          utc_from_millis(stats["oldest"]), utc_from_millis(stats["replaced"]))

    def file_counts(self) -> dict[str, int]:
        values = self._partition_values()
        files = self.spark.table(f"{self.identifier}.files").where("content = 0").select(*values)
        return {self._key(r): int(r["count"])
                for r in files.groupBy(*(f"p{i}" for i in range(len(values)))).count().collect()}

    def rewrite_partitions(self, partitions: "Sequence[str] | None", layout: Layout) -> Rewrite:
        """rewrite_data_files through Iceberg's action API, so a partition is chosen by its transform's value
        (a bucket or truncate partition has no predicate on the source column that selects exactly it)."""
        spark = self.spark
        jvm = spark._jvm  # noqa: SLF001 - py4j
        table = self.table.java_table()
        action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)  # noqa: SLF001
        action = action.rewriteDataFiles(table)
        if layout.zorder_by:
            columns = spark.sparkContext._gateway.new_array(jvm.String, len(layout.zorder_by))  # noqa: SLF001
            for index, column in enumerate(layout.zorder_by):
                columns[index] = column
            action = action.zOrder(columns)
        elif layout.sort_by:
            order = jvm.org.apache.iceberg.SortOrder.builderFor(table.schema())
            for column in layout.sort_by:
                order = order.asc(column, jvm.org.apache.iceberg.NullOrder.NULLS_LAST)
            action = action.sort(order.build())
        else:
            action = action.binPack()
        if partitions:
            expressions = jvm.org.apache.iceberg.expressions.Expressions
            chosen = expressions.alwaysFalse()
            for partition in partitions:
                chosen = getattr(expressions, "or")(chosen, self._partition_filter(partition))
            action = action.filter(chosen)
        options = {"target-file-size-bytes": layout.target_bytes, "min-file-size-bytes": layout.small_below,
                   "min-input-files": 2, "partial-progress.enabled": "false"}
        for key, value in options.items():
            action = action.option(key, str(value))
        result = action.execute()
        return Rewrite(int(result.rewrittenDataFilesCount()), int(result.addedDataFilesCount()),
                       int(result.rewrittenBytesCount()))

    def _partition_filter(self, partition: str):
        """An Iceberg expression selecting exactly the partition `partition` (a key from `measure`)."""
        expressions = self.spark._jvm.org.apache.iceberg.expressions.Expressions  # noqa: SLF001 - py4j
        fields = {field.column: field for field in self.partitioning}
        combined = expressions.alwaysTrue()
        for column, value in parse_key(partition):
            if column not in fields:
                raise ConfigError(f"{self.table.display_name}: {column!r} in partition {partition!r} is not a "
                                  f"partition field ({', '.join(fields) or 'the table is unpartitioned'})")
            field = fields[column]
            kind, width = field.transform.kind, field.transform.width
            term = (expressions.ref(field.source) if kind == "identity"
                    else getattr(expressions, kind)(field.source, width) if width is not None
                    else getattr(expressions, kind)(field.source))
            predicate = (expressions.isNull(term) if value is None
                         else expressions.equal(term, stored_value(field, value)))
            combined = getattr(expressions, "and")(combined, predicate)
        return combined

    def tidy_metadata(self) -> int:
        catalog, namespace, name = self.table.names
        row = self.spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => '{namespace}.{name}')").first()
        return int(row["rewritten_manifests_count"])

    def remove_expired(self, retain: timedelta, orphan_older_than: timedelta, now: datetime,
                       dry_run: bool) -> RetentionOutcome:
        """expire_snapshots older than `retain`, never the newest snapshot holding the pipeline's commit record
        (its resume offsets), then orphan files older than `orphan_older_than`."""
        from pyspark.sql import functions as F

        catalog, namespace, name = self.table.names
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
        table = self.table.java_table()
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
        catalog, namespace, _ = self.table.names
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
