"""Cost of the decode transform alone: N sample payloads (the orders schema, 1% bad, 2% with an undeclared field)
cached in a local[2] Spark, each variant written to Spark's `noop` sink; median of R runs, µs per record.

    .venv/bin/python -m bench.decode --count 400000 --runs 5

Variants: `scan` (read the cached bytes), `typed parse` (one `from_json` into the declared struct: the floor, a
parse that checks nothing), `decode` (ingest.transforms.decode, Lakeline's strict one-pass record decoder: what a
batch pays to type, check and classify every record).
No broker, S3 or table: this isolates the per-record CPU cost that the latency benchmark sees inside a batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.common import document, orders_pipeline, write


def _frame(spark, count: int, seed: int, corpus: str):
    from infra.paths import REPO_ROOT
    from ingest.config import load_pipeline
    from ingest.produce import ProduceResult, sample_events

    config = orders_pipeline("bench_decode", "delta", "bench_decode") if corpus == "orders" else \
        load_pipeline(REPO_ROOT / "conf" / "examples" / "webhooks_delta.yaml")
    rows = [(bytes(p),) for _, p in sample_events(config, count, 0.01, seed, ProduceResult("bench_decode", count),
                                                  corpus)]
    frame = spark.createDataFrame(rows, "_raw binary").repartition(2).cache()
    frame.count()
    return config, frame


def _timed(frame, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=400_000, help="payloads (default 400000)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per variant, after one warm-up run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--corpus", choices=["orders", "webhooks"], default="orders",
                        help="orders: flat ~200-byte events; webhooks: nested events (structs, arrays of structs, "
                             "maps, decimals, epoch and ISO timestamps), conf/examples/webhooks_delta.yaml")
    parser.add_argument("--no-write", action="store_true", help="print only; write nothing under bench/results/")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ingest.settings import load_settings
    from ingest.spark import spark_jars
    from ingest.transforms import decode, record_struct

    spark = (SparkSession.builder.master("local[2]").appName("bench-decode")
             .config("spark.driver.extraClassPath", os.pathsep.join(spark_jars(load_settings())))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"[bench.decode] building {args.count} payloads", flush=True)
    config, frame = _frame(spark, args.count, args.seed, args.corpus)
    schema = config.record_schema
    variants = {
        "scan": frame.select(F.length("_raw")),
        "typed parse": frame.select(F.from_json(F.col("_raw").cast("string"), record_struct(schema)).alias("t"))
        .select("t.*"),
        "decode": decode(frame, schema),
    }
    results = []
    for name, variant in variants.items():
        _timed(variant, 1)  # warm-up: code generation and JIT
        seconds = _timed(variant, args.runs)
        median = statistics.median(seconds)
        results.append({"variant": name, "median_s": round(median, 3), "runs_s": [round(s, 3) for s in seconds],
                        "us_per_record": round(median / args.count * 1e6, 2)})
        print(f"[bench.decode] {name:12s} median {median:6.3f} s  {median / args.count * 1e6:6.2f} µs/record",
              flush=True)
    spark.stop()
    if not args.no_write:
        doc = document("decode" if args.corpus == "orders" else "decode-nested", argv, results, module="decode",
                       count=args.count, runs=args.runs, corpus=args.corpus)
        rows = "\n".join(f"| {r['variant']} | {r['median_s']} | {r['us_per_record']} |" for r in results)
        write(doc, "Decode cost", "| variant | median s | µs/record |\n| --- | ---: | ---: |\n" + rows,
              stack="Spark local[2] only, payloads cached in memory")


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    main()
