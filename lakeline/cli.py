"""`lakeline`: the command group. Each command group lives in lakeline/commands/ and registers its parsers with a
`run(args) -> ExitCode` handler; this module assembles them, runs the one asked for and maps the error taxonomy
onto exit codes."""

from __future__ import annotations

import argparse
import sys

from ingest.errors import ExitCode, LakelineError
from lakeline import logs
from lakeline.commands import checkpoint, deadletters, demo, dev, drill, pipeline, schema, tables

COMMAND_GROUPS = (dev, pipeline, schema, deadletters, checkpoint, drill, tables, demo)


def _epilog() -> str:
    lines = ["exit codes:"] + [f"  {int(code):>3}  {code.meaning}" for code in ExitCode]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakeline", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog(),
        description="Exactly-once Kafka/Kinesis JSON ingestion into Delta Lake and Apache Iceberg on S3. Endpoints "
                    "and secrets come from the environment (or the env file `lakeline dev up` writes).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure()
    try:
        return int(args.run(args))
    except LakelineError as exc:
        print(f"lakeline: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("lakeline: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
