"""Where a table commit's time goes: N small appends through Lakeline's own table code (ingest.formats), timed one
by one, with the S3 requests of each (S3A's own counters) and what a cold reader then pays.

    .venv/bin/python -m bench.commit_cost --commits 100

Variants:
- `delta, Spark checkpoints`: a table with Delta's default `delta.checkpointInterval` (10), as an earlier release
  made it: Delta-Spark writes the log checkpoint inside every tenth commit.
- `delta, Lakeline checkpoints`: a table as Lakeline creates it now (interval 1000), whose log checkpoints the
  pipeline writes with delta-rs off the commit path (ingest.formats.delta_checkpoints).
- `iceberg, merge in commit`: an Iceberg table as an earlier release made it: Iceberg merges the manifests inside
  the commit that brings them to 100 (`commit.manifest.min-count-to-merge`).
- `iceberg`: the Iceberg table as Lakeline creates it now: no merge in the commit; the pipeline merges the manifests
  off the commit path (ingest.formats.iceberg_manifests), concurrently with the timed commits, as in a stream.
  metadata.json is rewritten whole at every commit. With `--iceberg-history N ...`, once per N: the table first gets
  N empty snapshots (one metadata write), so the commits show what a table that keeps N snapshots pays for each
  commit (why the pipeline bounds its history: ingest.formats.iceberg_history).

Rows are 10 dead-letter records per commit (the schema does not matter here: the cost per commit does). The cold
read is `count()` in the same JVM after Delta's log cache is cleared (Iceberg: the catalog's cached table
refreshed), median of 3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections import Counter
from datetime import UTC, datetime

from bench.common import document, orders_pipeline, write


def _counters(fs) -> dict[str, int]:
    stats = fs.getIOStatistics().counters()
    return {str(key): int(stats.get(key)) for key in stats.keySet().toArray()}


_REQUESTS = {"object_put_request": "PUT", "action_http_get_request": "GET", "action_http_head_request": "HEAD",
             "object_list_request": "LIST", "object_delete_request": "DELETE"}


def _requests(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {label: after.get(key, 0) - before.get(key, 0) for key, label in _REQUESTS.items()}


def _most_common(requests: list[dict[str, int]]) -> dict[str, int]:
    counted = Counter(tuple(sorted(r.items())) for r in requests)
    return dict(counted.most_common(1)[0][0])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PADDING = "x" * 600  # a filler snapshot then weighs in metadata.json what a pipeline's does (about 1.4 KB)


def _fill_history(table, snapshots: int, per_transaction: int = 1000) -> None:
    """Give an Iceberg table `snapshots` more (empty) snapshots, `per_transaction` to a metadata.json write (a
    transaction keeps every change it made in memory: one of 8,000 filled the driver's heap)."""
    java_table = table.java_table()  # measuring the table's own metadata
    for first in range(0, snapshots, per_transaction):
        java_table.refresh()
        transaction = java_table.newTransaction()
        for i in range(first, min(snapshots, first + per_transaction)):
            transaction.newFastAppend().set("bench.filler", f"{i}:{PADDING}").commit()
        transaction.commitTransaction()
    table.spark.sql(f"REFRESH TABLE {table.identifier}")


def _run(spark, settings, variant: str, commits: int, history: int = 0) -> dict:
    from ingest.commits import CommitRecord
    from ingest.formats import tables_for

    fmt = "iceberg" if variant.startswith("iceberg") else "delta"
    config = orders_pipeline(f"bench_commit_{fmt}_{uuid.uuid4().hex[:6]}", fmt, "bench_commit")
    _, table = tables_for(spark, config, settings)
    if variant == "delta-spark":
        # The table an earlier release made: Delta's default checkpoint interval, Spark checkpoints in the commit.
        spark.createDataFrame([], table.schema).write.format("delta").save(table.location)
    table.ensure()
    if fmt == "iceberg":
        table.snapshot_expiry = None  # measure the history as filled: the pipeline's expiry would trim it mid-run
    if variant == "iceberg-merge-in-commit":
        spark.sql(f"ALTER TABLE {table.identifier} SET TBLPROPERTIES ('commit.manifest-merge.enabled'='true')")
        spark.sql(f"ALTER TABLE {table.identifier} UNSET TBLPROPERTIES ('lakeline.manifests.max-count')")
        table.manifest_merge = None
    if history:
        _fill_history(table, history)
    rows = spark.createDataFrame([("bench_commit", 0, i, None, None, b"x" * 200, "malformed_json", "d",
                                   datetime.now(UTC)) for i in range(10)], table.schema).coalesce(1).cache()
    rows.count()
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j
    location = getattr(table, "location", None) or settings.warehouse
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(location), spark._jsc.hadoopConfiguration())  # noqa: SLF001
    seconds, requests = [], []
    for batch in range(commits):
        record = CommitRecord(config.pipeline, "bench", batch, {("bench_commit", 0): batch * 10},
                              {("bench_commit", 0): batch * 10 + 10}, None, None)
        before, start = _counters(fs), time.perf_counter()
        table.append(rows, record, may_be_replay=False)
        seconds.append(time.perf_counter() - start)
        requests.append(_requests(before, _counters(fs)))
    checkpointer = getattr(table, "log_checkpoints", None)
    if checkpointer is not None:
        checkpointer.wait(120)
    merger = getattr(table, "manifest_merge", None)
    if merger is not None:
        merger.wait(120)
    cold = []
    for _ in range(3):
        if fmt == "delta":
            jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        else:
            spark.sql(f"REFRESH TABLE {table.identifier}")
        start = time.perf_counter()
        count = table.read().count()
        cold.append(time.perf_counter() - start)
    assert count == commits * 10, f"{variant}: {count} rows, expected {commits * 10}"
    steady = seconds[1:]  # the first commit also warms the write path
    typical = statistics.median([sum(r.values()) for r in requests[1:]])
    slow = [i for i, s in enumerate(seconds) if i and s > 2 * statistics.median(steady)]
    result = {
        "variant": variant if not history else f"{variant} ({history} snapshots kept)", "commits": commits,
        "commit_median_s": round(statistics.median(steady), 3), "commit_p90_s": round(_percentile(steady, 0.9), 3),
        "commit_p99_s": round(_percentile(steady, 0.99), 3), "commit_max_s": round(max(steady), 3),
        "slow_commits": len(slow), "slow_commit_median_s": round(statistics.median([seconds[i] for i in slow]), 3)
        if slow else None,
        "requests_per_commit_median": typical,
        "requests_typical": _most_common(requests[1:] or requests),
        "requests_slow_commit": requests[slow[0]] if slow else None,
        "cold_read_median_s": round(statistics.median(cold), 3),
    }
    if checkpointer is not None:
        result["log_checkpoints"] = len(checkpointer.written)
        result["log_checkpoint_median_s"] = round(statistics.median(s for _, s in checkpointer.written), 3)
    if fmt == "iceberg":
        java_table = table.java_table()  # measuring the table's own metadata
        java_table.refresh()
        metadata = str(java_table.operations().current().metadataFileLocation())
        result["metadata_json_kb"] = round(fs.getFileStatus(jvm.org.apache.hadoop.fs.Path(metadata)).getLen() / 1024)
        result["manifests"] = int(java_table.currentSnapshot().allManifests(java_table.io()).size())
        result["snapshots"] = int(java_table.snapshots().size())
        if merger is not None:
            merged = [(replaced, seconds) for replaced, seconds in merger.done if replaced]
            result["manifest_merges"] = len(merged)
            result["manifest_merge_median_s"] = (round(statistics.median(s for _, s in merged), 3) if merged
                                                 else None)
    table.maintenance.drop()
    return result


