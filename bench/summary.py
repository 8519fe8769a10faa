"""One table across the benchmarks of a run: Lakeline against its peers and against the issue's targets.

Built from the results documents the benchmarks wrote (bench/results/*.json), so it can also be rebuilt later:

    .venv/bin/python -m bench.summary latency-2026-11-23-full drain-peers-2026-11-23-full ...

One results document per benchmark, except latency: a second latency run (e.g. `--warmup 120`, the steady state)
gets rows of its own, labelled with its warm-up.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.common import RESULTS

PEERS = ("spark-delta", "delta-rs", "flink-iceberg")
# An Iceberg row compares like for like: Lakeline into Iceberg, plain Spark's Iceberg sink, Flink's Iceberg sink.
ICEBERG_COLUMNS = {"lakeline-iceberg": "lakeline", "spark-iceberg": "spark-delta", "flink-iceberg": "flink-iceberg"}
TRICKLE_RATE = 100  # msg/s: at or below it each batch holds a few records, so the commit gap is the fixed cost
# Issue 21's targets (ratios within one run; never asserted in tests).
TARGETS = {"drain": ">= 1.2x plain Spark", "drain_cpu": "<= 1.0x plain Spark", "drain_iceberg": "ahead of Flink",
           "speedup": ">= 5x", "recovery": "<= 20 s", "kinesis": ">= 10,000 rec/s", "query": "< 3 s, < 0.1x Spark",
           ("latency_p50", 20): "<= 1.5x delta-rs", ("latency_p99", 20): "<= 2.0x delta-rs",
           ("latency_p50", 5000): "<= 2.0x delta-rs", ("latency_p99", 5000): "<= 2.5x delta-rs",
           ("latency_p50", 20000, "steady"): "<= 3.0x delta-rs", ("latency_p50", "Iceberg"): "ahead of Flink"}


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "-"


def _compare(label: str, by: dict[str, dict], key: str, fmt: str, target: str, ours: str = "lakeline") -> tuple:
    """One row: `ours` and each peer's `key` formatted with `fmt`, then Lakeline / peer ratios, then the target."""
    value = by[ours][key]
    return (label, format(value, fmt), *(format(by[p][key], fmt) if p in by else "-" for p in PEERS),
            *(_ratio(value, by[p][key]) if p in by else "-" for p in PEERS), target)


def _iceberg(by: dict[str, dict]) -> dict[str, dict]:
    """An Iceberg run's systems under the columns they are compared in (ICEBERG_COLUMNS)."""
    return {column: by[system] for system, column in ICEBERG_COLUMNS.items() if system in by}


def _latency_rows(rows: list, doc: dict, warm: str, fmt: str) -> None:
    rates = sorted({r["rate"] for r in doc["results"]})
    for rate in rates:
        by = {r["system"]: r for r in doc["results"] if r["rate"] == rate}
        by = _iceberg(by) if fmt == "Iceberg" else by
        if "lakeline" not in by:
            continue
        into = ", Iceberg" if fmt == "Iceberg" else ""
        for key, label in (("latency_p50", "p50"), ("latency_p99", "p99")):
            target = (TARGETS.get((key, "Iceberg"), "") if fmt == "Iceberg" else
                      TARGETS.get((key, rate, "steady"), "") if warm else TARGETS.get((key, rate), ""))
            rows.append(_compare(f"latency {label} s at {rate:,} msg/s{into}{warm}", by, key, ".2f", target))
        if rate == rates[0] and rate <= TRICKLE_RATE:  # only a trickle's commit gap is the fixed cost
            rows.append(_compare(f"commit gap s at {rate:,} msg/s (fixed cost per batch){into}{warm}", by,
                                 "median_commit_gap_s", ".2f", ""))


