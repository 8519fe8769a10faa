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

PEERS = ("spark-delta", "delta-rs")
TRICKLE_RATE = 100  # msg/s: at or below it each batch holds a few records, so the commit gap is the fixed cost
TARGETS = {"drain": ">= 150,000 rec/s", "latency_p50": "<= 1.0 s", "latency_p99": "<= 2.5 s",
           "gap": "<= 0.3 s", "speedup": ">= 5x", "recovery": "<= 20 s"}


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "-"


def _compare(label: str, by: dict[str, dict], key: str, fmt: str, target: str, ours: str = "lakeline") -> tuple:
    """One row: `ours` and each peer's `key` formatted with `fmt`, then Lakeline / peer ratios, then the target."""
    value = by[ours][key]
    return (label, format(value, fmt), *(format(by[p][key], fmt) if p in by else "-" for p in PEERS),
            *(_ratio(value, by[p][key]) if p in by else "-" for p in PEERS), target)


def _rows(docs: dict[str, dict]) -> list[tuple[str, ...]]:
    """(measure, Lakeline, plain Spark, delta-rs, Lakeline / plain Spark, Lakeline / delta-rs, target) rows."""
    rows: list[tuple[str, ...]] = []
    if doc := docs.get("drain-peers"):
        by = {r["system"]: r for r in doc["results"]}
        if "lakeline" in by:
            rows.append(_compare("drain, records/s (1M clean, Delta)", by, "records_per_s", ",", TARGETS["drain"]))
            rows.append(_compare("drain, CPU s per 1M (Delta)", by, "cpu_s_per_million", "", ""))
        if "lakeline-iceberg" in by:  # like for like: the plain Spark column holds plain Spark's Iceberg sink
            iceberg = {"lakeline": by["lakeline-iceberg"],
                       **({"spark-delta": by["spark-iceberg"]} if "spark-iceberg" in by else {})}
            rows.append(_compare("drain, records/s (1M clean, Iceberg)", iceberg, "records_per_s", ",",
                                 TARGETS["drain"]))
            rows.append(_compare("drain, CPU s per 1M (Iceberg)", iceberg, "cpu_s_per_million", "", ""))
    if doc := docs.get("drain"):
        for r in doc["results"]:
            rows.append((f"drain with 1% bad, records/s ({r['format']}, Lakeline only)", f"{r['records_per_s']:,}",
                         "-", "-", "-", "-", TARGETS["drain"]))
    for name, doc in docs.items():
        if doc.get("benchmark", name) != "latency":
            continue
        warm = "" if name == "latency" else f", after {doc['warmup_s']:g} s warm-up"
        rates = sorted({r["rate"] for r in doc["results"]})
        for rate in rates:
            by = {r["system"]: r for r in doc["results"] if r["rate"] == rate}
            if "lakeline" not in by:
                continue
            for key, label in (("latency_p50", "p50"), ("latency_p99", "p99")):
                rows.append(_compare(f"latency {label} s at {rate:,} msg/s{warm}", by, key, ".2f",
                                     TARGETS[key] if rate == 20000 else ""))
            if rate == rates[0] and rate <= TRICKLE_RATE:  # only a trickle's commit gap is the fixed cost
                rows.append(_compare(f"commit gap s at {rate:,} msg/s (fixed cost per batch){warm}", by,
                                     "median_commit_gap_s", ".2f", TARGETS["gap"]))
    if doc := docs.get("recovery"):
        by = {r["system"]: r for r in doc["results"]}
        for system in ("lakeline", "lakeline (warm standby)"):
            if system in by:
                rows.append(_compare(f"recovery s after kill -9 ({system})", by, "recovery_s", ".1f",
                                     TARGETS["recovery"], ours=system))
    if doc := docs.get("compaction"):
        for r in doc["results"]:
            rows.append((f"query speedup after compaction ({r['format']}, Spark / DuckDB)",
                         f"{r['spark_speedup']}x / {r['duckdb_speedup']}x", "-", "-", "-", "-", TARGETS["speedup"]))
    return rows


def exactness(docs: dict[str, dict]) -> str:
    """Whether every row of every run was exact (delta-rs after a kill is at-least-once: duplicates allowed)."""
    problems = [f"{name}: {r.get('system', r.get('format'))}" for name, doc in docs.items() for r in doc["results"]
                if "exact" in r and not r["exact"] and not (name == "recovery" and r.get("system") == "delta-rs")]
    return "every system exact in every run" if not problems else "NOT exact: " + ", ".join(problems)


def render(docs: dict[str, dict]) -> str:
    head = ("| measure | Lakeline | plain Spark | delta-rs | Lakeline / plain Spark | Lakeline / delta-rs | "
            "target (Lakeline) |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(docs)]
    sources = "\n".join(f"- {name}: `{doc['command']}` at {doc['at']}" for name, doc in docs.items())
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
        if name in docs and name == "latency":  # a second latency run, e.g. a steady-state one: named by warm-up
            name = f"latency ({doc['warmup_s']:g} s warm-up)"
        if name in docs:
            raise SystemExit(f"bench.summary: two {name} results ({stem} and an earlier one); give one of each")
        docs[name] = doc
    return docs


def write_summary(docs: dict[str, dict], name: str) -> Path:
    machine = next(iter(docs.values()))["machine"] if docs else {}
    path = RESULTS / f"{name}.md"
    path.write_text(f"# Benchmark summary: Lakeline vs plain Spark vs delta-rs\n\nMachine: {machine}\n\n"
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
