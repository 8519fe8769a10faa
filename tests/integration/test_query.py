"""`lakeline query`, `lakeline tables` and the notebook API over both formats, Spark-free: tables written here with
delta-rs and pyiceberg (three known appends carrying Lakeline commit records) on the stack's moto S3 and SQLite
catalog. Each test states its measured cost (about 15 s in all, beside the stack's start); none starts Spark."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from ingest.commits import CommitRecord
from tests.helpers import lakeline_in_process, pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DAY0 = datetime(2026, 11, 20, 8, tzinfo=UTC)


def _batch(day: int):
    """Five orders of day `day` (event_time on 2026-11-20 + day), with a nested customer struct."""
    import pyarrow as pa

    times = [DAY0 + timedelta(days=day, minutes=i) for i in range(5)]
    return pa.table({
        "event_id": [f"e{day}-{i}" for i in range(5)],
        "event_time": pa.array(times, pa.timestamp("us", "UTC")),
        "amount": pa.array([float(day * 10 + i) for i in range(5)]),
        "customer": pa.array([{"id": f"c{i}", "tier": "gold" if i % 2 else "basic"} for i in range(5)]),
    })


def _record(pipeline: str, day: int) -> str:
    return CommitRecord(pipeline, "lineage-1", day, {("orders", 0): day * 5}, {("orders", 0): day * 5 + 5},
                        5, 0).to_json()


def _write(fmt: str, settings, conf_dir: Path) -> tuple[Path, str, list[int]]:
    """A pipeline YAML and its main table with three appends (days 0, 1, 2), no dead-letter table: (YAML, analyst
    name, the three versions/snapshot ids)."""
    import pyarrow as pa

    name = f"q_{fmt}_{uuid.uuid4().hex[:8]}"
    path = write_pipeline(conf_dir, pipeline_dict(fmt, name))
    versions = []
    if fmt == "delta":
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        from ingest.formats.delta import delta_rs_uri, delta_storage_options

        uri, options = delta_rs_uri(f"{settings.warehouse}/delta/{name}"), delta_storage_options(settings)
        for day in range(3):
            batch = _batch(day).append_column("event_date", pa.array([date(2026, 11, 20 + day)] * 5))
            write_deltalake(uri, batch, mode="append", partition_by=["event_date"], storage_options=options,
                            commit_properties=CommitProperties(custom_metadata={"userMetadata": _record(name, day)}))
            versions.append(DeltaTable(uri, storage_options=options).version())
    else:
        from pyiceberg.transforms import IdentityTransform

        from ingest.formats.iceberg import iceberg_catalog

        # Partitioned by the day column itself (pyiceberg writes a day() transform only with pyiceberg-core).
        batches = [_batch(day).append_column("event_date", pa.array([date(2026, 11, 20 + day)] * 5))
                   for day in range(3)]
        catalog = iceberg_catalog(settings)
        catalog.create_namespace_if_not_exists("tests")
        table = catalog.create_table(f"tests.{name}", schema=batches[0].schema,
                                     location=f"{settings.warehouse.replace('s3a://', 's3://')}/tests/{name}")
        with table.update_spec() as spec:
            spec.add_field("event_date", IdentityTransform(), "event_date")
        for day, batch in enumerate(batches):
            table.append(batch, snapshot_properties={"lakeline.commit": _record(name, day)})
            versions.append(table.current_snapshot().snapshot_id)
    return path, name, versions


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    return lakeline_in_process(capsys, *argv)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_query_answers_in_each_output_prunes_files_and_names_what_is_missing(fmt, settings, conf_dir, tmp_path,
                                                                              capsys):
    """One statement in text, JSON and CSV, extracts to Parquet and CSV, a bad statement, a table not created yet,
    `--stats` showing a filter on the partition's source column skipping files, and `lakeline tables`. In-process
    (no interpreter start): measured 5.6 s for the first (Delta, imports warm up), 1.8 s for Iceberg."""
    path, name, _ = _write(fmt, settings, conf_dir)
    sql = f"SELECT event_id, customer, customer.tier AS tier FROM {name} WHERE event_time >= " \
          "TIMESTAMPTZ '2026-11-22 00:00:00+00' ORDER BY event_id"
    code, out, err = _run(capsys, "query", "--pipeline", str(path), sql, "--output", "json", "--stats")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["event_id"] for r in rows] == [f"e2-{i}" for i in range(5)]
    assert rows[1]["customer"] == {"id": "c1", "tier": "gold"} and rows[1]["tier"] == "gold"  # nested intact
    assert f"{name}: scanned 1 of 3 data files" in err  # two days' files never opened

    code, out, _ = _run(capsys, "query", "--pipeline", str(path), f"SELECT count(*) AS n, sum(amount) AS total "
                        f"FROM {name}", "--output", "csv")
    assert (code, out) == (0, "n,total\n15,180.0\n")
    code, out, _ = _run(capsys, "query", "--pipeline", str(path), f"SELECT count(*) AS n FROM {name}")
    assert code == 0 and re.search(r"│\s*15\s*│", out) and "1 row" in out

    for suffix in ("parquet", "csv"):
        target = tmp_path / f"extract.{suffix}"
        code, _, err = _run(capsys, "query", "--pipeline", str(path), sql, "--to", str(target))
        assert code == 0 and "5 rows written" in err
    import pyarrow.parquet as pq

    extract = pq.read_table(tmp_path / "extract.parquet")
    assert extract.num_rows == 5 and extract.schema.field("customer").type.num_fields == 2

    code, _, err = _run(capsys, "query", "--pipeline", str(path), f"SELEC * FROM {name}")
    assert code == 2 and "syntax error" in err and name in err  # DuckDB's words and the tables there are
    code, _, err = _run(capsys, "query", "--pipeline", str(path), f"SELECT * FROM {name}_dead_letters")
    assert code == 1 and "does not exist yet" in err and f"lakeline ingest --pipeline {path}" in err

    code, out, err = _run(capsys, "tables", "--pipeline", str(path), "--output", "json")
    assert code == 0, err
    main_row, letters_row = json.loads(out)
    assert (main_row["table"], main_row["rows"], main_row["files"], main_row["created"]) == (name, 15, 3, True)
    assert main_row["complete_through"] == {"orders": {"0": 15}}  # the newest commit record's end
    assert main_row["newest_commit_at"] is not None
    assert (letters_row["created"], letters_row["sla"]) == (False, "not created")
    code, out, err = _run(capsys, "query", "--pipeline", str(path), "--output", "json",
                          'SELECT "table", created, "rows", sla FROM lakeline_freshness ORDER BY 1')
    assert code == 0 and [tuple(r.values()) for r in json.loads(out)] == [
        (name, True, 15, main_row["sla"]), (f"{name}_dead_letters", False, None, "not created")], err


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_time_travel_and_incremental_reads_match_known_commits(fmt, settings, conf_dir, capsys):
    """--as-of a version/snapshot and a time, --since a version/snapshot, and the notebook API's as_of and
    changes_since, against the three appends. Measured 1.3 s (Delta) and 1.4 s (Iceberg)."""
    import lakeline.tables

    path, name, versions = _write(fmt, settings, conf_dir)
    count = f"SELECT count(*) AS n, min(event_id) AS first FROM {name}"

    def answer(*flags: str) -> list:
        code, out, err = _run(capsys, "query", "--pipeline", str(path), count, "--output", "json", *flags)
        assert code == 0, err
        return [tuple(r.values()) for r in json.loads(out)]

    assert answer("--as-of", str(versions[0])) == [(5, "e0-0")]
    assert answer("--as-of", str(versions[1])) == [(10, "e0-0")]
    table = lakeline.tables.open(pipeline=path)
    history = table.versions()
    moment = next(v.committed_at for v in history if v.version == versions[1])
    assert answer("--as-of", moment.isoformat()) == [(10, "e0-0")]
    assert answer("--since", str(versions[0])) == [(10, "e1-0")]
    assert answer("--since", str(versions[2])) == [(0, None)]
    assert table.to_arrow(columns=["event_id"], as_of=versions[0]).num_rows == 5
    assert sorted(table.changes_since(versions[1]).column("event_id").to_pylist()) == [f"e2-{i}" for i in range(5)]
    assert [v.record.batch_id for v in history if v.record] == [0, 1, 2]


def test_the_prompt_keeps_going_after_a_bad_statement(settings, conf_dir):
    """The interactive prompt through a pseudo-terminal: a statement, a bad one (error, prompt kept), .tables,
    another statement, .quit. A `lakeline query` process of its own: measured 4.2 s."""
    path, name, _ = _write("delta", settings, conf_dir)
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "lakeline", "query", "--pipeline", str(path)],
                               stdin=follower, stdout=follower, stderr=follower, cwd=REPO, close_fds=True,
                               env={**os.environ, "HOME": str(conf_dir), "TERM": "dumb", "NO_COLOR": "1"})
    os.close(follower)
    seen, mark = b"", 0

    def until(pattern: bytes, timeout: float = 60) -> None:
        """Wait for `pattern` (a regex) in what the prompt printed since the last statement was sent."""
        nonlocal seen
        deadline = time.monotonic() + timeout
        while not re.search(pattern, seen[mark:]):
            assert time.monotonic() < deadline, f"no {pattern!r} in the prompt's output:\n{seen.decode()[-3000:]}"
            ready, _, _ = select.select([leader], [], [], 1)
            if ready:
                seen += os.read(leader, 65536)

    def send(line: str) -> None:
        nonlocal mark
        mark = len(seen)
        os.write(leader, line.encode())

    try:
        until(rb"lakeline> ")
        send(f"SELECT count(*) AS total_rows\nFROM {name};\n")
        until("│ +15 +│".encode())
        send("SELEC nonsense;\n")
        until(rb"error: Parser Error.*\n.*lakeline> ")
        send(".tables\n")
        until(f"{name}_dead_letters".encode())
        send("SELECT 40 + 2 AS answer;\n")
        until("│ +42 +│".encode())
        os.write(leader, b".quit\n")
        assert process.wait(timeout=30) == 0
        assert (conf_dir / ".lakeline_query_history").read_text().count("SELECT") >= 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)


def test_the_analyst_docs_notebook_example_runs(settings, tmp_path, monkeypatch):
    """docs/analysts.md's notebook example, as written, against a Delta `orders` table of a conf/ here. Measured
    0.7 s."""
    conf = tmp_path / "conf" / "pipelines"
    conf.mkdir(parents=True)
    data = pipeline_dict("delta", "orders_delta", sink={
        "format": "delta", "table": "orders", "location": f"{settings.warehouse}/docs-{uuid.uuid4().hex[:8]}/orders",
        "partition": {"column": "event_date", "source": "event_time", "transform": "day"}})
    data["source"]["topics"] = ["orders"]
    write_pipeline(conf, data)
    _write_at(data["sink"]["location"], settings)
    text = (REPO / "docs" / "analysts.md").read_text()
    example = re.search(r"<!-- notebook-example -->\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(example, "docs/analysts.md", "exec"), scope)  # noqa: S102 - the docs' own example
    assert scope["frame"].shape[0] == 15 and scope["new_rows"].num_rows == 10


def _write_at(location: str, settings) -> None:
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    from ingest.formats.delta import delta_rs_uri, delta_storage_options

    for day in range(3):
        batch = _batch(day).append_column("event_date", pa.array([date(2026, 11, 20 + day)] * 5))
        write_deltalake(delta_rs_uri(location), batch, mode="append", partition_by=["event_date"],
                        storage_options=delta_storage_options(settings),
                        commit_properties=CommitProperties(custom_metadata={"userMetadata": _record("orders_delta",
                                                                                                     day)}))