def _rows(docs: dict[str, dict]) -> list[tuple[str, ...]]:
    """(measure, Lakeline, plain Spark, delta-rs, Flink, Lakeline / each peer, target) rows."""
    rows: list[tuple[str, ...]] = []
    if doc := docs.get("drain-peers"):
        by = {r["system"]: r for r in doc["results"]}
        delta = {system: r for system, r in by.items() if system not in ICEBERG_COLUMNS}
        if "lakeline" in delta:
            rows.append(_compare("drain, records/s (1M clean, Delta)", delta, "records_per_s", ",", TARGETS["drain"]))
            rows.append(_compare("drain, CPU s per 1M (Delta)", delta, "cpu_s_per_million", "", TARGETS["drain_cpu"]))
        if "lakeline-iceberg" in by:
            iceberg = _iceberg(by)
            rows.append(_compare("drain, records/s (1M clean, Iceberg)", iceberg, "records_per_s", ",",
                                 TARGETS["drain_iceberg"]))
            rows.append(_compare("drain, CPU s per 1M (Iceberg)", iceberg, "cpu_s_per_million", "", ""))
    if doc := docs.get("drain"):
        for r in doc["results"]:
            rows.append((f"drain with 1% bad, records/s ({r['format']}, Lakeline only)", f"{r['records_per_s']:,}",
                         *["-"] * (2 * len(PEERS)), ""))
    if doc := docs.get("drain-kinesis"):
        for r in doc["results"]:
            rows.append((f"Kinesis full pipeline, 1% bad, records/s ({r['format']}, {doc.get('shards', '?')} shards, "
                         f"Lakeline only)", f"{r['records_per_s']:,}", *["-"] * (2 * len(PEERS)), TARGETS["kinesis"]))
    for name, doc in docs.items():
        benchmark = doc.get("benchmark", name)
        if benchmark in ("latency", "latency-iceberg"):
            warm = "" if name == benchmark else f", after {doc['warmup_s']:g} s warm-up"
            _latency_rows(rows, doc, warm, "Iceberg" if benchmark == "latency-iceberg" else "Delta")
    if doc := docs.get("recovery"):
        by = {r["system"]: r for r in doc["results"]}
        for system in ("lakeline", "lakeline (warm standby)"):
            if system in by:
                rows.append(_compare(f"recovery s after kill -9 ({system})", by, "recovery_s", ".1f",
                                     TARGETS["recovery"], ours=system))
    if doc := docs.get("compaction"):
        for r in doc["results"]:
            rows.append((f"query speedup after compaction ({r['format']}, Spark / DuckDB)",
                         f"{r['spark_speedup']}x / {r['duckdb_speedup']}x", *["-"] * (2 * len(PEERS)),
                         TARGETS["speedup"]))
    if doc := docs.get("query"):
        for r in doc["results"]:
            if "query" in r and "spark" in r:
                rows.append((f"query answer, `lakeline query` cold / fresh Spark session ({r['format']}, "
                             f"{r['question'].replace('_', ' ')})", f"{r['query']} s / {r['spark']} s",
                             *["-"] * (2 * len(PEERS)), TARGETS["query"]))
    return rows


def exactness(docs: dict[str, dict]) -> str:
    """Whether every row of every run was exact (delta-rs after a kill is at-least-once: duplicates allowed)."""
    problems = [f"{name}: {r.get('system', r.get('format'))}" for name, doc in docs.items() for r in doc["results"]
                if "exact" in r and not r["exact"] and not (name == "recovery" and r.get("system") == "delta-rs")]
    return "every system exact in every run" if not problems else "NOT exact: " + ", ".join(problems)


def render(docs: dict[str, dict]) -> str:
    head = ("| measure | Lakeline | plain Spark | delta-rs | Flink | Lakeline / plain Spark | Lakeline / delta-rs | "
            "Lakeline / Flink | target (Lakeline) |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(docs)]
    machines = {json.dumps(doc.get("machine", {}), sort_keys=True) for doc in docs.values()}
    on = (lambda doc: f" on {doc.get('machine', {}).get('cpu_model', '?')}") if len(machines) > 1 else (lambda doc: "")
    sources = "\n".join(f"- {name}: `{doc['command']}` at {doc['at']}{on(doc)}" for name, doc in docs.items())
    return "\n".join(lines) + f"\n\n{exactness(docs).capitalize()}. From:\n{sources}\n"


def load(stems: list[str]) -> dict[str, dict]:
    """Results documents by benchmark name, from stems such as `latency-2026-11-23-full`."""
    docs = {}
    for stem in stems:
        path = RESULTS / f"{stem}.json"
        if not path.exists():
            raise SystemExit(f"bench.summary: no results file {path}")
        doc = json.loads(path.read_text())
        name = doc["benchmark"]
        if name in docs and name.startswith("latency"):  # a second latency run, e.g. a steady-state one
            name = f"{name} ({doc['warmup_s']:g} s warm-up)"
        if name in docs:
            raise SystemExit(f"bench.summary: two {name} results ({stem} and an earlier one); give one of each")
        docs[name] = doc
    return docs


def write_summary(docs: dict[str, dict], name: str) -> Path:
    machines = {json.dumps(doc.get("machine", {}), sort_keys=True) for doc in docs.values()}
    machine = (next(iter(docs.values()))["machine"] if len(machines) == 1 else
               "the runs were made on more than one machine (each source says which); ratios are within one run")
    path = RESULTS / f"{name}.md"
    path.write_text(f"# Benchmark summary: Lakeline vs plain Spark, delta-rs and Flink\n\nMachine: {machine}\n\n"
                    f"Ratios are Lakeline / peer: below 1x is better for latency, gap, CPU and recovery, above 1x "
                    f"for records/s.\n\n{render(docs)}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="+", help="results file names without .json, e.g. latency-2026-11-23")
    parser.add_argument("--write", metavar="NAME", help="also write bench/results/NAME.md")
    args = parser.parse_args(argv)
    docs = load(args.stems)
    print(render(docs))
    if args.write:
        print(f"written {write_summary(docs, args.write)}")
    return 0


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
