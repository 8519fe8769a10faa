"""Apache Iceberg: the commit record as a snapshot-summary property (the pipeline checks the newest record on the
current snapshot lineage before committing, so a replayed batch is a no-op); pyiceberg for the Spark-free read
(iceberg_reader.py). Tables live in the shared JDBC/SQL catalog that Spark and pyiceberg both read. Maintenance
(rewrite_data_files, expire_snapshots, orphan removal) is iceberg_maintenance.py. pyspark and pyiceberg are imported
inside the methods that need them (optional for the command's help)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY, CommitRecord
from ingest.errors import CommitConflict, ConfigError, LakelineError, UnknownCommitOutcome
from ingest.formats import LakeTable, TableFormat, ddl_columns, fence_property, java_raised
from ingest.formats.iceberg_history import (MAX_SNAPSHOT_AGE_KEY, MAX_SNAPSHOTS_KEY, MIN_SNAPSHOTS_KEY,
                                            STREAM_MAX_SNAPSHOT_AGE_MS, STREAM_MAX_SNAPSHOTS, STREAM_MIN_SNAPSHOTS,
                                            SnapshotExpirer, expiry_cutoff_ms, history_limits, takes_over)
from ingest.formats.iceberg_manifests import (MAX_MANIFESTS_KEY, MERGE_ENABLED_KEY, STREAM_MAX_MANIFESTS, UPKEEP_KEY,
                                              ManifestMerger, check_every, max_manifests)
from ingest.formats.iceberg_maintenance import IcebergMaintenance
from ingest.spark import is_rest_catalog
from ingest.types import rebuild

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from ingest.config import PipelineConfig
    from ingest.formats.iceberg_reader import IcebergTableReader
    from ingest.formats.iceberg_rewrite import IcebergRewriter
    from ingest.formats.table_maintenance import Layout
    from ingest.partitioning import PartitionField
    from ingest.settings import Settings

# The catalog's compare-and-swap of the metadata pointer lost (nothing landed), or a rewrite found its input files
# changed under it; and the commit whose outcome the catalog could not confirm.
_CONFLICTS = ("org.apache.iceberg.exceptions.CommitFailedException",
              "org.apache.iceberg.exceptions.ValidationException")
_UNKNOWN = ("org.apache.iceberg.exceptions.CommitStateUnknownException",)


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



def iceberg_catalog(settings: "Settings"):
    """The shared catalog (SQL, or an Iceberg REST catalog), as pyiceberg sees it."""
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
    from pyiceberg.catalog.sql import SqlCatalog  # SQLAlchemy with it: only for a SQL catalog

    return SqlCatalog(settings.iceberg_catalog_name, uri=uri, **properties)


class IcebergFormat(TableFormat):
    name = "iceberg"
    version_noun = "snapshots"
    metadata_noun = "metadata"
    rewrites_without_spark = True

    def stored(self, data_type: "DataType") -> "DataType":
        """Iceberg has no tinyint or smallint: Spark writes them as int."""
        from pyspark.sql.types import ByteType, IntegerType, ShortType

        return rebuild(data_type, lambda t: IntegerType() if isinstance(t, (ByteType, ShortType)) else t)

    def ref(self, config: "PipelineConfig", settings: "Settings", table: str | None = None) -> str:
        return config.iceberg_identifier(settings, table)

    def open(self, spark, ref, schema=None, partitioning=None, pipeline="", settings=None) -> "IcebergLakeTable":
        return IcebergLakeTable(spark, ref, schema, list(partitioning or []), pipeline, settings)

    def classify(self, exc: BaseException) -> type[LakelineError] | None:
        if java_raised(exc, *_UNKNOWN):
            return UnknownCommitOutcome
        if java_raised(exc, *_CONFLICTS):
            return CommitConflict
        return None

    def rewriter(self, ref: str, settings: "Settings", layout: "Layout",
                 partitioning: "list[PartitionField]") -> "IcebergRewriter | None":
        from ingest.formats.iceberg_rewrite import rewriter_for

        return rewriter_for(ref, settings, layout, partitioning)

    def reader(self, ref: str, settings: "Settings", hint: str = "", count_files: bool = False) -> "IcebergTableReader":
        from ingest.formats.iceberg_reader import IcebergTableReader

        return IcebergTableReader(ref, settings, hint, count_files)


class IcebergLakeTable(LakeTable):
    def __init__(self, spark: "SparkSession", identifier: str, schema: "StructType | None",
                 partitioning: "list[PartitionField]", pipeline: str, settings: "Settings | None" = None):
        super().__init__(spark, identifier, schema, partitioning, pipeline)
        self.settings = settings
        self.identifier = identifier
        self.display_name = f"iceberg:{identifier}"
        # Set by ensure() where the pipeline bounds the snapshot history (ingest.formats.iceberg_history) and merges
        # the manifests (ingest.formats.iceberg_manifests).
        self.snapshot_expiry: SnapshotExpirer | None = None
        self.manifest_merge: ManifestMerger | None = None
        # The stream's appends and the upkeep's commits take turns: a commit that lost the catalog's swap to the
        # other would retry after a 100 ms back-off and redo its metadata, in the stream's batch or beside it.
        self._commit_turn = threading.Lock()
        # ... and a Spark-free rewrite's commit (another process) goes between two of them: each commit waits for
        # its turn in the JVM (ingest.formats.commit_turn), which tells the stream how long, by the table's
        # location (set by ensure()).
        self._location: str | None = None

    @property
    def names(self) -> tuple[str, str, str]:
        catalog, namespace, name = self.identifier.split(".")
        return catalog, namespace, name

    # ---- the pipeline's side ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        catalog, namespace, _ = self.names
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
        table = self.java_table()
        table.refresh()  # one read of the catalog's current metadata for every check (a restart waits on them)
        self._settle_partitioning(table)
        self._start_upkeep(table)
        self._location = str(table.location())

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
        table = self.java_table()
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
        table = self.java_table()
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
            self._turn_waited()  # the upkeep's commits' waits are not this append's
            frame.writeTo(self.identifier).option(f"snapshot-property.{COMMIT_KEY}", record.to_json()).append()
            self.turn_wait_s = self._turn_waited()
        for upkeep in self._upkeep:
            upkeep.committed()

    def _turn_waited(self) -> float:
        """Seconds this table's commits in this driver waited for a rewrite's commit turn since the last call."""
        if self._location is None:
            return 0.0
        turn = self.spark.sparkContext._jvm.io.lakeline.iceberg.CommitTurn  # noqa: SLF001 - py4j
        return float(turn.takeWaitedSeconds(self._location))

    def close(self, timeout: float = 30) -> None:
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

    def java_table(self):
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001 - py4j
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.identifier)  # noqa: SLF001

    def last_commit(self) -> CommitRecord | None:
        """Found by walking the table's snapshots from the current one through their parents in the JVM: no Spark
        job, which in a driver that has just started is most of a restart's table reading."""
        table = self.java_table()
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
        table = self.java_table()
        table.refresh()
        transaction = table.newTransaction()
        transaction.updateProperties().set(fence_property(self.pipeline), str(token)).commit()
        transaction.newFastAppend().set("lakeline.fence", f"{self.pipeline}:{token}").commit()
        transaction.commitTransaction()

    def fence_token(self) -> int:
        table = self.java_table()
        table.refresh()
        value = table.properties().get(fence_property(self.pipeline))
        return int(value) if value else 0

    def read(self) -> "DataFrame":
        return self.spark.table(self.identifier)

    @property
    def sql_name(self) -> str:
        return self.identifier

    @cached_property
    def maintenance(self) -> IcebergMaintenance:
        return IcebergMaintenance(self)