def _merges(result: dict) -> str:
    if "manifest_merges" not in result:
        return "-"
    return f"{result['manifest_merge_median_s']} ({result['manifest_merges']}x)" if result["manifest_merges"] else "0x"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=100, help="appends per variant (default 100)")
    variants = ["delta-spark", "delta-lakeline", "iceberg-merge-in-commit", "iceberg"]
    parser.add_argument("--variants", nargs="+", default=variants, choices=variants)
    parser.add_argument("--iceberg-history", type=int, nargs="+", default=[0], metavar="N",
                        help="run the iceberg variant once per N, on a table that already keeps N snapshots "
                             "(default 0)")
    parser.add_argument("--no-write", action="store_true", help="print only; write nothing under bench/results/")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    stack.up()
    settings = load_settings()
    spark = build_spark(settings, "lakeline-bench-commit-cost")
    results = []
    runs = [(variant, history) for variant in args.variants
            for history in (args.iceberg_history if variant == "iceberg" else [0])]
    for variant, history in runs:
        print(f"== {variant}: {args.commits} commits{f' after {history} snapshots' if history else ''} ...",
              flush=True)
        results.append(_run(spark, settings, variant, args.commits, history))
        print("   " + json.dumps(results[-1]), flush=True)
    spark.stop()

    table = ["| variant | commit median s | p90 s | p99 s | max s | slow commits (> 2x median) | slow commit median s "
             "| requests per commit (median) | cold read s | log checkpoint s | manifest merge s (off the commit) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    table += [f"| {r['variant']} | {r['commit_median_s']} | {r['commit_p90_s']} | {r['commit_p99_s']} | "
              f"{r['commit_max_s']} | {r['slow_commits']} | {r['slow_commit_median_s'] or '-'} | "
              f"{r['requests_per_commit_median']} | {r['cold_read_median_s']} | "
              f"{r.get('log_checkpoint_median_s', '-')} | {_merges(r)} |" for r in results]
    detail = [f"- {r['variant']}: typical commit {r['requests_typical']}"
              + (f"; a slow commit {r['requests_slow_commit']}" if r["requests_slow_commit"] else "")
              + (f"; metadata.json {r['metadata_json_kb']} KB, {r['manifests']} manifests, {r['snapshots']} snapshots "
                 "at the end"
                 if "metadata_json_kb" in r else "") for r in results]
    print("\n".join(table + [""] + detail))
    if not args.no_write:
        doc = document("commit_cost", argv, results, commits=args.commits, iceberg_history=args.iceberg_history)
        write(doc, "Cost of a commit", "\n".join(table) + "\n\nS3 requests (S3A's counters):\n\n" + "\n".join(detail))


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    main()
