"""One entry point for the benchmarks: starts the embedded stack and runs each measurement in turn.

    .venv/bin/python -m bench                 # the reference run: writes bench/results/*-<date>.{json,md,png}
    .venv/bin/python -m bench --quick         # small sizes, nothing written: proves every benchmark works
    .venv/bin/python -m bench --only latency  # some of the benchmarks: see --help
    .venv/bin/python -m bench --tag full      # results named *-<date>-full, so a second run that day keeps the first

Each benchmark is also a module of its own (python -m bench.drain / drain_peers / latency / compaction /
recovery / multi_pipeline / query / evolution / routing / steady, each with --help); this runs them with the
reference arguments below, or the quick ones. latency_iceberg is bench.latency into Iceberg (with the Flink peer
once `bash infra/flink.sh` installed it), drain_kinesis is bench.drain from Kinesis.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime

from bench import (compaction, drain, drain_peers, evolution, latency, multi_pipeline, query, recovery, routing, steady,
                   summary)
from bench.common import RESULTS, result_name

ICEBERG_SYSTEMS = ["--systems", "lakeline-iceberg", "spark-iceberg"]  # and flink-iceberg once installed
REFERENCE = {
    "drain": ["--count", "1000000"],
    "drain_peers": ["--count", "1000000"],
    "latency": ["--rates", "20", "5000", "20000", "--warmup", "20", "--seconds", "60"],
    "latency_iceberg": [*ICEBERG_SYSTEMS, "--rates", "20", "5000", "--warmup", "20", "--seconds", "60"],
    "compaction": ["--events", "500000", "--files", "10000", "--runs", "2", "--warmup", "0"],
    "recovery": ["--rate", "2000", "--seconds", "60", "--kill-at", "20", "--standby"],
    "drain_kinesis": ["--source", "kinesis", "--count", "200000", "--shards", "4", "--max-offsets-per-trigger",
                      "50000"],
    "multi_pipeline": ["--counts", "1", "4", "8", "--rate", "50", "--warmup", "20", "--seconds", "60"],
    "query": ["--rows", "1000000"],
    "evolution": ["--fields", "10", "100", "500"],
    "routing": ["--count", "20000", "--kinds", "58", "--max-offsets", "10000"],
    "steady": ["--rate", "5000", "--minutes", "30", "--peers", "spark-delta", "delta-rs", "spark-iceberg"],
}
QUICK = {
    "drain": ["--count", "5000", "--no-write"],
    "drain_peers": ["--count", "3000", "--no-write"],
    "latency": ["--rates", "300", "--warmup", "3", "--seconds", "6", "--no-write"],
    "latency_iceberg": [*ICEBERG_SYSTEMS, "--rates", "300", "--warmup", "3", "--seconds", "6", "--no-write"],
    "compaction": ["--events", "3000", "--files", "60", "--runs", "1", "--warmup", "0", "--no-write"],
    "recovery": ["--systems", "lakeline", "delta-rs", "--standby", "--rate", "200", "--seconds", "20", "--kill-at", "6",
                 "--no-write"],
    "drain_kinesis": ["--source", "kinesis", "--count", "3000", "--shards", "2", "--max-offsets-per-trigger", "1000",
                      "--no-write"],
    "multi_pipeline": ["--counts", "2", "--rate", "20", "--warmup", "3", "--seconds", "6", "--no-write"],
    "query": ["--rows", "2000", "--runs", "1", "--no-write"],
    "evolution": ["--fields", "10", "--records", "40", "--no-events", "--formats", "delta", "--no-write"],
    "routing": ["--count", "2000", "--kinds", "8", "--max-offsets", "1000", "--no-write"],
    "steady": ["--quick", "--no-write"],
}
MODULES = {"drain": drain, "drain_peers": drain_peers, "latency": latency, "latency_iceberg": latency,
           "compaction": compaction, "recovery": recovery, "drain_kinesis": drain, "multi_pipeline": multi_pipeline,
           "query": query, "evolution": evolution, "routing": routing, "steady": steady}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and no results written (the test suite's "
                                                             "proof that each benchmark runs)")
    parser.add_argument("--only", nargs="+", choices=list(MODULES), default=list(MODULES))
    parser.add_argument("--tag", help="suffix for the results' names (letters, digits, '-'): <benchmark>-<date>-TAG")
    args = parser.parse_args(argv)
    if args.tag is not None:
        if not args.tag.replace("-", "").isalnum():
            parser.error(f"--tag {args.tag!r}: use letters, digits and '-' only")
        os.environ["LAKELINE_BENCH_TAG"] = args.tag
    plan = QUICK if args.quick else REFERENCE
    run_started = time.time()
    codes = {}
    for name in args.only:
        started = time.monotonic()
        arguments = plan[name]
        if name == "latency_iceberg" and latency.FLINK_PYTHON.exists():
            arguments = [*ICEBERG_SYSTEMS, "flink-iceberg", *arguments[len(ICEBERG_SYSTEMS):]]
        print(f"\n######## bench.{name} {' '.join(arguments)}", flush=True)
        codes[name] = MODULES[name].main(arguments)
        print(f"######## bench.{name}: exit {codes[name]} after {time.monotonic() - started:.0f}s", flush=True)
    failed = [name for name, code in codes.items() if code != 0]
    if not args.quick:
        written = _written_since(run_started, args.only)
        if written:
            print("\n" + summary.render(written))
            name = result_name({"benchmark": "summary", "at": datetime.now(UTC).isoformat()})
            print(f"written {summary.write_summary(written, name)}")
    print("\nall benchmarks exact" if not failed else f"\nnot exact or failed: {', '.join(failed)}")
    return 3 if failed else 0


def _written_since(started: float, modules: list[str]) -> dict[str, dict]:
    """The newest results document each benchmark of this run wrote (by file time), keyed by benchmark name."""
    docs = {}
    for module in modules:
        name = module.replace("_", "-")
        # <name>-<date>[-tag]: the date's leading 2 keeps `drain` from matching drain-peers-... or drain-kinesis-...
        fresh = [p for p in RESULTS.glob(f"{name}-2*.json") if p.stat().st_mtime >= started]
        if fresh:
            docs.update(summary.load([max(fresh, key=lambda p: p.stat().st_mtime).stem]))
    return docs


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
