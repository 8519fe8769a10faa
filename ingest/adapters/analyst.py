"""The analyst's side of the tables, without Spark: DuckDB over a delta-rs (Delta) or pyiceberg (Iceberg) scan.

This is how a notebook or a BI extract reads a Lakeline table, so tests and benchmarks use it to check that what
Spark commits is what an analyst sees. Endpoints and credentials come from Settings (moto locally, real S3 by
configuration alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingest.errors import ConfigError
from ingest.settings import Settings

if TYPE_CHECKING:
    from ingest.config import PipelineConfig


def delta_rs_uri(location: str) -> str:
    """delta-rs speaks s3://, Spark's S3A s3a:// (same bucket and key)."""
    return "s3://" + location.split("://", 1)[1] if location.startswith("s3a://") else location


def delta_storage_options(settings: Settings) -> dict[str, str]:
    """object_store options for delta-rs (only what is set, so real S3 falls back to its default chain)."""
    options = {"AWS_REGION": settings.aws_region}
    if settings.s3_endpoint:
        options["AWS_ENDPOINT_URL"] = settings.s3_endpoint
        options["AWS_ALLOW_HTTP"] = str(settings.s3_endpoint.startswith("http://")).lower()
    if settings.s3_path_style:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    for key, value in (("AWS_ACCESS_KEY_ID", settings.aws_access_key_id),
                       ("AWS_SECRET_ACCESS_KEY", settings.aws_secret_access_key),
                       ("AWS_SESSION_TOKEN", settings.aws_session_token)):
        if value:
            options[key] = value
    return options


def iceberg_catalog(settings: Settings):
    """The shared SQL catalog, as pyiceberg sees it."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = settings.require("iceberg_catalog_uri", "LAKELINE_ICEBERG_CATALOG_URI", "open the Iceberg catalog")
    if uri.startswith("jdbc:"):
        # Spark takes the jdbc: form; pyiceberg needs a SQLAlchemy URL and its driver.
        raise ConfigError(f"LAKELINE_ICEBERG_CATALOG_URI is a JDBC URI ({uri.split('?', 1)[0]}): the Spark-free read "
                          "(pyiceberg) needs the SQLAlchemy form of the catalog database, which Lakeline only has "
                          "for the embedded sqlite:/// catalog. Read this table through Spark instead.")
    properties = {"s3.region": settings.aws_region}
    for key, value in (("s3.endpoint", settings.s3_endpoint), ("s3.access-key-id", settings.aws_access_key_id),
                       ("s3.secret-access-key", settings.aws_secret_access_key),
                       ("s3.session-token", settings.aws_session_token)):
        if value:
            properties[key] = value
    return SqlCatalog(settings.iceberg_catalog_name, uri=uri, **properties)


def duckdb_query(config: "PipelineConfig", settings: Settings, sql: str, table: str | None = None) -> list[tuple]:
    """Run `sql` in DuckDB with the pipeline's table (or `table`, e.g. its dead-letter table) registered as `t`.

    Each call opens the table afresh (Delta log replay / Iceberg scan planning), as a new analyst session would.
    """
    import duckdb

    connection = duckdb.connect()
    try:
        if config.sink.format == "delta":
            from deltalake import DeltaTable

            uri = delta_rs_uri(config.delta_location(settings, table))
            dataset = DeltaTable(uri, storage_options=delta_storage_options(settings)).to_pyarrow_dataset()
            connection.register("t", dataset)
        else:
            identifier = config.iceberg_identifier(settings, table).split(".", 1)[1]  # drop the catalog name
            iceberg_catalog(settings).load_table(identifier).scan().to_duckdb("t", connection=connection)
        return connection.execute(sql).fetchall()
    finally:
        connection.close()
