"""The analyst's session: DuckDB over the tables of a set of pipelines, Spark-free (`lakeline query`, the notebook
API). Each main and dead-letter table goes by its analyst name (ingest.config.analyst_names: `orders`,
`orders_dead_letters`, or the pipeline's name when two pipelines share a table name).

Tables are registered lazily: before each statement, only the names it reads are opened (DuckDB's parser lists
them), so one query over a conf/ of many pipelines opens one or two tables. Each is a lazy scan DuckDB pushes its
filters and columns into (ingest.formats.table_reader). `lakeline_freshness` is a table in the session too: one row
per table of the session's pipelines (maintenance.table_status), for a dashboard's "data as of".
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.errors import BadQuery, ConfigError

if TYPE_CHECKING:
    from ingest.config import PipelineConfig
    from ingest.formats.table_reader import AsOf, TableReader
    from ingest.settings import Settings
    from maintenance.table_status import TableStatus

FRESHNESS_TABLE = "lakeline_freshness"
TEXT_ROW_LIMIT = 1000  # rows shown as a text table; the rest are counted (--output csv/json or --to take them all)


@dataclass
class Result:
    columns: list[str]
    types: list[str]
    rows: list[tuple]

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


class Session:
    """A DuckDB connection with the pipelines' tables under their analyst names. `pipelines`: (config, the YAML it
    came from, for the "run it first" hint). `as_of` / `since` apply to every table a statement reads;
    `count_files` counts the data files each statement opens (`files_opened`, `--stats`)."""

    def __init__(self, pipelines: "list[tuple[PipelineConfig, str]]", settings: "Settings",
                 as_of: "AsOf | None" = None, since: int | None = None, count_files: bool = False):
        import duckdb  # the session's engine; imported here so the command's help stays light

        from ingest.config import analyst_names
        from ingest.formats import routed_names

        self.settings, self.as_of, self.since, self.count_files = settings, as_of, since, count_files
        configs = [config for config, _ in pipelines]
        self.names = analyst_names(configs, {c.pipeline: routed_names(c, settings) for c in configs
                                             if c.sink.route is not None})
        self.files = {config.pipeline: source for config, source in pipelines}
        self.connection = duckdb.connect()
        self._readers: dict[str, TableReader] = {}
        self.scanned: dict[str, int] = {}  # analyst name -> data files in the registered scan

    # ---- the tables ------------------------------------------------------------------------------------------
    def reader(self, name: str) -> "TableReader":
        """The reader of the table named `name` (opened once per session)."""
        from ingest.formats import format_for

        key = self.resolve(name)
        if key not in self._readers:
            config, table = self.names[key]
            fmt = format_for(config.sink.format)
            # The same words as maintenance.presence's line for the Spark commands.
            hint = (f"the pipeline {config.pipeline} has not run (its first start creates it: `lakeline ingest "
                    f"--pipeline {self.files.get(config.pipeline) or 'FILE'}`)")
            self._readers[key] = fmt.reader(fmt.ref(config, self.settings, None if table == config.sink.table
                                                    else table), self.settings, hint, self.count_files)
        return self._readers[key]

    def resolve(self, name: str) -> str:
        """The analyst name `name` spells (SQL names are case-insensitive); ConfigError listing them otherwise."""
        for known in self.names:
            if known.lower() == name.lower():
                return known
        raise ConfigError(f"no table {name!r} in these pipelines; the tables are {', '.join(self.names)}")

    def tables_read(self, sql: str) -> list[str]:
        """The analyst names a statement reads (DuckDB's parser), in the session's order."""
        import duckdb

        try:
            named = {n.lower() for n in duckdb.get_table_names(sql)}
        except duckdb.Error as exc:
            raise BadQuery(self._explain(exc)) from None
        return [name for name in self.names if name.lower() in named]

    def prepare(self, sql: str) -> list[str]:
        """Register the tables `sql` reads that are not registered yet (and `lakeline_freshness` afresh when it is
        read); the names it reads."""
        import duckdb

        names = self.tables_read(sql)
        for reader in self._readers.values():
            reader.count_files_afresh()  # files_opened() tells of this statement
        if len(names) > 1:
            for value, flag in ((self.as_of, "--as-of"), (self.since, "--since")):
                if isinstance(value, int):
                    raise ConfigError(f"{flag} {value} is one table's version or snapshot, but the statement reads "
                                      f"{', '.join(names)}: read one table at a time, or give --as-of a time")
        for name in names:
            if name not in self.scanned:
                reader = self.reader(name)
                dataset = reader.changes_since(self.since) if self.since is not None else reader.dataset(self.as_of)
                self.connection.register(name, dataset)
                self.scanned[name] = sum(1 for _ in dataset.get_fragments())
        try:
            wants_freshness = FRESHNESS_TABLE in {n.lower() for n in duckdb.get_table_names(sql)}
        except duckdb.Error:
            wants_freshness = False
        if wants_freshness:
            self.register_freshness()
        return names

    def register_freshness(self) -> None:
        import pyarrow as pa

        rows = [status.to_json() for status in self.statuses()]
        for row in rows:  # nested maps of varying keys as JSON text, the rest as columns
            row["complete_through"] = json.dumps(row["complete_through"])
            row["problems"] = "; ".join(row["problems"])
        self.connection.register(FRESHNESS_TABLE, pa.Table.from_pylist(rows))

    def statuses(self, names: list[str] | None = None, ask_source: bool = True) -> "list[TableStatus]":
        """The freshness status of `names` (default: every table of the session's pipelines)."""
        from maintenance.table_status import observe

        now = datetime.now(UTC)
        unreachable: dict[str, str] = {}  # pipeline -> why its source did not answer: not asked again
        statuses = []
        for name in (names if names is not None else list(self.names)):
            config, table = self.names[name]
            status = observe(name, config, table, self.settings, now, self.reader(name),
                             ask_source and config.pipeline not in unreachable)
            if config.pipeline in unreachable and status.created:
                status.note = unreachable[config.pipeline]
            elif status.note.startswith("source not reachable"):
                unreachable[config.pipeline] = status.note
            statuses.append(status)
        return statuses

    def files_opened(self) -> dict[str, tuple[int, int]]:
        """Per registered table: (data files the last statement opened, data files in its scan)."""
        return {name: (self._readers[name].files_opened, total) for name, total in self.scanned.items()}

    # ---- statements ------------------------------------------------------------------------------------------
    def execute(self, sql: str) -> Result:
        import duckdb

        self.prepare(sql)
        try:
            cursor = self.connection.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            types = [str(d[1]) for d in cursor.description or []]
            return Result(columns, types, cursor.fetchall() if columns else [])
        except duckdb.Error as exc:
            raise BadQuery(self._explain(exc)) from None

    def explain(self, sql: str) -> str:
        """DuckDB's plan of `sql`: a filter pushed into a table's scan shows under its ARROW_SCAN."""
        result = self.execute("EXPLAIN " + sql)
        return "\n".join(str(row[-1]) for row in result.rows)

    def extract(self, sql: str, path: str) -> int:
        """Write the statement's rows to a .parquet (nested types kept) or .csv file; the row count."""
        import duckdb

        kind = {".parquet": "parquet", ".csv": "csv"}.get(Path(path).suffix.lower())
        if kind is None:
            raise ConfigError(f"--to {path}: give a .parquet or .csv file")
        self.prepare(sql)
        try:
            relation = self.connection.sql(sql)
            if kind == "parquet":
                relation.write_parquet(path)
            else:
                relation.write_csv(path, header=True)
            return self.connection.execute(f"SELECT count(*) FROM read_{kind}(?)", [path]).fetchone()[0]
        except duckdb.Error as exc:
            raise BadQuery(self._explain(exc)) from None

    def _explain(self, exc: Exception) -> str:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{first} (tables here: {', '.join(list(self.names) + [FRESHNESS_TABLE])})"

    def close(self) -> None:
        self.connection.close()


# ---- rendering ---------------------------------------------------------------------------------------------
def cell(value) -> str:
    """A value as a person (or a CSV reader) reads it: nested values as JSON, times in ISO-8601."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(jsonable(value))
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def jsonable(value):
    """A DuckDB value as JSON data: structs as objects, lists as arrays, times as ISO-8601, decimals as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def render_csv(result: Result) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([cell(v) for v in row] for row in result.rows)
    return out.getvalue()


def render_json(result: Result) -> str:
    return json.dumps([jsonable(r) for r in result.records()], indent=2)


def render_text(result: Result):
    """A rich table of the first TEXT_ROW_LIMIT rows, and how many rows there were."""
    from rich.table import Table

    table = Table(*result.columns, caption=_rows_caption(len(result.rows)))
    for row in result.rows[:TEXT_ROW_LIMIT]:
        table.add_row(*(cell(v) for v in row))
    return table


def _rows_caption(count: int) -> str:
    caption = f"{count:,} row{'' if count == 1 else 's'}"
    if count > TEXT_ROW_LIMIT:
        caption += f" (first {TEXT_ROW_LIMIT:,} shown: --output csv|json or --to FILE for all)"
    return caption


def render_statuses(statuses: "list[TableStatus]"):
    """`lakeline tables` for a person: one row per table."""
    from rich.table import Table

    from maintenance.table_status import positions

    now = datetime.now(UTC)
    table = Table("table", "pipeline", "format", "newest commit", "complete through", "waiting", "rows", "files",
                  "SLA")
    for s in statuses:
        if not s.created:
            table.add_row(s.table, s.pipeline, s.format, "not created yet", "", "", "", "", s.note)
            continue
        waiting = "?" if s.waiting_records is None else f"{'' if s.waiting_exact else '>='}{s.waiting_records:,}"
        sla = s.sla + "".join(f"\n{p}" for p in s.problems + ([s.note] if s.note else []))
        table.add_row(s.table, s.pipeline, s.format, _when(s.newest_commit_at, now), positions(s.complete_through),
                      waiting, "?" if s.rows is None else f"{s.rows:,}", f"{s.files:,}", sla)
    return table


def _when(moment: str | None, now: datetime) -> str:
    from maintenance.table_status import ago

    return "no commit yet" if moment is None else f"{moment} ({ago(moment, now)})"


def render_history(name: str, versions) -> str:
    lines = [f"{name}: {len(versions)} versions/snapshots kept, oldest first"]
    for v in versions:
        by = f"pipeline {v.record.pipeline} batch {v.record.batch_id}" if v.record else ""
        lines.append(f"  {v.version:>20}  {v.committed_at.isoformat()}  {v.operation:<18} {by}".rstrip())
    return "\n".join(lines)
