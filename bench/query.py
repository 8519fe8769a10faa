"""Query: how long an analyst waits for an answer from a fresh table, Delta and Iceberg, on the embedded stack.
Prints a table and writes bench/results/query-<date>.{json,md}.

    .venv/bin/python -m bench.query --rows 1000000

How the tables are made: N nested webhook events (the `webhooks` corpus) go through the real pipeline (Kafka ->
Lakeline -> a Delta and an Iceberg table partitioned by day, with their commit records). Three questions, each
asked through every path:

- count: `SELECT count(*)`;
- partition filter: one day's events by type, a filter on the partition's source column (`occurred_at`), so the
  files of the other days are skipped;
- nested aggregate: orders and revenue per shipping country (`order.shipping.country`, `order.total`).

Paths (seconds = median of --runs):

- `lakeline query` cold: the whole command as a new process (`lakeline query --pipeline DIR --output json SQL`):
  Python start, imports, the table's log or metadata read, the scan;
- notebook warm: `lakeline.tables.open(name)` and the statement in DuckDB, in a Python process that has already
  run one (imports and the first connection paid), the table opened afresh each time;
- the SQL endpoint (`lakeline sql-endpoint`, started once): beeline as a new client process (a BI extract job), and
  a Spark Connect session's query alone (a notebook on Connect);
- Spark SQL fresh: a new Python process that starts Lakeline's Spark session and runs the statement (what a
  scheduled Spark job pays for the same answer).

Every path must give the same rows; the run fails (exit 3) when one differs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import yaml

from bench.common import document, write
from ingest.formats import FORMAT_NAMES

SYSTEMS = ("query", "notebook", "beeline", "connect", "spark")
LABELS = {"query": "`lakeline query` (cold process)", "notebook": "notebook API (warm)",
          "beeline": "SQL endpoint, beeline (cold client)", "connect": "SQL endpoint, Spark Connect",
          "spark": "Spark SQL (fresh session)"}
# {t}: the table; {q}: the dialect's identifier quote (DuckDB ", Spark `); {day}, {next_day}: the day filtered on.
QUESTIONS = {
    "count": "SELECT count(*) AS n FROM {t}",
    "partition_filter": ("SELECT event_type, count(*) AS n FROM {t} WHERE occurred_at >= TIMESTAMP '{day} 00:00:00' "
                         "AND occurred_at < TIMESTAMP '{next_day} 00:00:00' GROUP BY event_type ORDER BY event_type"),
    "nested_aggregate": ("SELECT {q}order{q}.shipping.country AS country, count(*) AS orders, "
                         "CAST(sum({q}order{q}.total) * 100 AS BIGINT) AS cents FROM {t} "
                         "WHERE {q}order{q} IS NOT NULL GROUP BY 1 ORDER BY 1"),
}
REPO = Path(__file__).resolve().parents[1]
LAKELINE = [sys.executable, "-m", "lakeline"]


def sql_for(question: str, table: str, dialect: str, day: date) -> str:
    return QUESTIONS[question].format(t=table, q='"' if dialect == "duckdb" else "`", day=day.isoformat(),
                                      next_day=(day + timedelta(days=1)).isoformat())


def normalised(rows) -> list[tuple[str, ...]]:
    """Rows as tuples of strings, whatever the client's types (beeline answers text, JSON numbers, Spark Rows)."""
    def text(value) -> str:
        if value is None:
            return ""
        if isinstance(value, (float, Decimal)) and value == int(value):
            return str(int(value))
        return str(value)

    return [tuple(text(v) for v in (row.values() if isinstance(row, dict) else row)) for row in rows]


def webhooks_pipeline(name: str, fmt: str, topic: str) -> dict:
    """conf/examples/webhooks_delta.yaml's pipeline, on `topic`, into table `name` (namespace bench)."""
    data = yaml.safe_load((REPO / "conf" / "examples" / "webhooks_delta.yaml").read_text())
    data["pipeline"] = name
    data["source"].update(topics=[topic], max_offsets_per_trigger=250_000)
    data["sink"].update(format=fmt, table=name, namespace="bench")
    return data


