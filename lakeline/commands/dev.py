"""`lakeline dev up|down|status`: the embedded local stack."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ingest.errors import ExitCode


def register(sub) -> None:
    dev = sub.add_parser("dev", help="the embedded local stack: Kafka broker, moto S3/Kinesis, Iceberg catalog",
                         description="Start, stop or inspect the local stack. `up` starts a KRaft Kafka broker and "
                                     "a moto server (S3 + Kinesis) on free 127.0.0.1 ports, creates the warehouse "
                                     "bucket and the SQLite Iceberg catalog, and writes the endpoints to "
                                     ".lakeline/stack/stack.env, where every other command finds them. Running "
                                     "`up` twice reuses the running stack. `down` stops only what `up` started.")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--state-dir", type=Path, help="state folder (default .lakeline in the repo, or "
                                                    "LAKELINE_STATE_DIR)")
    dev.set_defaults(run=run)


def run(args) -> ExitCode:
    from infra import stack
    from infra.procs import ComponentError

    try:
        if args.action == "up":
            stack.up(args.state_dir)
        elif args.action == "down":
            stack.down(args.state_dir)
        else:
            print(json.dumps(stack.status(args.state_dir), indent=2))
    except ComponentError as exc:
        print(f"lakeline dev {args.action}: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK
