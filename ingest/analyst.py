"""The analyst's side of the tables, without Spark: DuckDB over the table format's own reader (delta-rs for
Delta, pyiceberg for Iceberg; `TableFormat.register_for_analyst`).

This is how a notebook or a BI extract reads a Lakeline table, so tests and benchmarks use it to check that what
Spark commits is what an analyst sees. Endpoints and credentials come from Settings (moto locally, real S3 by
configuration alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingest.formats import format_for
from ingest.settings import Settings

if TYPE_CHECKING:
    from ingest.config import PipelineConfig


def duckdb_query(config: "PipelineConfig", settings: Settings, sql: str, table: str | None = None) -> list[tuple]:
    """Run `sql` in DuckDB with the pipeline's table (or `table`, e.g. its dead-letter table) registered as `t`.

    Each call opens the table afresh (Delta log replay / Iceberg scan planning), as a new analyst session would.
    """
    import duckdb

    fmt = format_for(config.sink.format)
    connection = duckdb.connect()
    try:
        fmt.register_for_analyst(fmt.ref(config, settings, table), settings, connection, "t")
        return connection.execute(sql).fetchall()
    finally:
        connection.close()
