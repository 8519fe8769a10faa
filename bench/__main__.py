"""One entry point for the benchmarks: starts the embedded stack and runs each measurement in turn.

    .venv/bin/python -m bench                 # the reference run: writes bench/results/*-<date>.{json,md,png}
    .venv/bin/python -m bench --quick         # small sizes, nothing written: proves every benchmark works
    .venv/bin/python -m bench --only latency  # some of: drain, drain_peers, latency, compaction, recovery

Each benchmark is also a module of its own (python -m bench.drain / drain_peers / latency / compaction /
recovery, each with --help); this runs them with the reference arguments below, or the quick ones.
"""

from __future__ import annotations

import argparse
import time

from bench import compaction, drain, drain_peers, latency, recovery

REFERENCE = {
    "drain": ["--count", "1000000"],
    "drain_peers": ["--count", "1000000"],
    "latency": ["--rates", "20", "5000", "20000", "--warmup", "20", "--seconds", "60"],
    "compaction": ["--events", "500000", "--files", "10000", "--runs", "2", "--warmup", "0"],
    "recovery": ["--rate", "2000", "--seconds", "60", "--kill-at", "20", "--standby"],
}
QUICK = {
    "drain": ["--count", "5000", "--no-write"],
    "drain_peers": ["--count", "3000", "--no-write"],
    "latency": ["--rates", "300", "--warmup", "3", "--seconds", "6", "--no-write"],
    "compaction": ["--events", "3000", "--files", "60", "--runs", "1", "--warmup", "0", "--no-write"],
    "recovery": ["--systems", "lakeline", "delta-rs", "--standby", "--rate", "200", "--seconds", "20", "--kill-at", "6",
                 "--no-write"],
}
MODULES = {"drain": drain, "drain_peers": drain_peers, "latency": latency, "compaction": compaction,
           "recovery": recovery}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and no results written (the test suite's "
                                                             "proof that each benchmark runs)")
    parser.add_argument("--only", nargs="+", choices=list(MODULES), default=list(MODULES))
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else REFERENCE
    codes = {}
    for name in args.only:
        started = time.monotonic()
        print(f"\n######## bench.{name} {' '.join(plan[name])}", flush=True)
        codes[name] = MODULES[name].main(plan[name])
        print(f"######## bench.{name}: exit {codes[name]} after {time.monotonic() - started:.0f}s", flush=True)
    failed = [name for name, code in codes.items() if code != 0]
    print("\nall benchmarks exact" if not failed else f"\nnot exact or failed: {', '.join(failed)}")
    return 3 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
