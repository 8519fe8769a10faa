"""The table-format seam. What differs between Delta Lake and Apache Iceberg lives behind `TableFormat` (stateless,
one per format: where a pipeline's tables are, commit-failure classification, and the Spark-free read: its facet
`format.reader(ref, settings)`, a `TableReader`),
`LakeTable` (one table in one Spark session, the stream's side: create, append with the commit record, commit
records, fence, schema) and its facet `table.maintenance` (`TableMaintenance`: measure, compact, expire, drop).
Callers never branch on the format: `format_for(name)` is the only place a name becomes an implementation.

pyspark, py4j and the ingest modules that load pyspark types are imported inside functions: the command imports
this module to parse its arguments. The format modules import this one, so `format_for` imports them late.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from ingest.commits import CommitRecord
from ingest.errors import ConfigError, DriverFenced, LakelineError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from ingest.config import PipelineConfig
    from ingest.evolution import SchemaChange
    from ingest.formats.table_maintenance import Layout, PartitionRewriter, TableMaintenance
    from ingest.formats.table_reader import TableReader
    from ingest.partitioning import PartitionField
    from ingest.settings import Settings

FORMAT_NAMES = ("delta", "iceberg")


class LakeTable(ABC):
    """One table (Delta or Iceberg) in one Spark session, as the stream uses it; `maintenance` is the rest.
    `pipeline` names whose commit records count as this table's (commits by others, e.g. compaction, carry none)."""

    display_name: str
    ref: str  # Delta: the location; Iceberg: catalog.namespace.table
    # Seconds the last append waited for another process's commit to land first (Iceberg's commit turn; 0 where
    # the format takes none): the batch reports it as its `turn` phase.
    turn_wait_s: float = 0.0

    def __init__(self, spark: "SparkSession", ref: str, schema: "StructType | None",
                 partitioning: "list[PartitionField]", pipeline: str):
        self.spark, self.ref, self.schema = spark, ref, schema
        self.partitioning, self.pipeline = partitioning, pipeline

    # ---- the pipeline's side ---------------------------------------------------------------------------------
    @abstractmethod
    def ensure(self) -> None:
        """Create the table if it does not exist (schema and partitioning from config). An existing table
        partitioned otherwise than `partitioning` is a ConfigError naming both: Lakeline never re-partitions."""

    @abstractmethod
    def append(self, frame: "DataFrame", record: CommitRecord, may_be_replay: bool = True) -> None:
        """Append `frame` atomically with `record` in the same commit. The pipeline skips a replay of a
        (lineage, batch) the table already holds; with `may_be_replay` the table also checks at commit time where
        the format can (Delta's txnAppId/txnVersion)."""

    def close(self, timeout: float = 30) -> None:
        """Let work the table runs in the background end (at most `timeout` s): a run calls this as it stops."""
        return None  # most tables run nothing in the background

    @abstractmethod
    def commits(self) -> list[CommitRecord]:
        """This pipeline's commit records, oldest first, on the table's current lineage of versions/snapshots."""

    @abstractmethod
    def history_complete(self) -> bool:
        """Whether the table still keeps its first version/snapshot: `commits()` then starts at the pipeline's
        first commit. Expired history (Iceberg snapshots past their max age, Delta's cleaned-up log) starts later."""

    @abstractmethod
    def last_commit(self) -> CommitRecord | None:
        """This pipeline's newest commit record (what `commits()[-1]` gives), read as cheaply as the format can."""

    @abstractmethod
    def last_commit_time(self) -> datetime | None:
        """When this pipeline's newest commit landed, by the table's own clock (UTC)."""

    @abstractmethod
    def read(self) -> "DataFrame":
        """The table's current rows."""

    def table_schema(self) -> "StructType":
        """The table's current schema, as the table has it (not as config declares it)."""
        return self.read().schema

    @property
    @abstractmethod
    def sql_name(self) -> str:
        """How Spark SQL names this table in ALTER TABLE."""

    # ---- the fence (ingest.lease) ----------------------------------------------------------------------------
    @abstractmethod
    def fence_token(self) -> int:
        """The table's fence for this pipeline (`lakeline.fence.<pipeline>`), 0 when it has none."""

    def fence(self, token: int, current: int | None = None) -> None:
        """Raise the table's fence for this pipeline to `token`, before the driver reads where the table stands:
        from this commit on, the table refuses commits of the pipeline that carry a lower token (checked inside
        each atomic commit: Lakeline's Delta LogStore, Iceberg's FencingCatalog). A table fenced higher than
        `token` means another driver has taken the pipeline over: DriverFenced. `current`: the fence the caller
        has just read (else it is read here)."""
        current = self.fence_token() if current is None else current
        if current > token:
            raise DriverFenced(f"{self.display_name} is fenced at token {current} for pipeline {self.pipeline}, "
                               f"above this driver's {token}: another driver has taken the pipeline over")
        if current < token:
            self._raise_fence(int(token))

    def _raise_fence(self, token: int) -> None:
        """The commit that sets the fence property (a table property change)."""
        self.spark.sql(f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES ('{fence_property(self.pipeline)}' = '{token}')")

    def unfence(self) -> None:
        """This driver stops committing to the table (its run ended)."""
        return None

    def add_columns(self, columns: "StructType") -> None:
        """Add nullable top-level columns; columns the table already has are an error."""
        from ingest.evolution import SchemaChange

        self.evolve([SchemaChange("add", (f.name,), f.dataType) for f in columns.fields])

    def evolve(self, changes: "list[SchemaChange]") -> None:
        """Apply schema changes (`ingest.evolution.plan_changes`): add nullable (nested) fields, widen types with
        the format's own evolution. Every addition is in one table commit (one `ADD COLUMNS` of them all: Delta
        one metadata update, Iceberg one schema update); each widening is its own. None rewrites data."""
        from ingest.types import quote, to_ddl

        added = [f"{'.'.join(quote(part) for part in c.path)} {to_ddl(c.data_type)}" for c in changes
                 if c.kind == "add"]
        if added:
            self.spark.sql(f"ALTER TABLE {self.sql_name} ADD COLUMNS ({', '.join(added)})")
        for change in changes:
            if change.kind != "add":
                self.widen(".".join(quote(part) for part in change.path), change.data_type)

    def widen(self, column: str, data_type: "DataType") -> None:
        """Change a column to a wider type (int->long, float->double, decimal precision up)."""
        self.spark.sql(f"ALTER TABLE {self.sql_name} ALTER COLUMN {column} TYPE {data_type.simpleString()}")

    # ---- maintenance's side ----------------------------------------------------------------------------------
    @property
    @abstractmethod
    def maintenance(self) -> "TableMaintenance":
        """Measure, compact, expire and drop this table (ingest.formats.table_maintenance)."""


class TableFormat(ABC):
    """One table format: how a pipeline's tables are named and opened, and what it calls a version."""

    name: ClassVar[str]
    version_noun: ClassVar[str]  # "versions" / "snapshots"
    rewrites_without_spark: ClassVar[bool] = False  # `rewriter` can return one (where the table allows)
    metadata_noun: ClassVar[str]  # "log" / "metadata"

    @abstractmethod
    def ref(self, config: "PipelineConfig", settings: "Settings", table: str | None = None) -> str:
        """Where the pipeline's table (or its table named `table`, e.g. the dead-letter table) is."""

    def spark_sql_name(self, ref: str) -> str:
        """How a Spark SQL query names the table at `ref` (the SQL endpoint's views select from it)."""
        return ref

    @abstractmethod
    def open(self, spark: "SparkSession", ref: str, schema: "StructType | None" = None,
             partitioning: "list[PartitionField] | None" = None, pipeline: str = "",
             settings: "Settings | None" = None) -> LakeTable:
        """A handle on the table at `ref` (created by `ensure()`, when schema is given). `settings` let a
        table reach the store without Spark for upkeep off the commit path (Delta's log checkpoints)."""

    def scratch(self, spark: "SparkSession", directory: str, schema: "StructType",
                partitioning: "list[PartitionField]", pipeline: str) -> LakeTable | None:
        """A throwaway table under a local `directory` for warming up the write path, or None when the format
        needs a catalog for any table."""
        return None

    def stored(self, data_type: "DataType") -> "DataType":
        """What the table will hold for a declared type (Iceberg has no tinyint/smallint: they are int there)."""
        return data_type

    @abstractmethod
    def classify(self, exc: BaseException) -> type[LakelineError] | None:
        """The taxonomy class of a commit failure, from its exception types: CommitConflict (nothing landed,
        retry), UnknownCommitOutcome (reconcile from the table), or None (not a commit-outcome problem)."""

    def layout_problem(self, sort_by: list[str], zorder_by: list[str]) -> str | None:
        """Why this format cannot compact with that layout (None: it can)."""
        return None

    def rewriter(self, ref: str, settings: "Settings", layout: "Layout",
                 partitioning: "list[PartitionField]") -> "PartitionRewriter | None":
        """Compaction of the table at `ref` (partitioned by `partitioning`) without Spark (its own library), or None
        where only Spark's (`LakeTable.maintenance.rewrite_partitions`) can."""
        return None

    @abstractmethod
    def reader(self, ref: str, settings: "Settings", hint: str = "", count_files: bool = False) -> "TableReader":
        """The Spark-free reader facet of the table at `ref` (delta-rs / pyiceberg; ingest.formats.table_reader),
        as a notebook, BI extract or `lakeline query` reads it. `hint`: what to do when it does not exist yet;
        `count_files`: count the data files its scans open."""

    def register_for_analyst(self, ref: str, settings: "Settings", connection, name: str) -> None:
        """Register the table in a DuckDB `connection` as `name`, read without Spark (`reader(...).register`)."""
        self.reader(ref, settings).register(connection, name)


def format_for(name: str) -> TableFormat:
    """The implementation of a format name (config's `sink.format`)."""
    if name == "delta":
        from ingest.formats.delta import DeltaFormat

        return DeltaFormat()
    if name == "iceberg":
        from ingest.formats.iceberg import IcebergFormat

        return IcebergFormat()
    raise ConfigError(f"sink.format {name!r} is not a table format; use one of {', '.join(FORMAT_NAMES)}")


def tables_for(spark: "SparkSession", config: "PipelineConfig", settings: "Settings") -> tuple[LakeTable, LakeTable]:
    """(main table, dead-letter table) of a pipeline."""
    from ingest.transforms import coordinates_for, dead_letter_schema, table_schema

    fmt = format_for(config.sink.format)
    return (fmt.open(spark, fmt.ref(config, settings), table_schema(config), config.partitioning, config.pipeline,
                     settings),
            fmt.open(spark, fmt.ref(config, settings, config.sink.dead_letters),
                     dead_letter_schema(coordinates_for(config)), [], config.pipeline, settings))


def routed_tables_for(spark: "SparkSession", config: "PipelineConfig", settings: "Settings",
                      main: LakeTable | None = None) -> list[LakeTable]:
    """The routed tables of a pipeline with `sink.route` (none without): those its main table's newest commit
    record lists (ingest.routing.known_routes), each opened with its own configuration."""
    from ingest.routing import known_routes, table_config
    from ingest.transforms import table_schema

    if config.sink.route is None:
        return []
    main = main if main is not None else tables_for(spark, config, settings)[0]
    last = main.last_commit()
    fmt = format_for(config.sink.format)
    tables = []
    for name in known_routes(config, last.extra if last else None):
        own = table_config(config, name)
        tables.append(fmt.open(spark, fmt.ref(own, settings), table_schema(own), own.partitioning, config.pipeline,
                               settings))
    return tables


def routed_names(config: "PipelineConfig", settings: "Settings") -> list[str]:
    """The routed tables of a pipeline with `sink.route`, read without Spark: those its main table's newest commit
    record lists (none before its first commit, or without a route). Every Spark-free surface (`lakeline tables`,
    `query`, the SQL endpoint, health, compaction and retention) finds them here."""
    from ingest.routing import known_routes

    if config.sink.route is None:
        return []
    fmt = format_for(config.sink.format)
    reader = fmt.reader(fmt.ref(config, settings), settings)
    if not reader.exists():
        return []
    newest = reader.last_commit(config.pipeline)
    return known_routes(config, newest.record.extra if newest and newest.record else None)


def ddl_columns(schema: "StructType") -> str:
    """Column definitions for CREATE TABLE (nested types with quoted names, NOT NULL kept)."""
    from ingest.types import quote, to_ddl

    return ", ".join(f"{quote(f.name)} {to_ddl(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                     for f in schema.fields)


FENCE_PREFIX = "lakeline.fence."
FENCED_COMMIT = "io.lakeline.fence.FencedCommitException"


def fence_property(pipeline: str) -> str:
    """The table property that holds the pipeline's fencing token."""
    return FENCE_PREFIX + pipeline


def refused_by_fence(exc: BaseException) -> bool:
    """Whether a commit failed because the table is fenced above this driver's token (by exception type)."""
    return java_raised(exc, FENCED_COMMIT)


def utc_from_millis(value) -> datetime | None:
    """A table's epoch-millisecond time as an aware UTC datetime (None stays None)."""
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC)


def java_raised(exc: BaseException, *class_names: str) -> bool:
    """Whether `exc`, or anything in its Python or Java cause chain, is an instance of one of the JVM classes
    `class_names` (subclasses included): a typed check, never a match on message text."""
    from py4j.java_gateway import is_instance_of
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    gateway = SparkContext._gateway  # noqa: SLF001 - py4j
    if gateway is None:
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        throwable = getattr(current, "_origin", None) or getattr(current, "java_exception", None)
        depth = 0
        while throwable is not None and depth < 32:
            try:
                if any(is_instance_of(gateway, throwable, name) for name in class_names):
                    return True
                throwable = throwable.getCause()
            except Py4JError:
                break
            depth += 1
        current = current.__cause__ or current.__context__
    return False
