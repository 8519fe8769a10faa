"""The SQL endpoint with real clients nobody here wrote: `lakeline dev up --sql-endpoint`'s server (one Spark driver:
Spark's Thrift server and Spark Connect) answers beeline (Hive's JDBC client) and the pyspark Spark Connect client
with the same rows as DuckDB over delta-rs / pyiceberg and as a Spark SQL session, on nested webhook events a real
pipeline wrote into both formats, dead letters included; a table created after the endpoint started (the Iceberg
pipeline's first run) is served once it exists. Heavy tier: 123 s measured on the 2-core box, the stack's start
aside (two ingest runs, the endpoint's JVM start, one beeline and one Connect client process)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from infra import stack as local_stack
from ingest.analyst import duckdb_query
from ingest.config import load_pipeline
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.sql_endpoint import beeline, connect_url, registrations
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

REPO = Path(__file__).resolve().parents[2]
SEED = 20261127
# The analyst queries: a count, a filter, nested fields, a group by; `{t}` is the table's name in each engine.
QUERIES = [
    "SELECT count(*) AS n FROM {t}",
    "SELECT count(*) AS n FROM {t} WHERE event_type = 'order.created'",
    "SELECT customer.tier AS tier, count(*) AS n, count(payment.method) AS paid, max(customer.id) AS last_customer "
    "FROM {t} GROUP BY customer.tier ORDER BY tier NULLS FIRST",
    "SELECT event_type, count(*) AS n FROM {t} GROUP BY event_type ORDER BY event_type",
]
DEAD_LETTER_QUERY = "SELECT _error, count(*) AS n FROM {t} GROUP BY _error ORDER BY _error"

CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
answers = [spark.sql(sql).collect() for sql in json.load(sys.stdin)]
print(json.dumps([[["" if v is None else str(v) for v in row] for row in rows] for rows in answers]))
"""


def _pipelines(conf_dir: Path) -> list:
    """The webhooks example into Delta and into Iceberg, sharing a table name (so each goes by its pipeline's)."""
    folder = conf_dir / "pipelines"
    folder.mkdir()
    table = f"t_sqlep_{random.getrandbits(32):08x}"
    configs = []
    for fmt in ("delta", "iceberg"):
        data = yaml.safe_load((REPO / "conf" / "examples" / f"webhooks_{fmt}.yaml").read_text())
        data["pipeline"] = f"{table}_{fmt}"
        data["source"]["topics"] = [f"{table}_{fmt}"]
        data["sink"].update(table=table, namespace="tests")
        path = folder / f"{table}_{fmt}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        configs.append(load_pipeline(path))
    return configs


def _text(rows) -> list[tuple[str, ...]]:
    return [tuple("" if v is None else str(v) for v in row) for row in rows]


def test_beeline_and_spark_connect_answer_like_duckdb_and_spark_sql_on_both_formats(stack_env, settings, spark,
                                                                                   conf_dir, monkeypatch):
    delta, iceberg = _pipelines(conf_dir)
    for config in (delta, iceberg):
        produce(config, settings, 1500, bad_ratio=0.02, seed=SEED, corpus="webhooks")
    Pipeline(delta, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)

    monkeypatch.setenv("LAKELINE_CONF_DIR", str(conf_dir))
    monkeypatch.setenv("LAKELINE_SQL_ENDPOINT_REFRESH_SECONDS", "1")
    state = stack_env["state"]
    try:
        info = local_stack.up(state, sql_endpoint=True)  # the running stack, plus the endpoint
        status = local_stack.status(state)["sql_endpoint"]
        assert status["running"] and status["jdbc_url"].startswith("jdbc:hive2://127.0.0.1:")
        log = Path(status["log"])
        served = settings.model_copy(update={"sql_endpoint_port": info.sql_endpoint_port,
                                             "sql_endpoint_connect_port": info.sql_endpoint_connect_port})
        names = {r.name: r for r in registrations([delta, iceberg], settings)}
        assert "not there yet: " + iceberg.pipeline in log.read_text()  # its table comes with its first run

        Pipeline(iceberg, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
        wait_for(lambda: f"sql endpoint: {iceberg.pipeline}_dead_letters -> " in log.read_text(),
                 "the endpoint to register the Iceberg tables its pipeline created", timeout=120)

        asked, expected = [], []
        for config in (delta, iceberg):
            for name, table, queries in ((config.pipeline, None, QUERIES),
                                         (f"{config.pipeline}_dead_letters", config.sink.dead_letters,
                                          [DEAD_LETTER_QUERY])):
                for query in queries:
                    by_duckdb = _text(duckdb_query(config, settings, query.format(t="t"), table))
                    by_spark = _text(spark.sql(query.format(t=names[name].source)).collect())
                    assert by_duckdb == by_spark, (name, query)
                    asked.append(query.format(t=name))
                    expected.append(by_duckdb)
        assert int(expected[0][0][0]) > 1000  # the Delta main table holds the corpus's good events

        by_beeline = beeline(served, asked)
        connect = subprocess.run([sys.executable, "-c", CONNECT_CLIENT, connect_url(served)], input=json.dumps(asked),
                                 capture_output=True, text=True, timeout=300)
        assert connect.returncode == 0, connect.stderr[-3000:]
        by_connect = [[tuple(row) for row in rows] for rows in json.loads(connect.stdout)]
        for query, want, jdbc, remote in zip(asked, expected, by_beeline, by_connect, strict=True):
            assert (jdbc, remote) == (want, want), query
        assert any(row[:1] == ("gold",) for row in expected[2])  # a nested field's values came through
        endpoint = psutil.Process(info.sql_endpoint_pid)
        rss = sum(p.memory_info().rss for p in (endpoint, *endpoint.children(recursive=True)))
        ready = next(line for line in log.read_text().splitlines() if line.startswith("sql endpoint ready"))
        print(f"[sql endpoint] {ready}; memory after the queries (driver + JVM RSS): {rss / 2**20:.0f} MiB")
    finally:
        local_stack.stop_sql_endpoint(state)
    assert "sql_endpoint" not in local_stack.status(state)
