"""Small files: a fixed analyst query on a table of >= 10,000 small files, before and after `compact`, Delta and
Iceberg, on the embedded stack. Prints a table and writes bench/results/compaction-<date>.{json,md,png}.

    .venv/bin/python -m bench.compaction --events 500000 --files 10000

How the table is made: N sample events go through the real pipeline (Kafka -> Lakeline -> table, with its commit
records), then one overwrite rewrites the same rows into >= --files small files, the layout a stream with short
triggers leaves after a few hours (making 10,000 files one micro-batch at a time would take hours here). The rows
do not change: reconcile against the topic is exact before and after compaction.

Query time = median of --runs runs after --warmup untimed runs, for Spark SQL (in the warm session) and for DuckDB
over a delta-rs / pyiceberg scan (each run opens the table afresh, as a new analyst session does). Compaction MB/s =
bytes rewritten / wall time of `compact` (health check included).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import uuid
from datetime import datetime, UTC
from pathlib import Path

from bench.common import document, orders_pipeline, result_name, write
from ingest.formats import FORMAT_NAMES

# Full scan, per day and country: order count, revenue in integer cents (exact whatever the file order), customers.
QUERY = ("SELECT CAST(event_time AS DATE) AS day, country, count(*) AS orders, "
         "sum(CAST(round(amount * 100) AS BIGINT)) AS cents, count(DISTINCT customer_id) AS customers FROM t "
         "GROUP BY day, country ORDER BY day, country")


def _timed(action, runs: int, warmup: int) -> tuple[float, list]:
    """(median seconds of `runs` runs after `warmup` untimed runs, the last answer)."""
    answer = None
    for _ in range(warmup):
        answer = action()
    times = []
    for _ in range(runs):
        started = time.monotonic()
        answer = action()
        times.append(time.monotonic() - started)
    return statistics.median(times), answer


def _normalise(rows) -> list[tuple]:
    return [tuple(str(v) if isinstance(v, datetime) or hasattr(v, "isoformat") else v for v in row) for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="sample events (default 500,000)")
    parser.add_argument("--files", type=int, default=10_000, help="small files to make (default 10,000)")
    parser.add_argument("--formats", nargs="+", default=list(FORMAT_NAMES), choices=FORMAT_NAMES)
    parser.add_argument("--runs", type=int, default=5, help="timed query runs per engine (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before the timed ones (default 1)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.analyst import duckdb_query
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import reconcile
    from ingest.settings import load_settings
    from ingest.spark import build_spark
    from maintenance.compaction import compact
    from maintenance.health import collect_health, plot_sizes
    from maintenance.policy import MaintainedTable, TablePolicy

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    topic = f"bench_compaction_{run_id}"

    def config(fmt: str):
        return orders_pipeline(f"bench_compaction_{fmt}_{run_id}", fmt, topic)

    print(f"producing {args.events:,} events to {topic} ...", flush=True)
    produce(config("delta"), settings, args.events, bad_ratio=0.0, seed=7)
    spark = build_spark(settings, "lakeline-bench-compaction")
    results, plots = [], []
    for fmt in args.formats:
        cfg = config(fmt)
        table = MaintainedTable(Path(f"<bench {fmt}>"), TablePolicy.model_validate({
            "table": cfg.sink.table, "pipeline": "<bench>",
            "compaction": {"target_file_size": "128MB", "min_small_files": 2, "max_bytes_per_run": "100GB"}}), cfg)
        print(f"\n== {fmt}: ingest {args.events:,} events through the pipeline", flush=True)
        Pipeline(cfg, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
        ingested = collect_health(spark, table, settings)
        _fragment(spark, cfg, settings, args.files, len(ingested.partitions))
        before = collect_health(spark, table, settings)
        print(f"   {before.files:,} files in {len(before.partitions)} partitions, "
              f"{before.bytes / 1024 ** 2:.1f} MB, median file {statistics.median(before.file_sizes) / 1024:.1f} KB",
              flush=True)
        spark_before, spark_answer = _timed(lambda c=cfg: _spark_query(spark, c, settings), args.runs, args.warmup)
        duck_before, duck_answer = _timed(lambda c=cfg: duckdb_query(c, settings, QUERY), args.runs, args.warmup)
        print(f"   query before: Spark {spark_before:.2f}s, DuckDB {duck_before:.2f}s", flush=True)

        result = compact(spark, table, settings, datetime.now(UTC), include_hot=True)
        print("   " + result.summary(), flush=True)
        after = collect_health(spark, table, settings)
        spark_after, spark_answer_after = _timed(lambda c=cfg: _spark_query(spark, c, settings), args.runs, args.warmup)
        duck_after, duck_answer_after = _timed(lambda c=cfg: duckdb_query(c, settings, QUERY), args.runs, args.warmup)
        print(f"   query after:  Spark {spark_after:.2f}s, DuckDB {duck_after:.2f}s", flush=True)
        report = reconcile(cfg, settings, spark)
        same = (_normalise(spark_answer) == _normalise(spark_answer_after) == _normalise(duck_answer)
                == _normalise(duck_answer_after))
        results.append({
            "format": fmt, "rows": report.rows, "partitions": len(before.partitions),
            "files_before": before.files, "files_after": after.files,
            "mb": round(before.bytes / 1024 ** 2, 1),
            "median_file_kb_before": round(statistics.median(before.file_sizes) / 1024, 1),
            "spark_query_s_before": round(spark_before, 3), "spark_query_s_after": round(spark_after, 3),
            "spark_speedup": round(spark_before / spark_after, 1),
            "duckdb_query_s_before": round(duck_before, 3), "duckdb_query_s_after": round(duck_after, 3),
            "duckdb_speedup": round(duck_before / duck_after, 1),
            "compaction_s": round(result.seconds, 1), "bytes_rewritten": result.bytes_rewritten,
            "compaction_mb_per_s": result.to_json()["mb_per_s"],
            "compaction_files_per_s": round(before.files / result.seconds, 1),
            "answers_identical": same, "exact": report.exact, "duplicates": report.duplicates,
            "missing": report.missing,
        })
        plots.append((fmt, before.file_sizes, after.file_sizes, table.policy.compaction.target_bytes))
        print(json.dumps(results[-1]), flush=True)
    spark.stop()

    doc = document("compaction", argv, results, events=args.events, query=QUERY, runs=args.runs,
                   warmup=args.warmup)
    table_md = ["| format | files before → after | data MB | Spark query s before → after (×) | "
                "DuckDB query s before → after (×) | compaction s | MB/s | files/s | answers identical | exact |",
                "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | --- | --- |"]
    table_md += [f"| {r['format']} | {r['files_before']:,} → {r['files_after']:,} | {r['mb']} | "
                 f"{r['spark_query_s_before']} → {r['spark_query_s_after']} ({r['spark_speedup']}×) | "
                 f"{r['duckdb_query_s_before']} → {r['duckdb_query_s_after']} ({r['duckdb_speedup']}×) | "
                 f"{r['compaction_s']} | {r['compaction_mb_per_s']} | {r['compaction_files_per_s']} | "
                 f"{r['answers_identical']} | {r['exact']} |"
                 for r in results]
    print("\n".join(table_md))
    if not args.no_write:
        stem = write(doc, "Small files and compaction",
                     f"Query (median of {args.runs} runs after {args.warmup} untimed):\n\n```sql\n{QUERY}\n```\n\n"
                     + "\n".join(table_md) + "\n\n"
                     + "".join(f"![{fmt} file sizes]({result_name(doc)}-{fmt}.png)\n"
                               for fmt, *_ in plots))
        for fmt, sizes_before, sizes_after, target in plots:
            plot_sizes(f"{stem}-{fmt}.png", [(f"{fmt} before", sizes_before), (f"{fmt} after", sizes_after)], target)
    return 0 if all(r["exact"] and r["answers_identical"] for r in results) else 3


def _spark_query(spark, config, settings) -> list[tuple]:
    from ingest.formats import tables_for

    tables_for(spark, config, settings)[0].read().createOrReplaceTempView("t")
    return [tuple(r) for r in spark.sql(QUERY).collect()]


def _fragment(spark, config, settings, files: int, partitions: int) -> None:
    """Rewrite the table's rows, unchanged, into about `files` small files (each task writes one file per day)."""
    from ingest.formats import tables_for

    tasks = max(1, math.ceil(files / max(1, partitions)))
    print(f"   fragmenting into ~{tasks * partitions:,} files ({tasks} tasks x {partitions} partitions) ...",
          flush=True)
    started = time.monotonic()
    table = tables_for(spark, config, settings)[0]
    table.maintenance.replace_rows(table.read().localCheckpoint().repartition(tasks))
    print(f"   fragmented in {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
