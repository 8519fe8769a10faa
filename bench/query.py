"""The analyst's read, timed: `lakeline query` as a whole cold process and the notebook API warm, on a table of each
format with N rows (default 1M) written in ten appends, partitioned by day, with a nested struct.

    .venv/bin/python -m bench.query                  # 1M rows in a temporary folder, results printed as JSON
    .venv/bin/python -m bench.query --rows 100000 --runs 1

Three statements: a count, a filter on the partition's source column (event_time: the day partitions prune), and
an aggregate over a nested field. The tables are local files (delta-rs, and pyiceberg with a SQLite catalog), so the
figures are the reader's and the process's own cost, without an object store's round trips. Not yet one of
`python -m bench`'s runs: the SQL endpoint's and a Spark SQL session's timings belong beside these there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "partition_filter": "SELECT count(*), sum(amount) FROM {t} "
                        "WHERE event_time >= TIMESTAMPTZ '2026-11-29 00:00:00+00'",
    "nested_aggregate": "SELECT customer.tier, count(*), avg(amount) FROM {t} GROUP BY 1 ORDER BY 1",
}


def write_tables(folder: Path, rows: int) -> dict[str, str]:
    """A Delta and an Iceberg table of `rows` orders, and a pipeline YAML for each: {format: analyst name}."""
    import numpy as np
    import pyarrow as pa
    import yaml
    from deltalake import write_deltalake
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import IdentityTransform

    rng = np.random.default_rng(1)
    start = np.datetime64("2026-11-01T00:00:00", "us")
    times = start + (rng.integers(0, 30 * 86400, rows) * 1_000_000).astype("timedelta64[us]")
    table = pa.table({
        "event_id": pa.array([f"e{i}" for i in range(rows)]),
        "event_time": pa.array(times).cast(pa.timestamp("us", "UTC")),
        "amount": pa.array(rng.random(rows) * 100),
        "customer": pa.StructArray.from_arrays([pa.array([f"c{i % 5000}" for i in range(rows)]),
                                               pa.array(rng.integers(0, 5, rows))], names=["id", "tier"]),
    })
    table = table.append_column("event_date", table.column("event_time").cast(pa.timestamp("us")).cast(pa.date32()))
    appends = [table.slice(k * (rows // 10), rows // 10) for k in range(10)]
    for batch in appends:
        write_deltalake(f"{folder}/warehouse/delta/bench_q_delta", batch, mode="append", partition_by=["event_date"])
    catalog = SqlCatalog("lakeline", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}/iceberg")
    catalog.create_namespace("bench")
    iceberg = catalog.create_table("bench.bench_q_iceberg", schema=table.schema)
    with iceberg.update_spec() as spec:
        spec.add_field("event_date", IdentityTransform(), "event_date")
    for batch in appends:
        iceberg.append(batch)
    schema = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf/pipelines/orders_delta.yaml").read_text())
    (folder / "conf" / "pipelines").mkdir(parents=True)
    for fmt in ("delta", "iceberg"):
        name = f"bench_q_{fmt}"
        (folder / "conf" / "pipelines" / f"{name}.yaml").write_text(yaml.safe_dump({
            **schema, "pipeline": name, "sink": {"format": fmt, "table": name, "namespace": "bench",
                                                 "partition": {"column": "event_date", "source": "event_time",
                                                               "transform": "day"}}}))
    return {"delta": "bench_q_delta", "iceberg": "bench_q_iceberg"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.query", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each statement (the median is kept)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lakeline-bench-query-") as tmp:
        folder = Path(tmp)
        names = write_tables(folder, args.rows)
        env = {**os.environ, "LAKELINE_WAREHOUSE": f"file://{folder}/warehouse",
               "LAKELINE_ICEBERG_CATALOG_URI": f"sqlite:///{folder}/catalog.db"}
        results = []
        for fmt, name in names.items():
            for label, sql in QUERIES.items():
                cold = []
                for _ in range(args.runs):
                    started = time.perf_counter()
                    done = subprocess.run([sys.executable, "-m", "lakeline", "query", "--conf-dir",
                                           str(folder / "conf"), sql.format(t=name), "--output", "csv", "--stats"],
                                          env=env, capture_output=True, text=True)
                    cold.append(time.perf_counter() - started)
                    if done.returncode != 0:
                        raise SystemExit(done.stderr)
                results.append({"format": fmt, "query": label, "cold_process_s": round(statistics.median(cold), 2),
                                "files": done.stderr.strip().splitlines()[-1]})
        warm = subprocess.run([sys.executable, "-c", _WARM, str(folder / "conf"), json.dumps(names),
                               json.dumps(QUERIES), str(args.runs)], env=env, capture_output=True, text=True)
        if warm.returncode != 0:
            raise SystemExit(warm.stderr)
        for row, seconds in zip(results, json.loads(warm.stdout), strict=True):
            row["notebook_warm_s"] = seconds
    print(json.dumps({"rows": args.rows, "cpus": os.cpu_count(), "load_average": os.getloadavg()[0],
                      "results": results}, indent=2))
    return 0


# The notebook API in one process: each statement timed after a first run has loaded the libraries.
_WARM = """
import faulthandler, json, statistics, sys, time
faulthandler.dump_traceback_later(60, exit=True)  # a hung read says where
import duckdb
import lakeline.tables
conf, names, queries, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
out = []
for fmt, name in names.items():
    for sql in queries.values():
        times = []
        for _ in range(runs + 1):
            started = time.perf_counter()
            table = lakeline.tables.open(name, conf_dir=conf)
            connection = duckdb.connect()
            table.duckdb(connection)
            connection.execute(sql.format(t=name)).fetchall()
            times.append(time.perf_counter() - started)
        out.append(round(statistics.median(times[1:]), 3))
print(json.dumps(out))
"""


if __name__ == "__main__":
    sys.exit(main())
