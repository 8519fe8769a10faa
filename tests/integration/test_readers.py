"""The compatibility table of docs/readers.md, cell by cell: a table carrying each feature (tests/table_features.py,
all but one made without Spark) opened with each tested reader. A "reads" cell must return the fixture's values; a
"locked out" cell must fail through Lakeline's readers with ReaderLockedOut naming the feature and the reader, and
the library on its own must refuse the table too (when a pinned reader learns the feature, this fails until the
table says "reads").

Measured on the 2-core machine, busy: the module alone 53 s, of which the stack and the Spark session about 20 s;
the Spark-free cells about 10 s; the Spark SQL reads about 20 s (11 s of it the session's first Delta read, which
an earlier test pays in a full run) and the Iceberg table Spark writes a few seconds."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from ingest.compatibility import FEATURES, LOCKED_OUT, READERS, READS, cell
from ingest.errors import ReaderLockedOut
from ingest.settings import Settings
from tests.table_features import BUILDERS, NEEDS_SPARK, Fixture, delta_protocol_only

pytestmark = pytest.mark.integration

CASES = [(feature, reader) for feature in FEATURES for reader in READERS
         if cell(feature, reader) in (READS, LOCKED_OUT)]


def _plain(value):
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if hasattr(value, "to_pydatetime"):  # a pandas Timestamp
        return value.to_pydatetime().isoformat()
    if isinstance(value, float) and value != value:  # pandas' NaN for a missing value
        return None
    return value


def _values(rows: list[dict], column: str) -> dict[str, object]:
    out = {}
    for row in rows:
        value = row
        for part in column.split("."):
            value = None if value is None or (isinstance(value, float) and value != value) else value[part]
        out[row["event_id"]] = _plain(value)
    return out


def _settings(fixture: Fixture) -> Settings:
    return Settings(iceberg_catalog_uri=fixture.catalog_uri, iceberg_catalog_name="lakeline")


def _iceberg_table(fixture: Fixture):
    from ingest.formats.iceberg import iceberg_catalog

    return iceberg_catalog(_settings(fixture)).load_table(fixture.location)


def _read(reader: str, fixture: Fixture, spark=None) -> list[dict]:
    """The rows `reader` returns, through Lakeline's Spark-free readers (which check the table's features first)."""
    import pyarrow as pa

    if reader == "spark-sql":
        location = fixture.location if fixture.format == "delta" else _iceberg_table(fixture).metadata_location
        return [r.asDict(recursive=True) for r in spark.read.format(fixture.format).load(location).collect()]
    if reader in ("duckdb-delta", "duckdb-iceberg"):
        import duckdb

        from ingest.formats import format_for

        connection = duckdb.connect()
        ref = fixture.location if fixture.format == "delta" else f"lakeline.{fixture.location}"
        format_for(fixture.format).register_for_analyst(ref, _settings(fixture), connection, "t")
        return connection.execute("SELECT * FROM t").to_arrow_table().to_pylist()
    if fixture.format == "iceberg":
        table = _iceberg_table(fixture)
        if reader == "pyiceberg":
            return table.scan().to_arrow().to_pylist()
        if reader == "pandas":
            return pa.Table.from_pandas(table.scan().to_pandas()).to_pylist()
        if reader == "polars":
            import polars as pl

            return pl.scan_iceberg(table).collect().to_dicts()
    from ingest.formats.delta import open_for_reader

    table = open_for_reader(fixture.location, _settings(fixture), reader)
    if reader == "delta-rs":
        return table.to_pyarrow_dataset().to_table().to_pylist()
    if reader == "pandas":
        return pa.Table.from_pandas(table.to_pandas()).to_pylist()
    import polars as pl

    return pl.scan_delta(fixture.location).collect().to_dicts()


def _read_without_lakeline(reader: str, fixture: Fixture) -> None:
    """The library alone, without Lakeline's check (a locked-out Delta table)."""
    from deltalake import DeltaTable

    if reader == "polars":
        import polars as pl

        pl.scan_delta(fixture.location).collect()
    elif reader == "pandas":
        DeltaTable(fixture.location).to_pandas()
    else:
        DeltaTable(fixture.location).to_pyarrow_dataset().to_table()


@pytest.fixture(scope="module")
def built(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("features")
    made: dict = {}

    def build(feature) -> Fixture:
        builder = BUILDERS[(feature.format, feature.name)]
        if builder not in made:
            made[builder] = (builder(root, request.getfixturevalue("spark")) if builder in NEEDS_SPARK
                             else builder(root))
        return made[builder]

    return build


@pytest.mark.parametrize("feature,reader", [c for c in CASES if c[1].spark_free],
                         ids=[f"{f.format}-{f.name}-{r.key}" for f, r in CASES if r.spark_free])
def test_a_spark_free_reader_reads_the_features_the_table_says_or_explains_why_not(feature, reader, built):
    fixture = built(feature)
    if cell(feature, reader) == READS:
        assert _values(_read(reader.key, fixture), fixture.column) == fixture.expected
        return
    with pytest.raises(ReaderLockedOut) as locked:
        _read(reader.key, fixture)
    message = str(locked.value)
    assert feature.delta_reader_feature in message and reader.name in message and "Spark SQL" in message
    with pytest.raises(Exception, match=feature.delta_reader_feature):
        _read_without_lakeline(reader.key, fixture)


@pytest.mark.parametrize("feature", ["deletionVectors", "columnMapping", "v2Checkpoint", "vacuumProtocolCheck"])
def test_delta_rs_refuses_the_reader_features_lakeline_never_turns_on_and_lakeline_explains(feature, tmp_path):
    from deltalake import DeltaTable

    from ingest.formats.delta import open_for_reader

    path = str(delta_protocol_only(tmp_path, feature))
    with pytest.raises(Exception, match=feature):
        DeltaTable(path).to_pyarrow_dataset().to_table()
    for reader in ("delta-rs", "duckdb-delta", "pandas", "polars"):
        with pytest.raises(ReaderLockedOut, match=f"{feature}, which .* cannot read .*Lakeline never turns it on"):
            open_for_reader(path, Settings(), reader)


# Spark SQL reads each fixture once (two Delta rows share the table Lakeline creates).
SPARK_CASES = list({BUILDERS[(f.format, f.name)]: f for f, r in CASES if r.key == "spark-sql"}.values())


def test_spark_sql_has_a_reads_cell_for_every_feature():
    assert {(f.format, f.name) for f, r in CASES if r.key == "spark-sql"} == {(f.format, f.name) for f in FEATURES}


@pytest.mark.parametrize("feature", SPARK_CASES, ids=[f"{f.format}-{f.name}" for f in SPARK_CASES])
def test_spark_sql_reads_every_feature(feature, built, spark):
    fixture = built(feature)
    assert _values(_read("spark-sql", fixture, spark), fixture.column) == fixture.expected
