"""Drain throughput side by side: N clean sample events preloaded into one topic, then drained by each system in
turn, each from the earliest offset into its own table: into Delta by Lakeline, plain Spark with the built-in Delta
sink and a Python consumer writing with delta-rs; into Iceberg by Lakeline and plain Spark with the Iceberg sink
(the same embedded catalog). Prints a table and writes
bench/results/drain-peers-<date>.{json,md}.

    .venv/bin/python -m bench.drain_peers --count 1000000
    .venv/bin/python -m bench.drain_peers --systems lakeline spark-delta --rounds 5   # pairs in one hour

`--rounds N` drains the same preloaded topic N times, the systems in turn and their order reversed every other
round (no system always first), and prints each round's ratio to Lakeline and the median: one drain of 1M lasts
15-25 s here, and single pairs swing by a third on the same code.

Each system runs as its own process, started as in the latency benchmark (Lakeline: `lakeline ingest`,
processing-time trigger, no per-batch limit; the peers with their defaults). Throughput = N / (timestamp of the
last commit in the table's log - the moment the system reported ready), so JVM and Spark start are excluded for
every system, and the first batch's planning, table creation and every commit are included. The end is read from
the table's own log; no clock inside a system is read. CPU = user+system seconds of the system's whole process
group (driver, JVM, Python workers) from ready to drained. Exact = rows in the table == distinct event ids == N.

The events are clean (no bad records): the delta-rs peer has no dead-letter path and plain Spark would write a bad
record as a row of nulls, so equal correctness needs clean input. `bench.drain` measures Lakeline with 1% bad.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import cpu_seconds, document, write
from bench.latency import FORMAT, SYSTEMS


def default_systems() -> list[str]:
    """Every system, the Flink peer only when installed (`bash infra/flink.sh`)."""
    from bench.latency import FLINK_PYTHON

    return [s for s in SYSTEMS if s != "flink-iceberg" or FLINK_PYTHON.exists()]


def measure(system: str, topic: str, count: int, settings, run_id: str) -> dict:
    """Drain `topic` (holding `count` events) with one system into a table of its own."""
    from bench.delta_log import DeltaLogReader, row_latencies
    from bench.iceberg_log import IcebergLogReader, rows_and_ids
    from bench.latency import _start, _stop, wait_drained
    from ingest.adapters.object_store import s3_client

    bucket = f"bench-drain-{run_id}-{system}"
    s3_client(settings).create_bucket(Bucket=bucket)
    table = f"{topic}_{system.replace('-', '_')}"
    env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse"}
    work = Path(tempfile.mkdtemp(prefix=f"lakeline-bench-drain-{system}-"))
    if FORMAT[system] == "delta":
        location = f"s3a://{bucket}/{table}"
        table_log = DeltaLogReader(location, settings)
    else:  # the stack's Iceberg catalog; the table's files go under this run's bucket (LAKELINE_WAREHOUSE)
        location = f"{settings.iceberg_catalog_name}.bench_drain.{table}"
        table_log = IcebergLogReader(location, settings)
    print(f"\n== {system}: draining {count:,} events ...", flush=True)
    process, log = _start(system, topic, location, work, env)
    ready_ms, cpu_at_ready = int(time.time() * 1000), cpu_seconds(group=process.pid)
    try:
        landed, _ = wait_drained(system, process, log, table_log, count, timeout=1800, poll=0.5)
        if landed < count:
            raise RuntimeError(f"{system} did not drain {count:,} events in 30 min ({landed:,} landed; see {log})")
        cpu = cpu_seconds(group=process.pid) - cpu_at_ready
    finally:
        _stop(process)
    commits = [c for c in table_log.commits() if c["files"] and c["timestamp_ms"]]
    seconds = (commits[-1]["timestamp_ms"] - ready_ms) / 1000
    if FORMAT[system] == "delta":
        _, rows, distinct = row_latencies(location, settings, 0, 0)
    else:
        rows, distinct = rows_and_ids(location, settings)
    result = {"benchmark": "drain_peers", "system": system, "format": FORMAT[system], "records": count,
              "commits": len(commits),
              "seconds": round(seconds, 1), "records_per_s": round(count / seconds),
              "cpu_s": round(cpu, 1), "cpu_s_per_million": round(cpu / count * 1e6, 1),
              "rows": rows, "distinct_ids": distinct, "exact": rows == distinct == count}
    print("   " + json.dumps(result), flush=True)
    return result


def round_ratios(rounds: list[list[dict]]) -> list[dict]:
    """Per peer with a Lakeline run of its format: Lakeline's records/s and CPU s per 1M over the peer's in each
    round (records/s above 1: Lakeline drained faster; CPU below 1: it used less per record), and the medians."""
    import statistics

    out = []
    formats = {r["format"] for r in rounds[0] if r["system"].startswith("lakeline")}
    systems = [r["system"] for r in rounds[0] if not r["system"].startswith("lakeline") and r["format"] in formats]
    for system in systems:
        speed, cpu = [], []
        for results in rounds:
            peer = next(r for r in results if r["system"] == system)
            own = next(r for r in results if r["system"].startswith("lakeline") and r["format"] == peer["format"])
            speed.append(round(own["records_per_s"] / peer["records_per_s"], 2))
            cpu.append(round(own["cpu_s_per_million"] / peer["cpu_s_per_million"], 2))
        out.append({"peer": system, "lakeline_speed_ratios": speed, "lakeline_cpu_ratios": cpu,
                    "median_speed_ratio": round(statistics.median(speed), 2),
                    "median_cpu_ratio": round(statistics.median(cpu), 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="events to preload (default 1,000,000)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=None,
                        help="default: all (lakeline, spark-delta and delta-rs into Delta; lakeline-iceberg, "
                             "spark-iceberg and, when `bash infra/flink.sh` has installed it, flink-iceberg into "
                             "Iceberg)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="drain the topic this many times, the order reversed every other round (default 1)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from bench.common import orders_pipeline
    from infra import stack
    from ingest.produce import produce
    from ingest.settings import load_settings

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    topic = f"bench_drain_peers_{run_id}"
    print(f"producing {args.count:,} clean events to {topic} ...", flush=True)
    produced = produce(orders_pipeline(topic, "delta", topic), settings, args.count, bad_ratio=0.0, seed=3,
                       partitions=4)
    print(f"  {args.count / produced.seconds:,.0f} msg/s produced", flush=True)
    systems = args.systems or default_systems()
    if "flink-iceberg" not in systems and args.systems is None:
        print("(the Flink peer is not installed: `bash infra/flink.sh` adds it)", flush=True)
    several = args.rounds > 1
    rounds = []
    for number in range(args.rounds):
        order = systems if number % 2 == 0 else systems[::-1]
        if several:
            print(f"\n== round {number + 1}/{args.rounds}: {', '.join(order)}", flush=True)
        rounds.append([measure(system, topic, args.count, settings,
                               f"{run_id}r{number + 1}" if several else run_id) for system in order])
    results = [r for drained in rounds for r in drained]
    ratios = round_ratios(rounds) if several else []
    table = [("| round " if several else "") + "| system | format | records | commits | seconds | records/s | "
             "vs Lakeline (same format) | CPU s | CPU s / 1M | exact |",
             ("| ---: " if several else "") + "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for number, drained in enumerate(rounds, 1):
        lakeline = {r["format"]: r for r in drained if r["system"].startswith("lakeline")}
        for r in drained:
            same = lakeline.get(r["format"])
            ratio = f"{r['records_per_s'] / same['records_per_s']:.2f}×" if same else "-"
            table.append((f"| {number} " if several else "")
                         + f"| {r['system']} | {r['format']} | {r['records']:,} | {r['commits']} | {r['seconds']} | "
                         f"{r['records_per_s']:,} | {ratio} | {r['cpu_s']} | {r['cpu_s_per_million']} | "
                         f"{r['exact']} |")
    for ratio in ratios:
        table.append(f"\nLakeline vs {ratio['peer']} in {args.rounds} rounds: records/s "
                     f"{', '.join(f'{v:.2f}x' for v in ratio['lakeline_speed_ratios'])} (median "
                     f"{ratio['median_speed_ratio']:.2f}x), CPU per record "
                     f"{', '.join(f'{v:.2f}x' for v in ratio['lakeline_cpu_ratios'])} (median "
                     f"{ratio['median_cpu_ratio']:.2f}x)")
    print("\n".join(table))
    if not args.no_write:
        doc = document("drain-peers", argv, results, module="drain_peers", count=args.count, rounds=args.rounds,
                       ratios=ratios)
        write(doc, "Drain throughput, Lakeline vs peers (clean events, into Delta and Iceberg)", "\n".join(table))
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
