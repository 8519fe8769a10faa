"""The Iceberg REST catalog (the Iceberg project's server from the iceberg-open-api test fixtures) as the catalog
Spark and pyiceberg share: `lakeline dev up --iceberg-catalog rest` in a state folder of its own, then a steady
ingest, a compaction and the Spark-free DuckDB read through it, exact.

Cost (2 cores): about 3 min (a second stack, three Spark drivers). Heavy: CI runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from ingest.config import load_pipeline
from tests.helpers import lakeline_json, pipeline_dict, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.heavy, pytest.mark.soak]  # soak: does not fit CI on a slow day


@pytest.fixture
def rest_stack(tmp_path, monkeypatch):
    """A stack whose Iceberg catalog is the REST server; its environment in this process (settings) and for the
    commands this test runs."""
    state = tmp_path / "state"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELINE_", "AWS_"))}
    base["LAKELINE_STATE_DIR"] = str(state)
    up = subprocess.run([sys.executable, "-m", "lakeline", "dev", "up", "--iceberg-catalog", "rest"],
                        capture_output=True, text=True, env=base, timeout=300)
    if up.returncode != 0:
        pytest.fail(f"a stack with the REST catalog could not start:\n{up.stderr[-3000:]}", pytrace=False)
    env = dict(line.split("=", 1) for line in (state / "stack" / "stack.env").read_text().splitlines() if line)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LAKELINE_STATE_DIR", str(state))
    yield {**base, **env}
    subprocess.run([sys.executable, "-m", "lakeline", "dev", "down"], capture_output=True, env=base, timeout=120)


def test_ingest_compaction_and_the_duckdb_read_through_the_rest_catalog(rest_stack, conf_dir):
    from ingest.analyst import duckdb_query
    from ingest.produce import produce
    from ingest.settings import load_settings

    uri = rest_stack["LAKELINE_ICEBERG_CATALOG_URI"]
    assert uri.startswith("http://127.0.0.1:")
    status = json.loads(subprocess.run([sys.executable, "-m", "lakeline", "dev", "status"], capture_output=True,
                                       text=True, env=rest_stack, timeout=60).stdout)
    server = psutil.Process(status["iceberg_rest_pid"])
    assert {c.laddr.ip for c in server.net_connections("inet") if c.status == psutil.CONN_LISTEN} <= {
        "127.0.0.1", "::ffff:127.0.0.1"}
    settings = load_settings()
    data = pipeline_dict("iceberg")
    data["source"]["max_offsets_per_trigger"] = 500
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    (conf_dir / "tables").mkdir()
    (conf_dir / "tables" / f"{config.pipeline}.yaml").write_text(yaml.safe_dump({
        "table": config.pipeline, "pipeline": f"../{path.name}",
        "compaction": {"min_small_files": 3, "small_file_ratio": 0.3, "hot_partition_window": "1m"},
        "retention": {"retain": "24h", "min_retain": "24h", "orphan_older_than": "24h", "min_orphan_age": "1h"}}))
    produced = produce(config, settings, 4000, bad_ratio=0.01, seed=23)

    def lakeline(*args: str) -> dict:
        return lakeline_json(rest_stack, *args)

    ingest = subprocess.run([sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger",
                             "available-now"], capture_output=True, text=True, env=rest_stack, timeout=600)
    assert ingest.returncode == 0, ingest.stdout[-2000:] + ingest.stderr[-3000:]
    table = ["--table", config.pipeline, "--conf-dir", str(conf_dir)]
    files = lambda report: sum(p["files"] for p in report["partitions"])  # noqa: E731
    before = lakeline("health", *table)
    lakeline("compact", *table, "--now", "2099-01-01T00:00:00+00:00")
    after = lakeline("health", *table)
    assert files(after) < files(before), (files(before), files(after))
    report = lakeline("reconcile", "--pipeline", str(path))
    assert report["duplicates"] == 0 and report["missing"] == 0 and report["produced"] == 4000, report
    assert report["dead_letters"] == produced.bad_total
    rows = 4000 - produced.bad_total
    # An analyst's read without Spark: pyiceberg through the REST catalog, DuckDB over the scan
    assert duckdb_query(config, settings, "SELECT count(*), count(DISTINCT event_id) FROM t") == [(rows, rows)]
    # The catalog the tables are in is the REST server's (its own SQLite file), not the stack's SQLite catalog
    rest_db = Path(rest_stack["LAKELINE_STATE_DIR"]) / "stack" / "rest_catalog.db"
    assert rest_db.is_file() and config.pipeline.encode() in rest_db.read_bytes()
