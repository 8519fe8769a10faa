"""`lakeline demo`: the main job end to end on the embedded defaults (lakeline.demo)."""

from __future__ import annotations

from ingest.errors import ExitCode


def register(sub) -> None:
    demo = sub.add_parser("demo", help="the main job end to end on the embedded defaults",
                          description="Starts the local stack, produces sample events (1% bad), ingests them into "
                                      "a Delta and an Iceberg table (available-now, 10,000 records per batch), "
                                      "compacts both by their conf/tables policies, and prints the reconcile "
                                      f"report for both. Exit code {int(ExitCode.NOT_EXACT)} when not exact.")
    demo.add_argument("--count", type=int, default=50_000, help="events to produce (default 50000)")
    demo.add_argument("--bad-ratio", type=float, default=0.01, help="share of bad records (default 0.01)")
    demo.add_argument("--down", action="store_true", help="stop the local stack at the end")
    demo.set_defaults(run=run)


def run(args) -> ExitCode:
    from lakeline.demo import run_demo

    return run_demo(count=args.count, bad_ratio=args.bad_ratio, stop_stack=args.down)
