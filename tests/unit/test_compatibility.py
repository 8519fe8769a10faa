"""The readers × features matrix (ingest.compatibility): docs/readers.md is generated from it, each feature has a
fixture the integration test opens, the Spark-free readers explain a table they cannot open, and a Delta widening
is refused at check-config and at start unless `sink.allow_features` opts in. Pure, plus local delta-rs tables for
check-config (about 1 s)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, FloatType, IntegerType, StringType, StructField, StructType

from ingest.compatibility import (DOC, DOCUMENTED, FEATURES, LOCKED_OUT, READERS, READS, cell, check_readable,
                                  find_reader, render_page)
from ingest.config import load_pipeline
from ingest.errors import ConfigError, ExitCode, ReaderLockedOut
from ingest.preflight import check_declared_schema
from tests.helpers import BASE_SCHEMA, pipeline_dict, write_pipeline
from tests.table_features import BUILDERS

SPARK_FREE_DELTA = ("delta-rs", "duckdb-delta", "pandas", "polars")


def test_the_docs_table_is_the_matrix():
    page = DOC.read_text()
    assert render_page(page) == page, "docs/readers.md is stale: run `python -m ingest.compatibility`"


def test_every_feature_has_a_fixture_the_reader_test_opens():
    assert set(BUILDERS) == {(f.format, f.name) for f in FEATURES}


def test_vendor_readers_are_documented_never_tested_here():
    for name in ("trino", "athena"):
        reader = find_reader(name, "delta")
        assert reader.doc("delta").startswith("https://") and reader.doc("iceberg").startswith("https://")
        assert not reader.tested
        assert {cell(f, reader) for f in FEATURES} == {DOCUMENTED}


def test_type_widening_locks_out_exactly_the_delta_rs_readers():
    widening = next(f for f in FEATURES if f.name == "typeWidening")
    locked = {r.key for r in READERS if cell(widening, r) == LOCKED_OUT}
    assert locked == set(SPARK_FREE_DELTA)
    assert cell(widening, find_reader("spark-sql", "delta")) == READS
    promotion = next(f for f in FEATURES if f.name == "type promotion")
    assert LOCKED_OUT not in {cell(promotion, r) for r in READERS}


@pytest.mark.parametrize("reader", [*SPARK_FREE_DELTA, "lakeline query", "notebook API", "DuckDB over delta-rs"])
def test_a_spark_free_reader_refuses_a_widened_delta_table_naming_the_feature_and_who_reads_it(reader):
    with pytest.raises(ReaderLockedOut) as locked:
        check_readable("delta:s3a://b/orders", "delta", {"typeWidening"}, reader)
    message = str(locked.value)
    assert "delta:s3a://b/orders" in message and "typeWidening" in message
    assert find_reader(reader, "delta").name in message
    assert "Readers that open it: Spark SQL, SQL endpoint" in message and "sink.allow_features" in message
    assert locked.value.exit_code == ExitCode.USAGE


def test_what_a_reader_opens_passes():
    check_readable("t", "delta", {"timestampNtz"}, "delta-rs")
    check_readable("t", "delta", {"typeWidening"}, "spark-sql")
    check_readable("t", "iceberg", {"anything"}, "pyiceberg")


def test_a_feature_lakeline_never_turns_on_is_refused_too_and_says_so():
    with pytest.raises(ReaderLockedOut, match="deletionVectors.*Lakeline never turns it on"):
        check_readable("t", "delta", {"deletionVectors", "timestampNtz"}, "polars")


def test_an_unknown_reader_is_named():
    with pytest.raises(KeyError, match="no reader 'excel'"):
        find_reader("excel", "delta")


def _config(tmp_path, fmt: str, items: str = "bigint", amount: str = "double", allow: list[str] | None = None,
            name: str | None = None):
    data = pipeline_dict(fmt, name)
    data["schema"] = {**BASE_SCHEMA, "fields": [
        {**f, "type": items} if f["name"] == "items" else {**f, "type": amount} if f["name"] == "amount" else f
        for f in BASE_SCHEMA["fields"]]}
    if allow is not None:
        data["sink"]["allow_features"] = allow
    return load_pipeline(write_pipeline(tmp_path, data))


def _table(**types) -> StructType:
    return StructType([StructField("event_id", StringType()), *(StructField(k, v) for k, v in types.items())])


def test_a_delta_widening_is_refused_naming_column_feature_readers_and_choices(tmp_path):
    config = _config(tmp_path, "delta")
    with pytest.raises(ReaderLockedOut) as refused:
        check_declared_schema(config, _table(items=IntegerType(), amount=DoubleType()), "delta:s3a://b/t")
    message = str(refused.value)
    for part in ("widen items int -> bigint", "delta:s3a://b/t", "typeWidening", "delta-rs, DuckDB over delta-rs, "
                 "pandas, polars", "Spark SQL and the SQL endpoint still read it", "Nothing was changed",
                 "a new table", "sink.allow_features: [typeWidening]", "docs/readers.md"):
        assert part in message, part


def test_float_to_double_is_a_widening_too(tmp_path):
    config = _config(tmp_path, "delta", items="int")
    with pytest.raises(ReaderLockedOut, match="widen amount float -> double"):
        check_declared_schema(config, _table(items=IntegerType(), amount=FloatType()), "delta:t")


def test_with_the_opt_in_the_widening_is_planned_as_before(tmp_path):
    config = _config(tmp_path, "delta", allow=["typeWidening"])
    changes = check_declared_schema(config, _table(items=IntegerType(), amount=DoubleType()), "delta:t")
    assert "widen items int -> bigint" in changes


def test_an_iceberg_widening_needs_no_opt_in(tmp_path):
    config = _config(tmp_path, "iceberg")
    changes = check_declared_schema(config, _table(items=IntegerType(), amount=DoubleType()), "iceberg:t")
    assert "widen items int -> bigint" in changes


def test_add_mode_never_widens_a_column():
    """A value wider than its column is a type conflict in add mode (rescued, or a schema_violation dead letter),
    never a widening."""
    from ingest.evolution import additions

    changes = additions(['{"items": 3000000000, "coupon": "C1"}'], _table(items=IntegerType()))
    assert [c.describe() for c in changes] == ["add coupon string"]


@pytest.mark.parametrize("allow,fmt,expected", [(["rowTracking"], "delta", "allow_features"),
                                                (["typeWidening"], "iceberg", "Iceberg table widens")])
def test_allow_features_takes_the_features_of_the_format(tmp_path, allow, fmt, expected):
    with pytest.raises(ConfigError, match=expected):
        _config(tmp_path, fmt, allow=allow)


def _delta_table(location, **types) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(location), pa.table({name: pa.array([], kind) for name, kind in types.items()}))


def test_check_config_refuses_the_widening_of_an_existing_table_and_shows_the_changes_with_the_opt_in(
        tmp_path, monkeypatch, capsys):
    import json

    import pyarrow as pa

    from lakeline.cli import main

    monkeypatch.setenv("LAKELINE_WAREHOUSE", str(tmp_path / "warehouse"))
    config = _config(tmp_path, "delta")
    _delta_table(tmp_path / "warehouse" / "delta" / config.sink.table, event_id=pa.string(), items=pa.int32(),
                 amount=pa.float64())
    path = str(tmp_path / f"{config.pipeline}.yaml")
    assert main(["check-config", "--pipeline", path]) == ExitCode.USAGE
    assert "typeWidening" in capsys.readouterr().err

    _config(tmp_path, "delta", allow=["typeWidening"], name=config.pipeline)
    assert main(["check-config", "--pipeline", path]) == ExitCode.OK
    table = json.loads(capsys.readouterr().out)["table"]
    assert table["exists"] and "widen items int -> bigint" in table["changes"]
