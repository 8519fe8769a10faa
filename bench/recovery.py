"""Recovery under steady load: kill -9 the system mid-load, restart it at once; seconds from the kill to the first
new Delta commit, and duplicates/missing once drained. Lakeline vs plain Spark vs the delta-rs consumer, one at a
time. Prints a table and writes bench/results/recovery-<date>.{json,md}.

    .venv/bin/python -m bench.recovery --rate 2000 --seconds 60 --kill-at 20

Recovery includes everything a real restart pays: a new process, the JVM and Spark session for the Spark-based
systems, the start-up plan (Lakeline reads the table's commit records), and the first batch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from datetime import datetime, UTC

from bench.drain import RESULTS, machine
from bench.latency import SYSTEMS, measure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--rate", type=int, default=2000, help="msg/s of the steady load (default 2000)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds of load (default 60)")
    parser.add_argument("--kill-at", type=float, default=20, help="seconds into the load to kill -9 (default 20)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)
    if not 0 < args.kill_at < args.seconds:
        parser.error("--kill-at must be inside the load (0 < kill-at < seconds)")

    from infra import stack
    from ingest.settings import load_settings

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    results = [measure(system, args.rate, 0, args.seconds, settings, run_id, kill_at=args.kill_at)
               for system in args.systems]

    command = "python -m bench.recovery " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"benchmark": "recovery", "at": datetime.now(UTC).isoformat(timespec="seconds"),
           "command": command.strip(), "machine": machine(), "load_average_at_end": os.getloadavg(),
           "results": results}
    table = ["| system | rate msg/s | killed at s | recovery s (kill → first new commit) | duplicates | missing | "
             "exact |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    table += [f"| {r['system']} | {r['rate']:,} | {r['kill_at_s']:.0f} | {r['recovery_s']} | {r['duplicates']:,} | "
              f"{r['missing']:,} | {r['exact']} |" for r in results]
    print("\n".join(table))
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stem = RESULTS / f"recovery-{datetime.now(UTC):%Y-%m-%d}"
        stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
        stem.with_suffix(".md").write_text(
            f"# Recovery after kill -9 under load, {doc['at']}\n\nCommand: `{doc['command']}` (local stack: KRaft "
            f"broker, moto S3, Spark local[2]; all on this machine; one system at a time)\n\nMachine: "
            f"{doc['machine']}\n\n" + "\n".join(table) + "\n")
        print(f"written {stem}.json and .md")
    lakeline = [r for r in results if r["system"] == "lakeline"]
    return 0 if all(r["exact"] for r in lakeline) else 3


if __name__ == "__main__":
    raise SystemExit(main())
