"""Drain throughput: preload N sample events (1% bad) into a fresh topic, then ingest them available-now into a
Delta and an Iceberg table, one format at a time, on the embedded stack. Prints a table and writes
bench/results/drain-<date>.{json,md}.

    .venv/bin/python -m bench.drain --count 1000000
    .venv/bin/python -m bench.drain --source kinesis --count 200000 --shards 4 --max-offsets-per-trigger 50000

Throughput = (rows + dead letters) / wall time of the ingest run (session already warm: the JVM start is
excluded, table creation and every batch are included). CPU = the Spark JVM's user+system seconds during the run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

from bench.common import cpu_seconds, document, orders_pipeline, write
from ingest.formats import FORMAT_NAMES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="events to preload (default 1,000,000)")
    parser.add_argument("--formats", nargs="+", default=list(FORMAT_NAMES), choices=FORMAT_NAMES)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=250_000,
                        help="per-batch limit (Kinesis: max_records_per_batch)")
    parser.add_argument("--source", choices=["kafka", "kinesis"], default="kafka",
                        help="kafka (default) or kinesis: the stack's moto Kinesis")
    parser.add_argument("--shards", type=int, default=4, help="Kafka partitions / Kinesis shards (default 4)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import reconcile
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    topic = f"bench_drain_{run_id}"

    def config(fmt: str):
        return orders_pipeline(f"bench_{fmt}_{run_id}", fmt, topic, args.max_offsets_per_trigger, args.source)

    print(f"producing {args.count:,} events to {args.source} {topic} ...", flush=True)
    produced = produce(config("delta"), settings, args.count, bad_ratio=0.01, seed=1, partitions=args.shards)
    print(f"  {args.count / produced.seconds:,.0f} msg/s produced", flush=True)
    spark = build_spark(settings, "lakeline-bench-drain")
    spark.range(1).count()  # JVM warm-up is not part of any figure
    results = []
    for fmt in args.formats:
        cfg = config(fmt)
        cpu0, t0 = cpu_seconds(parent=os.getpid()), time.monotonic()
        summary = Pipeline(cfg, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
        wall, cpu = time.monotonic() - t0, cpu_seconds(parent=os.getpid()) - cpu0
        report = reconcile(cfg, settings, spark)
        records = summary.rows + summary.dead_letters
        results.append({
            "format": fmt, "records": records, "rows": summary.rows, "dead_letters": summary.dead_letters,
            "batches": len(summary.batches), "seconds": round(wall, 1), "records_per_s": round(records / wall),
            "jvm_cpu_s": round(cpu, 1), "cpu_s_per_million": round(cpu / records * 1e6, 1),
            "exact": report.exact, "duplicates": report.duplicates, "missing": report.missing,
        })
        print(json.dumps(results[-1]), flush=True)
    spark.stop()

    doc = document("drain" if args.source == "kafka" else "drain-kinesis", argv, results, module="drain",
                   count=args.count, source=args.source, shards=args.shards,
                   max_offsets_per_trigger=args.max_offsets_per_trigger)
    table = ["| format | records | batches | seconds | records/s | JVM CPU s | CPU s / 1M | exact |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    table += [f"| {r['format']} | {r['records']:,} | {r['batches']} | {r['seconds']} | {r['records_per_s']:,} | "
              f"{r['jvm_cpu_s']} | {r['cpu_s_per_million']} | {r['exact']} |" for r in results]
    print("\n".join(table))
    if not args.no_write:
        title = "Drain throughput" if args.source == "kafka" else "Drain throughput from Kinesis"
        write(doc, title, "\n".join(table))
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
