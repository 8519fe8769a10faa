"""The notebook API: a pipeline's tables in Python, without Spark, through the same readers as `lakeline query`.

    import lakeline.tables

    orders = lakeline.tables.open("orders")                    # by analyst name, pipelines from conf/pipelines
    orders = lakeline.tables.open(pipeline="conf/pipelines/orders_delta.yaml")   # a pipeline's main table
    recent = orders.to_arrow(columns=["order_id", "amount"], filter="event_time >= now() - INTERVAL 1 DAY")
    frame = orders.to_pandas(as_of=12)                          # a Delta version / Iceberg snapshot id, or a time
    orders.duckdb().aggregate("count(*)")                       # a DuckDB relation over the table
    print(orders.freshness())                                   # the `lakeline tables` line
    new_rows = orders.changes_since(12)                         # the rows appended after version 12

Endpoints and credentials come from the environment (or the env file `lakeline dev up` writes), as for the commands.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.errors import ConfigError

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from ingest.formats.table_reader import AsOf, TableReader, Version
    from lakeline.analyst import Session
    from maintenance.table_status import TableStatus


def open(name: str | None = None, *, pipeline: str | Path | None = None, conf_dir: str | Path = "conf",
         settings=None) -> "Table":
    """The table `name` (its analyst name: `orders`, `orders_dead_letters`, ...) of the pipelines in
    `conf_dir`/pipelines, or of the pipeline YAML(s) `pipeline` (a file or folder; without `name`, the pipeline's
    main table). A table not created yet raises TableNotFound, naming it and what to do."""
    from ingest.config import load_pipeline
    from ingest.settings import load_settings
    from lakeline.analyst import Session

    if pipeline is not None:
        given = Path(pipeline)
        files = sorted(given.glob("*.yaml")) if given.is_dir() else [given]
    else:
        files = sorted((Path(conf_dir) / "pipelines").glob("*.yaml"))
    if not files:
        raise ConfigError(f"no pipeline YAMLs in {pipeline or Path(conf_dir) / 'pipelines'}")
    configs = [(load_pipeline(f), str(f)) for f in files]
    session = Session(configs, settings or load_settings())
    if name is None:
        if len(configs) != 1:
            raise ConfigError("give the table's name: these pipelines have the tables " + ", ".join(session.names))
        config = configs[0][0]
        name = next(n for n, (c, t) in session.names.items() if c is config and t == config.sink.table)
    table = Table(session, session.resolve(name))
    table.reader.require()
    return table


class Table:
    """One table of a pipeline, read without Spark."""

    def __init__(self, session: "Session", name: str):
        self.session, self.name = session, name

    def __repr__(self) -> str:
        return f"<lakeline table {self.name}: {self.reader.display_name}>"

    @property
    def reader(self) -> "TableReader":
        return self.session.reader(self.name)

    def to_arrow(self, columns: list[str] | None = None, filter=None, as_of: "AsOf | None" = None) -> "pyarrow.Table":
        """The rows as Arrow. `filter`: a SQL condition (DuckDB's dialect) or a pyarrow expression; either skips
        the files it rules out. `as_of`: a version / snapshot id or a datetime."""
        if filter is None or not isinstance(filter, str):
            return self.reader.to_arrow(columns=columns, filter=filter, as_of=as_of)
        import duckdb

        connection = duckdb.connect()
        try:
            connection.register("t", self.reader.dataset(as_of))
            selected = ", ".join('"' + c.replace('"', '""') + '"' for c in columns) if columns else "*"
            return connection.execute(f"SELECT {selected} FROM t WHERE {filter}").to_arrow_table()
        finally:
            connection.close()

    def to_pandas(self, columns: list[str] | None = None, filter=None, as_of: "AsOf | None" = None
                  ) -> "pandas.DataFrame":
        return self.to_arrow(columns, filter, as_of).to_pandas()

    def duckdb(self, connection=None, as_of: "AsOf | None" = None):
        """A DuckDB relation over the table (registered under its name in `connection`, default a new one), lazy:
        filters and projections reach the scan."""
        import duckdb

        connection = connection or duckdb.connect()
        connection.register(self.name, self.reader.dataset(as_of))
        return connection.table(self.name)

    def changes_since(self, version: int) -> "pyarrow.Table":
        """The rows appended after `version` (a Delta version / Iceberg snapshot id this table had)."""
        return self.reader.changes_since(version).to_table()

    def versions(self) -> "list[Version]":
        """The versions / snapshots the table keeps, oldest first, with commit times and commit records."""
        return self.reader.versions()

    def freshness(self) -> "Freshness":
        """Newest commit, source positions, records waiting, counts and SLA state (as `lakeline tables`)."""
        (status,) = self.session.statuses([self.name])
        return Freshness(status)


class Freshness:
    """A table's freshness status; `str()` is the one line `lakeline query --freshness` prints."""

    def __init__(self, status: "TableStatus"):
        self.status = status

    def __getattr__(self, name: str):
        return getattr(self.status, name)

    def __str__(self) -> str:
        from maintenance.table_status import freshness_line

        return freshness_line(self.status, datetime.now(UTC))

    __repr__ = __str__

    def to_json(self) -> dict:
        return self.status.to_json()
