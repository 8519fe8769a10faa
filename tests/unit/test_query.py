"""The analyst's read without a stack: `--as-of` parsing, output rendering, the freshness line, the command's
arguments, and the session and readers over local delta-rs / pyiceberg tables (lazy registration, incremental reads
across a compaction, a reader feature delta-rs cannot read)."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from ingest.errors import ConfigError, ReaderLockedOut
from ingest.formats.table_reader import parse_as_of
from lakeline import analyst
from lakeline.cli import build_parser
from maintenance.table_status import TableStatus, freshness_line
from tests.helpers import pipeline_dict

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def test_as_of_is_a_version_or_a_time():
    assert parse_as_of("12") == 12 and parse_as_of(" 6624402113127650000 ") == 6624402113127650000
    assert parse_as_of("2026-11-20T10:00:00+01:00") == datetime(2026, 11, 20, 9, tzinfo=UTC)
    assert parse_as_of("2026-11-20 10:00") == NOW  # no zone: UTC
    with pytest.raises(ConfigError, match="neither a version/snapshot id nor an ISO-8601 time"):
        parse_as_of("yesterday")


def test_rows_render_nested_values_as_json_in_every_output():
    result = analyst.Result(["id", "customer", "tags", "at", "price"], ["INTEGER", "STRUCT", "VARCHAR[]", "TIMESTAMP",
                                                                       "DECIMAL"],
                            [(1, {"id": "c1", "tier": None}, ["a", "b"], NOW, Decimal("1.50")),
                             (2, None, [], None, None)])
    assert analyst.render_csv(result).splitlines() == [
        "id,customer,tags,at,price",
        '1,"{""id"": ""c1"", ""tier"": null}","[""a"", ""b""]",2026-11-20T10:00:00+00:00,1.50',
        "2,,[],,"]
    assert json.loads(analyst.render_json(result))[0] == {
        "id": 1, "customer": {"id": "c1", "tier": None}, "tags": ["a", "b"], "at": "2026-11-20T10:00:00+00:00",
        "price": "1.50"}
    assert analyst.render_text(result).caption == "2 rows"
    many = analyst.Result(["n"], ["INTEGER"], [(i,) for i in range(analyst.TEXT_ROW_LIMIT + 5)])
    table = analyst.render_text(many)
    assert table.row_count == analyst.TEXT_ROW_LIMIT and "1,005 rows (first 1,000 shown" in table.caption


def test_the_freshness_line_says_what_an_analyst_asks():
    status = TableStatus("orders", "orders_delta", "main", "delta", "s3a://b/w/delta/orders", True,
                         newest_commit_at=(NOW - timedelta(seconds=42)).isoformat(),
                         complete_through={"orders": {"0": 1200, "1": 1180}}, waiting_records=0, rows=2380, files=4,
                         sla="FRESH")
    assert freshness_line(status, NOW) == (
        "orders: FRESH, data as of 2026-11-20T09:59:18+00:00 (42 s ago), complete through orders[0:1200 1:1180], "
        "0 waiting, 2,380 rows in 4 files")
    status.sla, status.waiting_records, status.waiting_exact = "STALE", 5000, False
    status.problems = ["source lag at least 5,000 records > max_lag_records 1,000"]
    assert freshness_line(status, NOW).splitlines()[1:] == ["  ! source lag at least 5,000 records > "
                                                            "max_lag_records 1,000"]
    assert "at least 5,000 waiting" in freshness_line(status, NOW)
    missing = TableStatus("orders_dead_letters", "orders_delta", "dead letters", "delta", "x", False,
                          sla="not created", note="delta:x does not exist yet: run `lakeline ingest ...` first")
    assert freshness_line(missing, NOW) == "orders_dead_letters: delta:x does not exist yet: run `lakeline ingest " \
                                           "...` first"


def test_query_and_tables_arguments():
    parser = build_parser()
    args = parser.parse_args(["query", "SELECT 1", "--output", "csv", "--as-of", "3", "--stats", "--pipeline", "a"])
    assert (args.sql, args.output, args.as_of, args.stats, args.pipeline, args.conf_dir) == \
        ("SELECT 1", "csv", "3", True, ["a"], "conf")
    assert parser.parse_args(["query"]).sql is None  # the prompt
    assert parser.parse_args(["tables", "--history", "orders"]).history == "orders"
    with pytest.raises(SystemExit):
        parser.parse_args(["tables", "--output", "csv"])


@pytest.mark.parametrize("flags, message", [
    (["--since", "2026-11-20T10:00:00"], "give a version or snapshot id"),
    (["--since", "3", "--as-of", "2"], "give one"),
])
def test_contradictory_read_flags_are_usage_errors(flags, message, capsys):
    from lakeline.cli import main

    assert main(["query", "SELECT 1", *flags]) == 2
    assert message in capsys.readouterr().err


# ---- over local tables (delta-rs, and pyiceberg with a SQLite catalog) -------------------------------------------
def _settings(tmp_path: Path):
    from ingest.settings import Settings

    return Settings(warehouse=f"file://{tmp_path}/warehouse", iceberg_catalog_uri=f"sqlite:///{tmp_path}/cat.db")


def _day(day: int):
    import pyarrow as pa

    return pa.table({"id": pa.array([day * 10 + i for i in range(5)], pa.int64()),
                     "event_time": pa.array([datetime(2026, 11, 20 + day, 1, i, tzinfo=UTC) for i in range(5)],
                                            pa.timestamp("us", "UTC")),
                     "event_date": pa.array([date(2026, 11, 20 + day)] * 5)})


def _delta_pipelines(tmp_path: Path, *names: str) -> list:
    from deltalake import write_deltalake

    from ingest.config import load_pipeline

    pipelines = []
    tmp_path.mkdir(exist_ok=True)
    for name in names:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(pipeline_dict("delta", name)))
        for day in range(3):
            write_deltalake(f"{tmp_path}/warehouse/delta/{name}", _day(day), mode="append",
                            partition_by=["event_date"])
        pipelines.append((load_pipeline(path), str(path)))
    return pipelines


def test_a_statement_opens_only_the_tables_it_reads(tmp_path):
    session = analyst.Session(_delta_pipelines(tmp_path, "a", "b"), _settings(tmp_path), count_files=True)
    try:
        assert session.execute("SELECT count(*) FROM A").rows == [(15,)]  # SQL names are case-insensitive
        assert set(session.scanned) == {"a"} and set(session._readers) == {"a"}  # b and the dead letters: unopened
        session.execute("SELECT count(*) FROM a WHERE event_time < TIMESTAMPTZ '2026-11-21 00:00:00+00'")
        assert session.files_opened() == {"a": (1, 3)}  # this statement's filter skipped two days' files
        plan = session.explain("SELECT id FROM a WHERE event_time < TIMESTAMPTZ '2026-11-21 00:00:00+00'")
        assert "ARROW_SCAN" in plan and re.search(r"Filters:.*\n.*event_time", plan)  # pushed into the scan
        with pytest.raises(ConfigError, match="one table's version"):
            analyst.Session(_delta_pipelines(tmp_path / "x", "c", "d"), _settings(tmp_path / "x"),
                            as_of=1).execute("SELECT * FROM c, d")
    finally:
        session.close()


def test_a_delta_incremental_read_skips_compaction_and_a_locked_out_table_is_explained(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    from ingest.formats import format_for

    location = f"{tmp_path}/t"
    for day in range(3):
        write_deltalake(location, _day(day), mode="append")
    assert DeltaTable(location).optimize.compact()["numFilesRemoved"] == 3  # dataChange false: no rows gained
    write_deltalake(location, _day(3), mode="append")
    reader = format_for("delta").reader(location, _settings(tmp_path))
    assert reader.current_version() == 4 and reader.counts().rows == 20
    assert sorted(reader.changes_since(0).to_table().column("id").to_pylist()) == \
        list(range(10, 15)) + list(range(20, 25)) + list(range(30, 35))
    assert reader.changes_since(3).to_table().num_rows == 5
    assert reader.to_arrow(as_of=1).num_rows == 10

    # A reader feature delta-rs cannot read (here typeWidening, as Delta type widening sets it): the compatibility
    # explanation, not delta-rs' protocol error.
    (Path(location) / "_delta_log" / "00000000000000000005.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1795789018748, "operation": "SET TBLPROPERTIES"}}) + "\n" +
        json.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                                 "writerFeatures": ["typeWidening"]}}) + "\n")
    locked = format_for("delta").reader(location, _settings(tmp_path))
    assert locked.features() == {"typeWidening"}
    with pytest.raises(ReaderLockedOut, match="typeWidening"):
        locked.dataset()


def test_an_iceberg_table_reads_as_of_a_snapshot_and_since_one(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    from ingest.formats import format_for

    catalog = SqlCatalog("lakeline", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"file://{tmp_path}/iceberg")
    catalog.create_namespace("tests")
    table = catalog.create_table("tests.t", schema=_day(0).schema)
    snapshots = []
    for day in range(3):
        table.append(_day(day))
        snapshots.append(table.current_snapshot().snapshot_id)
    reader = format_for("iceberg").reader("lakeline.tests.t", _settings(tmp_path))
    assert reader.counts().rows == 15 and [v.version for v in reader.versions()] == snapshots
    assert reader.to_arrow(as_of=snapshots[0]).num_rows == 5
    assert reader.changes_since(snapshots[1]).to_table().column("id").to_pylist() == list(range(20, 25))
    import pyarrow.compute as pc

    fresh = format_for("iceberg").reader("lakeline.tests.t", _settings(tmp_path), count_files=True)
    assert fresh.to_arrow(filter=pc.field("id") >= 21).num_rows == 4 and fresh.files_opened == 1  # bounds prune
    with pytest.raises(ConfigError, match="no snapshot 42"):
        reader.dataset(as_of=42)