def _median_of(runs: int, action) -> tuple[float, list]:
    seconds, answer = [], None
    for _ in range(runs):
        began = time.perf_counter()
        answer = action()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), answer


def _cli_query(pipelines: Path, sql: str, env: dict) -> list:
    done = subprocess.run([*LAKELINE, "query", "--pipeline", str(pipelines), "--output", "json", sql],
                          capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"lakeline query exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _spark_fresh(pipelines: Path, sql: str, env: dict) -> list:
    done = subprocess.run([sys.executable, "-m", "bench.query", "--spark-sql", sql, "--pipelines", str(pipelines)],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the Spark SQL process exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spark_sql_once(sql: str, pipelines: Path) -> int:
    """The fresh-session path: start Lakeline's Spark session, name the pipelines' tables as the endpoint does
    (temporary views), run `sql`, print the rows as one JSON line."""
    from ingest.config import load_pipeline
    from ingest.settings import load_settings
    from ingest.spark import build_spark
    from ingest.sql_endpoint import registrations

    settings = load_settings()
    spark = build_spark(settings, "lakeline-bench-query-spark")
    for view in registrations([load_pipeline(p) for p in sorted(pipelines.glob("*.yaml"))], settings):
        spark.sql(f"CREATE TEMPORARY VIEW `{view.name}` AS SELECT * FROM {view.source}")
    rows = [list(row) for row in spark.sql(sql).collect()]
    print(json.dumps(rows, default=str))
    spark.stop()
    return 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_endpoint(pipelines: Path, env: dict, log: Path, settings) -> tuple[subprocess.Popen, object]:
    """`lakeline sql-endpoint` over `pipelines` on free loopback ports; (the process, settings that reach it)."""
    from ingest.sql_endpoint import beeline

    settings = settings.model_copy(update={"sql_endpoint_port": _free_port(),
                                           "sql_endpoint_connect_port": _free_port()})
    process = subprocess.Popen([*LAKELINE, "sql-endpoint", "--pipeline", str(pipelines), "--host", "127.0.0.1",
                                "--port", str(settings.sql_endpoint_port),
                                "--connect-port", str(settings.sql_endpoint_connect_port)],
                               env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"lakeline sql-endpoint exited {process.returncode}: {log.read_text()[-2000:]}")
        if "sql endpoint ready" in log.read_text():
            beeline(settings, ["SELECT 1"])
            return process, settings
        time.sleep(1)
    raise RuntimeError(f"lakeline sql-endpoint not ready in 600 s: {log.read_text()[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="webhook events per table (default 1,000,000)")
    parser.add_argument("--formats", nargs="+", default=list(FORMAT_NAMES), choices=FORMAT_NAMES)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per path and question (median; default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument("--spark-sql", metavar="SQL", help=argparse.SUPPRESS)  # the fresh-session child process
    parser.add_argument("--pipelines", type=Path, help=argparse.SUPPRESS)  # ... and its pipelines' folder
    args = parser.parse_args(argv)
    if args.spark_sql:
        return _spark_sql_once(args.spark_sql, args.pipelines)

    from infra import stack
    from ingest.config import PipelineConfig
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import reconcile
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    info = stack.up()
    settings = load_settings()
    env = {**os.environ, **info.env()}  # the `lakeline` children reach the same stack
    run_id = uuid.uuid4().hex[:6]
    topic = f"bench_query_{run_id}"
    workdir = Path(tempfile.mkdtemp(prefix="lakeline-bench-query-"))
    pipelines = workdir / "pipelines"
    pipelines.mkdir()
    configs = {}
    for fmt in args.formats:
        data = webhooks_pipeline(f"bench_query_{fmt}_{run_id}", fmt, topic)
        (pipelines / f"{data['pipeline']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        configs[fmt] = PipelineConfig.model_validate(data)

    first = next(iter(configs.values()))
    print(f"producing {args.rows:,} webhook events to {topic} ...", flush=True)
    produce(first, settings, args.rows, seed=7, partitions=4, corpus="webhooks")
    spark = build_spark(settings, "lakeline-bench-query")
    for fmt, config in configs.items():
        began = time.monotonic()
        Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
        report = reconcile(config, settings, spark)
        if not report.exact or report.rows != args.rows:
            raise SystemExit(f"{fmt}: the table is not exact ({report.rows:,} rows of {args.rows:,})")
        print(f"  {fmt}: {args.rows:,} rows in {time.monotonic() - began:.0f} s", flush=True)
    # The busiest day, so the partition filter has work to do and skips the other days' files.
    day_table = configs[args.formats[0]]
    from ingest.analyst import duckdb_query

    day = duckdb_query(day_table, settings, "SELECT CAST(occurred_at AS DATE) AS d FROM t GROUP BY d "
                                            "ORDER BY count(*) DESC, d LIMIT 1")[0][0]
    spark.stop()

    import duckdb

    import lakeline.tables

    endpoint, endpoint_settings = None, settings
    if {"beeline", "connect"} & set(args.systems):
        print("starting the SQL endpoint ...", flush=True)
        endpoint, endpoint_settings = _start_endpoint(pipelines, env, workdir / "sql-endpoint.log", settings)
    results, differ = [], []
    try:
        from ingest.sql_endpoint import time_query

        for fmt, config in configs.items():
            name = config.sink.table  # its analyst name: the only pipeline with this table name
            for question in QUESTIONS:
                duck, spark_sql = sql_for(question, name, "duckdb", day), sql_for(question, name, "spark", day)
                answers = {}

                def notebook(duck=duck, name=name):
                    connection = duckdb.connect()
                    lakeline.tables.open(name, pipeline=pipelines, settings=settings).duckdb(connection)
                    return connection.execute(duck).fetchall()

                paths = {
                    "query": lambda duck=duck: _cli_query(pipelines, duck, env),
                    "notebook": notebook,
                    "beeline": lambda s=spark_sql: time_query(endpoint_settings, s, "beeline").rows,
                    "connect": lambda s=spark_sql: time_query(endpoint_settings, s, "connect").rows,
                    "spark": lambda s=spark_sql: _spark_fresh(pipelines, s, env),
                }
                row = {"format": fmt, "question": question}
                for system in args.systems:
                    if system == "notebook":
                        notebook()  # warm: imports and the first connection are paid before timing
                    seconds, answer = _median_of(args.runs, paths[system])
                    answers[system] = normalised(answer)
                    row[system] = round(seconds, 2)
                    print(f"  {fmt} {question} {system}: {seconds:.2f} s", flush=True)
                reference = answers[args.systems[0]]
                row["identical"] = all(a == reference for a in answers.values())
                if not row["identical"]:
                    differ.append((fmt, question, answers))
                if "spark" in row:
                    for system in ("query", "notebook"):
                        if system in row:
                            row[f"{system}_vs_spark"] = round(row[system] / row["spark"], 3)
                results.append(row)
    finally:
        if endpoint is not None:
            os.killpg(endpoint.pid, signal.SIGTERM)
            try:
                endpoint.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(endpoint.pid, signal.SIGKILL)

    doc = document("query", argv, results, rows=args.rows, runs=args.runs, day=str(day))
    header = ["format", "question"] + [LABELS[s] for s in args.systems] + ["query / Spark", "identical"]
    table = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + " |"]
    for r in results:
        cells = [r["format"], r["question"]] + [f"{r[s]:.2f} s" for s in args.systems]
        cells += [f"{r['query_vs_spark']:.3f}" if "query_vs_spark" in r else "-", str(r["identical"])]
        table.append("| " + " | ".join(cells) + " |")
    print("\n".join(table))
    for fmt, question, answers in differ:
        print(f"DIFFERENT ANSWERS for {fmt} {question}: {json.dumps(answers)[:2000]}")
    if not args.no_write:
        write(doc, "Query: time to an answer from a fresh table", "\n".join(table))
    return 3 if differ else 0


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    raise SystemExit(main())
