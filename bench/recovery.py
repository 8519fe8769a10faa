"""Recovery under steady load: kill -9 the system mid-load, restart it at once; seconds from the kill to the first
new Delta commit, and duplicates/missing once drained. Lakeline vs plain Spark vs the delta-rs consumer, one at a
time. Prints a table and writes bench/results/recovery-<date>.{json,md}.

    .venv/bin/python -m bench.recovery --rate 2000 --seconds 60 --kill-at 20 [--standby]

Recovery includes everything a real restart pays: a new process, the JVM and Spark session for the Spark-based
systems, the start-up plan (Lakeline reads the table's commit records), and the first batch. With --standby,
Lakeline is measured once more with a warm standby driver (`lakeline ingest --standby`, started beside it before
the load) that takes over the moment the killed driver's lock is released, instead of a restart.
"""

from __future__ import annotations

import argparse
import uuid

from bench.common import document, write
from bench.latency import DELTA_SYSTEMS, measure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(DELTA_SYSTEMS), choices=DELTA_SYSTEMS)
    parser.add_argument("--rate", type=int, default=2000, help="msg/s of the steady load (default 2000)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds of load (default 60)")
    parser.add_argument("--kill-at", type=float, default=20, help="seconds into the load to kill -9 (default 20)")
    parser.add_argument("--standby", action="store_true",
                        help="also measure Lakeline with a warm standby driver (lakeline ingest --standby) that "
                             "takes over instead of a restart")
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
    if args.standby and "lakeline" in args.systems:
        results.append(measure("lakeline", args.rate, 0, args.seconds, settings, run_id, kill_at=args.kill_at,
                               standby=True))

    doc = document("recovery", argv, results)
    table = ["| system | rate msg/s | killed at s | recovery s (kill → first new commit) | duplicates | missing | "
             "exact |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    table += [f"| {r['system']} | {r['rate']:,} | {r['kill_at_s']:.0f} | {r['recovery_s']} | {r['duplicates']:,} | "
              f"{r['missing']:,} | {r['exact']} |" for r in results]
    print("\n".join(table))
    if not args.no_write:
        write(doc, "Recovery after kill -9 under load", "One system at a time.\n\n" + "\n".join(table))
    lakeline = [r for r in results if r["system"].startswith("lakeline")]
    return 0 if all(r["exact"] for r in lakeline) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
