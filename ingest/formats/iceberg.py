"""Apache Iceberg: the commit record as a snapshot-summary property (the pipeline checks the newest record on the
current snapshot lineage before committing, so a replayed batch is a no-op); rewrite_data_files +
rewrite_manifests for compaction, expire_snapshots + orphan removal for retention, pyiceberg for the analyst
read. Tables live in the shared JDBC/SQL catalog that Spark and pyiceberg both read."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY, CommitRecord
from ingest.errors import CommitConflict, ConfigError, LakelineError, UnknownCommitOutcome
from ingest.formats import (Layout, LakeTable, RetentionOutcome, Rewrite, TableFiles, TableFormat, ddl_columns,
                            fence_property, java_raised, utc_from_millis)
from ingest.formats.iceberg_history import (MAX_SNAPSHOT_AGE_KEY, MAX_SNAPSHOTS_KEY, MIN_SNAPSHOTS_KEY,
                                            STREAM_MAX_SNAPSHOT_AGE_MS, STREAM_MAX_SNAPSHOTS, STREAM_MIN_SNAPSHOTS,
                                            SnapshotExpirer, expiry_cutoff_ms, history_limits, takes_over)
from ingest.formats.iceberg_manifests import (MAX_MANIFESTS_KEY, MERGE_ENABLED_KEY, STREAM_MAX_MANIFESTS, UPKEEP_KEY,
                                              ManifestMerger, check_every, max_manifests)
from ingest.partitioning import parse_key, partition_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from ingest.config import PipelineConfig
    from ingest.partitioning import PartitionField
    from ingest.settings import Settings

# The catalog's compare-and-swap of the metadata pointer lost (nothing landed), or a rewrite found its input files
# changed under it; and the commit whose outcome the catalog could not confirm.
_CONFLICTS = ("org.apache.iceberg.exceptions.CommitFailedException",
              "org.apache.iceberg.exceptions.ValidationException")
_UNKNOWN = ("org.apache.iceberg.exceptions.CommitStateUnknownException",)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def partition_term(field: "PartitionField") -> str:
    """The field as a Spark DDL partition transform: days(occurred_at), bucket(16, customer.id), ..."""
    source = ".".join(f"`{part}`" for part in field.path)
    kind, width = field.transform.kind, field.transform.width
    if kind == "identity":
        return source
    if kind in ("bucket", "truncate"):
        return f"{kind}({width}, {source})"
    return f"{kind}s({source})"


def _spec_name(field: "PartitionField") -> str:
    """How Iceberg writes the transform in a spec (bucket[16], truncate[4], day, identity)."""
    width = field.transform.width
    return field.transform.kind if width is None else f"{field.transform.kind}[{width}]"


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


def iceberg_catalog(settings: "Settings"):
    """The shared catalog (SQL, or an Iceberg REST catalog), as pyiceberg sees it."""
    from pyiceberg.catalog.sql import SqlCatalog

    from ingest.spark import is_rest_catalog

    uri = settings.require("iceberg_catalog_uri", "LAKELINE_ICEBERG_CATALOG_URI", "open the Iceberg catalog")
    properties = {"s3.region": settings.aws_region}
    if settings.s3_endpoint:
        properties["s3.endpoint"] = settings.s3_endpoint
    for name, value in settings.aws_credentials().items():
        properties["s3." + name.replace("_", "-")] = value
    if is_rest_catalog(uri):
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(settings.iceberg_catalog_name, uri=uri, **properties, **settings.rest_catalog_auth())
    if uri.startswith("jdbc:"):
        # Spark takes the jdbc: form; pyiceberg needs a SQLAlchemy URL and its driver.
        raise ConfigError(f"LAKELINE_ICEBERG_CATALOG_URI is a JDBC URI ({uri.split('?', 1)[0]}): the Spark-free read "
                          "(pyiceberg) needs the SQLAlchemy form of the catalog database, which Lakeline only has "
                          "for the embedded sqlite:/// catalog (or a REST catalog). Read this table through Spark "
                          "instead.")
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

    def open(self, spark, ref, schema=None, partitioning=None, pipeline="", settings=None) -> "IcebergLakeTable":
        return IcebergLakeTable(spark, ref, schema, list(partitioning or []), pipeline)

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
    def __init__(self, spark: "SparkSession", identifier: str, schema: "StructType | None",
                 partitioning: "list[PartitionField]", pipeline: str):
        super().__init__(spark, identifier, schema, partitioning, pipeline)
        self.identifier = identifier
        self.display_name = f"iceberg:{identifier}"
        # Set by ensure() where the pipeline bounds the snapshot history (ingest.formats.iceberg_history) and merges
        # the manifests (ingest.formats.iceberg_manifests).
        self.snapshot_expiry: SnapshotExpirer | None = None
        self.manifest_merge: ManifestMerger | None = None
        # The stream's appends and the upkeep's commits take turns: a commit that lost the catalog's swap to the
        # other would retry after a 100 ms back-off and redo its metadata, in the stream's batch or beside it.
        self._commit_turn = threading.Lock()

    @property
    def _names(self) -> tuple[str, str, str]:
        catalog, namespace, name = self.identifier.split(".")
        return catalog, namespace, name

    # ---- the pipeline's side ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        catalog, namespace, _ = self._names
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        terms = ", ".join(partition_term(field) for field in self.partitioning)
        partitioned = f" PARTITIONED BY ({terms})" if terms else ""
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.identifier} ({ddl_columns(self.schema)}) USING iceberg{partitioned} "
            "TBLPROPERTIES ('format-version'='2', 'write.format.default'='parquet', "
            "'commit.retry.num-retries'='10', 'write.metadata.delete-after-commit.enabled'='true', "
            f"'write.metadata.previous-versions-max'='100', '{MAX_SNAPSHOT_AGE_KEY}'='{STREAM_MAX_SNAPSHOT_AGE_MS}', "
            f"'{MIN_SNAPSHOTS_KEY}'='{STREAM_MIN_SNAPSHOTS}', '{MAX_SNAPSHOTS_KEY}'='{STREAM_MAX_SNAPSHOTS}', "
            f"'{MERGE_ENABLED_KEY}'='false', '{MAX_MANIFESTS_KEY}'='{STREAM_MAX_MANIFESTS}')")
        table = self._java_table()
        table.refresh()  # one read of the catalog's current metadata for every check (a restart waits on them)
        self._settle_partitioning(table)
        self._start_upkeep(table)

    def _start_upkeep(self, table) -> None:
        """The running pipeline bounds the table's snapshot history where the table sets its max snapshot age
        (ingest.formats.iceberg_history), and merges its manifests where it sets lakeline.manifests.max-count
        (ingest.formats.iceberg_manifests; a bad value is a ConfigError naming it, before the first batch)."""
        properties = dict(table.properties())
        name = self.identifier.rsplit(".", 1)[-1]
        self.snapshot_expiry = (SnapshotExpirer(name, self.expire_snapshots)
                                if takes_over(properties.get(MAX_SNAPSHOT_AGE_KEY)) else None)
        limit = max_manifests(properties)
        self.manifest_merge = ManifestMerger(name, self.merge_manifests, check_every(limit)) if limit else None

    def expire_snapshots(self) -> int:
        """Expire the snapshots past the table's own limits (max age, max count), keeping its min-snapshots-to-keep
        and never the snapshot that holds this pipeline's newest commit record; metadata only, no file is deleted
        (see ingest.formats.iceberg_history). Returns how many it expired."""
        import time

        table = self._java_table()
        table.refresh()
        max_age, keep_at_least, max_count = history_limits(dict(table.properties()))
        before = table.snapshots().size()
        nth_newest = None
        if max_count and before > max_count:
            row = self.spark.sql(f"SELECT unix_millis(committed_at) FROM {self.identifier}.snapshots "
                                 f"ORDER BY committed_at DESC LIMIT 1 OFFSET {max_count - 1}").first()
            nth_newest = row[0] if row is not None else None  # Spark's view lagged the table's: age only this time
        cutoff = expiry_cutoff_ms(int(time.time() * 1000), max_age, nth_newest)
        _, holding = self._newest_record_snapshot(table)
        if holding is not None:  # expireOlderThan keeps a snapshot committed at the cutoff itself
            cutoff = min(cutoff, int(holding.timestampMillis()))
        with self._commit_turn:
            table.expireSnapshots().expireOlderThan(cutoff).retainLast(keep_at_least).cleanExpiredFiles(False).commit()
        table.refresh()
        return before - table.snapshots().size()

    def merge_manifests(self) -> int:
        """Merge the manifests that appends added since the last merge (those listing added files) once the current
        snapshot holds lakeline.manifests.max-count of them, by Iceberg's RewriteManifests on the driver (no Spark
        job); manifests merged before and compaction's are left as they are. Returns how many manifests it replaced
        (0 under the limit). See ingest.formats.iceberg_manifests."""
        table = self._java_table()
        table.refresh()
        limit = max_manifests(dict(table.properties()))
        snapshot = table.currentSnapshot()
        if limit is None or snapshot is None:
            return 0
        fresh = [m for m in snapshot.allManifests(table.io()) if m.hasAddedFiles()]
        if len(fresh) < limit:
            return 0
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001 - py4j
        # Guava (Spark ships 33.x, whose Function and Predicate are java.util.function's) builds both arguments in
        # the JVM, with no Python callback per manifest or file: the chosen manifests by their description (the
        # manifest list's entries, read again by the rewrite, describe themselves identically), and one cluster key,
        # so they merge into manifests of the target size as Iceberg's own merge would.
        guava = jvm.com.google.common.base
        described = jvm.java.util.HashSet()
        for manifest in fresh:
            described.add(manifest.toString())
        chosen = guava.Predicates.compose(getattr(guava.Predicates, "in")(described),
                                          guava.Functions.toStringFunction())
        merge = (table.rewriteManifests().rewriteIf(chosen).clusterBy(guava.Functions.constant("lakeline"))
                 .set(UPKEEP_KEY, "manifest-merge"))
        merge.apply()  # reads the chosen manifests and writes the merged ones, while the stream goes on
        with self._commit_turn:  # then only a manifest list and the swap, between two of the stream's commits
            merge.commit()  # (appends since apply() only added manifests: the merged ones are reused as they are)
        return len(fresh)

    def _settle_partitioning(self, table) -> None:
        """Check the table's partition spec is the declared one (ConfigError naming both if not), and give its
        fields the declared names (Spark's DDL cannot name them: a new table has Iceberg's defaults, e.g.
        `customer.id_bucket`, renamed in one metadata commit; a crash before it is mended by the next start)."""
        spec = [(str(f.name()), str(table.schema().findColumnName(f.sourceId())), str(f.transform()))
                for f in table.spec().fields()]
        want = [(field.column, field.source, _spec_name(field)) for field in self.partitioning]
        if [(s.lower(), t) for _, s, t in spec] != [(s.lower(), t) for _, s, t in want]:
            have = ", ".join(f"{n} = {t}({s})" for n, s, t in spec) or "nothing"
            declared = ", ".join(f"{n} = {t}({s})" for n, s, t in want) or "nothing"
            raise ConfigError(
                f"{self.display_name} is partitioned by [{have}] but sink.partition declares [{declared}]. "
                "Lakeline never re-partitions a table: declare the table's partitioning, or evolve the table's "
                f"spec yourself (ALTER TABLE {self.identifier} REPLACE PARTITION FIELD ... WITH ...) and then the "
                "YAML.")
        renames = [(have[0], wanted[0]) for have, wanted in zip(spec, want, strict=True) if have[0] != wanted[0]]
        if renames:
            update = table.updateSpec()
            for old, new in renames:
                update = update.renameField(old, new)
            update.commit()

    def append(self, frame: "DataFrame", record: CommitRecord, may_be_replay: bool = True) -> None:
        # Iceberg has no commit-time transaction id; the pipeline's own replay check covers it.
        with self._commit_turn:
            frame.writeTo(self.identifier).option(f"snapshot-property.{COMMIT_KEY}", record.to_json()).append()
        for upkeep in self._upkeep:
            upkeep.committed()

    def close(self, timeout: float = 30) -> None:
        import time

        deadline = time.monotonic() + timeout
        for upkeep in self._upkeep:
            upkeep.wait(max(0.0, deadline - time.monotonic()))

    @property
    def _upkeep(self) -> list:
        return [u for u in (self.snapshot_expiry, self.manifest_merge) if u is not None]

    def commits(self) -> list[CommitRecord]:
        # Snapshots on the current lineage (rolled-back branches excluded), oldest first.
        rows = self.spark.sql(
            f"SELECT s.committed_at, s.summary['{COMMIT_KEY}'] AS record "
            f"FROM {self.identifier}.snapshots s JOIN {self.identifier}.history h ON s.snapshot_id = h.snapshot_id "
            f"WHERE h.is_current_ancestor AND s.summary['{COMMIT_KEY}'] IS NOT NULL "
            f"ORDER BY h.made_current_at, s.committed_at").collect()
        records = [CommitRecord.from_json(row["record"]) for row in rows]
        return [r for r in records if r is not None and r.pipeline == self.pipeline]

    def history_complete(self) -> bool:
        ident = self.identifier
        first, kept = self.spark.sql(
            f"SELECT count_if(s.parent_id IS NULL), count(*) FROM {ident}.snapshots s JOIN {ident}.history h "
            "ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor").first()
        return first > 0 or kept == 0  # no snapshot yet: nothing has expired

    def _java_table(self):
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001 - py4j
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.identifier)  # noqa: SLF001

    def last_commit(self) -> CommitRecord | None:
        """Found by walking the table's snapshots from the current one through their parents in the JVM: no Spark
        job, which in a driver that has just started is most of a restart's table reading."""
        table = self._java_table()
        table.refresh()  # Spark's catalog caches tables: read the catalog's current metadata
        return self._newest_record_snapshot(table)[0]

    def _newest_record_snapshot(self, table):
        """(this pipeline's newest commit record, the JVM snapshot holding it), or (None, None): walked from the
        current snapshot through its parents."""
        snapshot = table.currentSnapshot()
        while snapshot is not None:
            record = CommitRecord.from_json(snapshot.summary().get(COMMIT_KEY))
            if record is not None and record.pipeline == self.pipeline:
                return record, snapshot
            parent = snapshot.parentId()
            snapshot = table.snapshot(parent) if parent is not None else None  # None: expired
        return None, None

    def last_commit_time(self) -> datetime | None:
        rows = self.spark.sql(
            f"SELECT CAST(s.committed_at AS DOUBLE) AS epoch, s.summary['{COMMIT_KEY}'] AS record "
            f"FROM {self.identifier}.snapshots s WHERE s.summary['{COMMIT_KEY}'] IS NOT NULL "
            f"ORDER BY s.committed_at DESC LIMIT 200").collect()
        times = [row["epoch"] for row in rows
                 if (record := CommitRecord.from_json(row["record"])) and record.pipeline == self.pipeline]
        return datetime.fromtimestamp(max(times), UTC) if times else None

    def _raise_fence(self, token: int) -> None:
        # The property and an empty snapshot in one commit: a REST catalog checks a commit against the base's
        # current snapshot, not its properties, so only a new snapshot makes a commit that an older driver based on
        # the table before the fence fail (and retry on the fenced table, which refuses it).
        table = self._java_table()
        table.refresh()
        transaction = table.newTransaction()
        transaction.updateProperties().set(fence_property(self.pipeline), str(token)).commit()
        transaction.newFastAppend().set("lakeline.fence", f"{self.pipeline}:{token}").commit()
        transaction.commitTransaction()

    def fence_token(self) -> int:
        table = self._java_table()
        table.refresh()
        value = table.properties().get(fence_property(self.pipeline))
        return int(value) if value else 0

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

    def _partition_values(self) -> list:
        """Columns giving each partition field's value as text, in declared order (by position in the table's
        spec, so a table whose fields still have Iceberg's default names reads the same)."""
        from pyspark.sql import functions as F

        names = [str(f.name()) for f in self._java_table().spec().fields()]
        if len(names) != len(self.partitioning):
            raise ConfigError(f"{self.display_name} has {len(names)} partition field(s) ({', '.join(names)}), "
                              f"sink.partition declares {len(self.partitioning)}")
        return [F.col("partition").getField(name).cast("string").alias(f"p{i}") for i, name in enumerate(names)]

    def _key(self, row) -> str:
        return partition_key([(field.column, shown_value(field, row[f"p{i}"]))
                              for i, field in enumerate(self.partitioning)])

    def measure(self) -> TableFiles:
        from pyspark.sql import functions as F

        from ingest.adapters.hadoop_fs import HadoopFS

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

    def rewrite_partition(self, partition: str | None, layout: Layout) -> Rewrite:
        """rewrite_data_files through Iceberg's action API, so one partition is chosen by its transform's value
        (a bucket or truncate partition has no predicate on the source column that selects exactly it)."""
        spark = self.spark
        jvm = spark._jvm  # noqa: SLF001 - py4j
        table = self._java_table()
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
        if partition:
            action = action.filter(self._partition_filter(partition))
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
                raise ConfigError(f"{self.display_name}: {column!r} in partition {partition!r} is not a partition "
                                  f"field ({', '.join(fields) or 'the table is unpartitioned'})")
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
