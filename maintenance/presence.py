"""Does a pipeline's table exist yet? The reading commands (dead-letters, reconcile, freshness, health, compact,
retain) ask before they start Spark, so a table the pipeline has not created yet is one line naming it and what to
do, in about a second rather than a traceback after a Spark start. The tables come into being at the pipeline's
first start (ingest.startup), so before it there is nothing to read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.errors import TableNotFound
from ingest.formats import format_for, java_raised
from ingest.preflight import existing_table_schema

if TYPE_CHECKING:
    from ingest.config import PipelineConfig
    from ingest.settings import Settings

# Spark's error conditions for a table or path that is not there (a JDBC catalog, or a table dropped after the
# Spark-free check), and the JVM classes of a missing table: the same one line as the check gives.
_NOT_FOUND = frozenset({"TABLE_OR_VIEW_NOT_FOUND", "PATH_NOT_FOUND", "DELTA_TABLE_NOT_FOUND",
                        "DELTA_MISSING_DELTA_TABLE"})
_NOT_FOUND_CLASSES = ("org.apache.spark.sql.catalyst.analysis.NoSuchTableException",
                      "org.apache.iceberg.exceptions.NoSuchTableException")


def table_exists(config: "PipelineConfig", settings: "Settings", table: str | None = None) -> bool | None:
    """Whether the pipeline's main table (or its table `table`) exists, without Spark; None when only Spark can
    tell (an Iceberg JDBC catalog). Raises LakelineError when the catalog or S3 does not answer."""
    if existing_table_schema(config, settings, table) is not None:
        return True
    # None also means "there, but not readable without Spark": ask the format's own existence test before saying
    # a table that exists is missing.
    ref = format_for(config.sink.format).ref(config, settings, table)
    if config.sink.format == "iceberg":
        uri = settings.iceberg_catalog_uri or ""
        if not uri or uri.startswith("jdbc:"):
            return None
        from ingest.formats.iceberg import iceberg_catalog

        return iceberg_catalog(settings).table_exists(ref.split(".", 1)[1])
    from deltalake import DeltaTable  # heavy: only a command that reads a table loads it

    from ingest.formats.delta import delta_rs_uri, delta_storage_options

    return DeltaTable.is_deltatable(delta_rs_uri(ref), storage_options=delta_storage_options(settings))


def not_created(config: "PipelineConfig", settings: "Settings", pipeline_file: str | Path,
                table: str | None = None) -> TableNotFound:
    """The one line for a table the pipeline has not created yet: which table, and the command that creates it."""
    fmt = format_for(config.sink.format)
    which = "dead-letter table" if table == config.sink.dead_letters else "table"
    return TableNotFound(f"the {fmt.name.capitalize()} {which} {fmt.ref(config, settings, table)} does not exist "
                         f"yet: the pipeline {config.pipeline} has not run (its first start creates it: `lakeline "
                         f"ingest --pipeline {pipeline_file}`)")


def require_tables(config: "PipelineConfig", settings: "Settings", pipeline_file: str | Path,
                   *tables: str | None) -> None:
    """Raise TableNotFound for the first of these tables (None: the main table) that does not exist yet; a table
    only Spark can tell about passes (`spark_missing_tables` then answers the same way)."""
    for table in tables or (None,):
        if table_exists(config, settings, table) is False:
            raise not_created(config, settings, pipeline_file, table)


def says_not_found(exc: BaseException) -> bool:
    """Whether a Spark error means a table or its path is not there: by its error condition or its JVM class,
    never by its text."""
    condition = getattr(exc, "getCondition", None)
    if callable(condition) and condition() in _NOT_FOUND:
        return True
    return java_raised(exc, *_NOT_FOUND_CLASSES)


@contextmanager
def spark_missing_tables(config: "PipelineConfig", settings: "Settings", pipeline_file: str | Path,
                         *tables: str | None) -> Iterator[None]:
    """Spark's "not found" inside the block becomes the same one line as `require_tables` (a JDBC catalog, or a
    table dropped between the check and the read)."""
    try:
        yield
    except TableNotFound:
        raise
    except Exception as exc:
        if not says_not_found(exc):
            raise
        dead = config.sink.dead_letters
        named = dead if dead in tables and dead in str(exc) else next(iter(tables), None)
        raise not_created(config, settings, pipeline_file, named) from None
