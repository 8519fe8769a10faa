"""Which readers Lakeline supports for analysts, and which table features each can open at the pinned versions.

Lakeline never turns on a table feature that locks a supported reader out without saying so: a start (and
`lakeline check-config`) refuses a Delta widening, which needs the `typeWidening` reader feature, unless
`sink.allow_features` opts in; the Spark-free readers refuse such a table with the same explanation
(`check_readable`) rather than a protocol error.

`READERS` and `FEATURES` are the one source of docs/readers.md's compatibility table: `python -m
ingest.compatibility` rewrites it, tests/unit/test_compatibility.py fails when the page and the data differ, and
tests/integration/test_readers.py opens a table with each feature with each tested reader, cell by cell.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ingest.errors import ReaderLockedOut

DOC = Path(__file__).resolve().parent.parent / "docs" / "readers.md"
START, END = "<!-- readers-table:start -->", "<!-- readers-table:end -->"

READS, LOCKED_OUT, DOCUMENTED, NOT_APPLICABLE = "reads", "locked out", "documented", "-"
AS_SPARK_SQL = "reads (as Spark SQL)"


@dataclass(frozen=True)
class Reader:
    """A reader analysts use. `delta_reader_features`: the Delta protocol reader features it opens (None: all of
    them, Spark's own Delta). `docs`: the vendor's pages, for the readers documented here rather than tested."""

    key: str
    name: str
    formats: tuple[str, ...]
    how: str
    delta_reader_features: frozenset[str] | None = None
    docs: tuple[tuple[str, str], ...] = ()  # (format, the vendor's page on it)
    spark_free: bool = True
    # A reader that is Spark SQL behind a server (the SQL endpoint): its cells are Spark SQL's.
    as_spark_sql: bool = False

    @property
    def tested(self) -> bool:
        return not self.docs

    def doc(self, format_name: str) -> str | None:
        return dict(self.docs).get(format_name)


# What delta-rs 1.6.6 opens (its own check, checked here against tables carrying each feature): timestampNtz, not
# typeWidening, deletionVectors, columnMapping, v2Checkpoint or vacuumProtocolCheck. polars 2.1 plans Delta scans
# with its own check and opens the same ones Lakeline's tables can carry.
_DELTA_RS = frozenset({"timestampNtz"})

READERS: tuple[Reader, ...] = (
    Reader("spark-sql", "Spark SQL", ("delta", "iceberg"),
           "pyspark 4.1.3 with delta-spark 4.4 and Iceberg 1.11 (the session Lakeline writes with)",
           spark_free=False),
    Reader("sql-endpoint", "SQL endpoint", ("delta", "iceberg"),
           "a Spark SQL session behind the Thrift server / Spark Connect: the same engine and jars as Spark SQL",
           spark_free=False, as_spark_sql=True),
    Reader("delta-rs", "delta-rs", ("delta",), "deltalake 1.6.6: `DeltaTable(...).to_pyarrow_dataset()`",
           delta_reader_features=_DELTA_RS),
    Reader("duckdb-delta", "DuckDB over delta-rs", ("delta",),
           "duckdb 1.5.6 over delta-rs' Arrow dataset (`lakeline query`, the notebook API)",
           delta_reader_features=_DELTA_RS),
    Reader("pandas", "pandas", ("delta", "iceberg"),
           "`DeltaTable.to_pandas()` (delta-rs) / `Table.scan().to_pandas()` (pyiceberg)",
           delta_reader_features=_DELTA_RS),
    Reader("polars", "polars", ("delta", "iceberg"), "polars 2.1.0: `pl.scan_delta` / `pl.scan_iceberg`",
           delta_reader_features=_DELTA_RS),
    Reader("pyiceberg", "pyiceberg", ("iceberg",), "pyiceberg 0.12.0: `Table.scan().to_arrow()`"),
    Reader("duckdb-iceberg", "DuckDB over pyiceberg", ("iceberg",),
           "duckdb 1.5.6 over pyiceberg's Arrow scan (`lakeline query`, the notebook API)"),
    Reader("trino", "Trino", ("delta", "iceberg"), "Trino's Delta Lake and Iceberg connectors",
           docs=(("delta", "https://trino.io/docs/current/connector/delta-lake.html"),
                 ("iceberg", "https://trino.io/docs/current/connector/iceberg.html")), spark_free=False),
    Reader("athena", "Athena", ("delta", "iceberg"), "Amazon Athena (engine version 3) over the Glue catalog",
           docs=(("delta", "https://docs.aws.amazon.com/athena/latest/ug/delta-lake-tables.html"),
                 ("iceberg", "https://docs.aws.amazon.com/athena/latest/ug/querying-iceberg.html")),
           spark_free=False),
)

# Other names callers use for a reader (lowercase); "duckdb" and the commands built on it pick the format's DuckDB.
_ALIASES = {"lakeline query": "duckdb", "notebook api": "duckdb", "duckdb": "duckdb", "deltalake": "delta-rs",
            "spark": "spark-sql"}


@dataclass(frozen=True)
class Feature:
    """A table feature a Lakeline table can carry. `delta_reader_feature`: the Delta protocol reader feature it
    puts in the table (None: writer-only, or an Iceberg feature every Iceberg reader must handle)."""

    format: str
    name: str
    when: str
    delta_reader_feature: str | None = None


FEATURES: tuple[Feature, ...] = (
    Feature("delta", "appendOnly, invariants (writer features)",
            "every table: Delta 4 lists its legacy writer features under writer version 7"),
    Feature("delta", "generatedColumns (writer feature)",
            "a main table partitioned by a transform (`day`, `hour`, `bucket`...) of a field"),
    Feature("delta", "added columns", "a field the YAML adds, or `schema.evolution: add`: no table feature"),
    Feature("delta", "timestampNtz", "a `timestamp_ntz` field in the schema", delta_reader_feature="timestampNtz"),
    Feature("delta", "INT96 and INT64 timestamps in one table",
            "a table holding files with INT96 timestamps (Spark's default, which older Lakeline releases wrote) and "
            "files with INT64 microseconds (what Lakeline, delta-rs and Iceberg write)"),
    Feature("delta", "typeWidening",
            "a declared widening (int to bigint, float to double, decimal precision up) of an existing column, "
            "only with `sink.allow_features: [typeWidening]`", delta_reader_feature="typeWidening"),
    Feature("iceberg", "format version 2", "every table"),
    Feature("iceberg", "partition transforms", "a table partitioned by `day`, `hour`, `bucket`... of a field"),
    Feature("iceberg", "added columns", "a field the YAML adds, or `schema.evolution: add`"),
    Feature("iceberg", "timestamp without time zone", "a `timestamp_ntz` field in the schema"),
    Feature("iceberg", "type promotion",
            "a declared widening (int to bigint, float to double, decimal precision up) of an existing column"),
)

# The widening feature a declared widening needs, per format (Iceberg's type promotion needs none).
WIDENING_FEATURE = {"delta": "typeWidening"}


def find_reader(name: str, format_name: str) -> Reader:
    """The reader by key or name (case-insensitive), or by an alias of a command built on it."""
    wanted = name.lower()
    wanted = _ALIASES.get(wanted, wanted)
    if wanted == "duckdb":
        wanted = f"duckdb-{format_name}"
    for candidate in READERS:
        if wanted in (candidate.key, candidate.name.lower()):
            return candidate
    raise KeyError(f"no reader {name!r}; the supported readers: {', '.join(r.name for r in READERS)}")


def cell(feature: Feature, reader_: Reader) -> str:
    """What the table says for `reader_` on a table with `feature`."""
    if feature.format not in reader_.formats:
        return NOT_APPLICABLE
    if not reader_.tested:
        return DOCUMENTED
    if reader_.as_spark_sql:
        return AS_SPARK_SQL
    return READS if opens(reader_, feature.format, {feature.delta_reader_feature} - {None}) else LOCKED_OUT


def opens(reader_: Reader, format_name: str, features: set[str]) -> bool:
    """Whether `reader_` opens a table carrying these Delta protocol reader features."""
    if format_name != "delta" or reader_.delta_reader_features is None:
        return True
    return features <= reader_.delta_reader_features


def locked_out_by(feature: str) -> list[Reader]:
    """The tested Spark-free readers a Delta reader feature locks out."""
    return [r for r in READERS if "delta" in r.formats and r.tested and not opens(r, "delta", {feature})]


def readers_of(features: set[str]) -> list[Reader]:
    """The tested readers that open a Delta table carrying these reader features."""
    return [r for r in READERS if "delta" in r.formats and r.tested and opens(r, "delta", features)]


def _names(readers: list[Reader]) -> str:
    return ", ".join(r.name for r in readers)


def check_readable(display_name: str, format_name: str, features: set[str], reader: str) -> None:
    """Raise ReaderLockedOut when the Delta protocol reader `features` of the table `display_name` lock `reader`
    out (a key or name of READERS, or an alias such as "lakeline query")."""
    if format_name != "delta":
        return
    chosen = find_reader(reader, format_name)
    if opens(chosen, format_name, set(features)):
        return
    blocking = sorted(set(features) - (chosen.delta_reader_features or frozenset()))
    why = ("Lakeline turns it on only for a declared widening that the pipeline's `sink.allow_features` allows"
           if blocking == ["typeWidening"] else "Lakeline never turns it on: something else altered the table")
    raise ReaderLockedOut(
        f"{display_name} carries the Delta table feature {', '.join(blocking)}, which {chosen.name} cannot read at "
        f"the pinned versions ({why}). Readers that open it: {_names(readers_of(set(features)))}. Query it through "
        "the SQL endpoint or Spark SQL, or move the pipeline to a new table without the feature (docs/readers.md)")


def widening_refusal(pipeline: str, display_name: str, format_name: str, widenings: list[str],
                     allowed: list[str]) -> ReaderLockedOut | None:
    """The error refusing `widenings` (descriptions such as "widen items int -> bigint") on the table, or None when
    the format widens without a feature a supported reader lacks, or the pipeline opted in."""
    feature = WIDENING_FEATURE.get(format_name)
    if not widenings or feature is None or feature in allowed:
        return None
    return ReaderLockedOut(
        f"pipeline {pipeline}: {'; '.join(widenings)} on {display_name} needs the Delta table feature {feature}, "
        f"which locks out {_names(locked_out_by(feature))} (so `lakeline query` and the notebook API too); Spark "
        "SQL and the SQL endpoint still read it. Nothing was changed. Choose one: keep the column's type in the "
        "YAML; write to a new table (a new sink.table) declared with the wider type; or opt in with "
        f"`sink.allow_features: [{feature}]` and read the table with Spark SQL or the SQL endpoint only "
        "(docs/readers.md#widening-a-delta-column)")


def changes_refusal(config, display_name: str, changes) -> ReaderLockedOut | None:
    """widening_refusal for a pipeline's planned schema changes (ingest.evolution.SchemaChange)."""
    widenings = [change.describe() for change in changes if change.kind == "widen"]
    return widening_refusal(config.pipeline, display_name, config.sink.format, widenings,
                            list(config.sink.allow_features))


def readers_table() -> str:
    """The Markdown compatibility table: one row per feature, one column per reader."""
    head = ["format", "feature", *(r.name for r in READERS)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for feature in FEATURES:
        cells = [feature.format, feature.name]
        for reader_ in READERS:
            value = cell(feature, reader_)
            cells.append(f"[{value}]({reader_.doc(feature.format)})" if value == DOCUMENTED else value)
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def features_table() -> str:
    """The Markdown list of when Lakeline's tables carry each feature."""
    rows = ["| format | feature | a Lakeline table carries it when |", "|---|---|---|"]
    rows += [f"| {f.format} | {f.name} | {f.when} |" for f in FEATURES]
    return "\n".join(rows)


def readers_list() -> str:
    rows = ["| reader | what it is, at the pinned versions | tested here |", "|---|---|---|"]
    rows += [f"| {r.name} | {r.how} | {'yes' if r.tested else 'no: ' + _links(r)} |" for r in READERS]
    return "\n".join(rows)


def _links(reader_: Reader) -> str:
    return ", ".join(f"[{format_name}]({url})" for format_name, url in reader_.docs)


def render_page(page: str) -> str:
    """`page` with the text between the markers replaced by the current tables."""
    if START not in page or END not in page:
        raise ValueError(f"the page has no {START} ... {END} markers")
    before, rest = page.split(START, 1)
    after = rest.split(END, 1)[1]
    body = "\n\n".join([readers_list(), features_table(), readers_table()])
    return f"{before}{START}\n{body}\n{END}{after}"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DOC
    target.write_text(render_page(target.read_text()))
    print(f"wrote the compatibility table to {target}")
