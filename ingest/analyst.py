"""The analyst's side of a pipeline's table, without Spark, in one call: DuckDB over the format's reader facet
(`TableFormat.reader`: delta-rs for Delta, pyiceberg for Iceberg).

Tests and benchmarks use it to check that what Spark commits is what an analyst sees; `lakeline query` and the
notebook API (`lakeline.tables`) read through the same facet. Endpoints and credentials come from Settings (moto
locally, real S3 by configuration alone).
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
    fmt = format_for(config.sink.format)
    return fmt.reader(fmt.ref(config, settings, table), settings).query(sql, "t")
