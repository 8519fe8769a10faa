"""`lakeline`: the command group. Each command group lives in lakeline/commands/ and registers its parsers with a
`run(args) -> ExitCode` handler; this module assembles them, runs the one asked for and maps the error taxonomy
onto exit codes."""

from __future__ import annotations

import argparse
import sys

from ingest.errors import ExitCode, LakelineError
from ingest.settings import log_format_from_environment, set_for_this_process
from lakeline import logs
from lakeline.commands import checkpoint, deadletters, demo, dev, drill, endpoint, pipeline, query, schema, tables

COMMAND_GROUPS = (dev, pipeline, schema, deadletters, checkpoint, drill, tables, query, endpoint, demo)


def _epilog() -> str:
    lines = ["exit codes:"] + [f"  {int(code):>3}  {code.meaning}" for code in ExitCode]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakeline", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog(),
        description="Exactly-once Kafka/Kinesis JSON ingestion into Delta Lake and Apache Iceberg on S3. Endpoints "
                    "and secrets come from the environment (or the env file `lakeline dev up` writes).")
    parser.add_argument("--log-format", choices=logs.LOG_FORMATS, default=None,
                        help="text (default) or json: one JSON object per log line (time, level, logger, pipeline, "
                             "message), Spark's lines and the per-batch lines included; also LAKELINE_LOG_FORMAT. "
                             "Accepted after the command too")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def _log_format(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--log-format X` (or `=X`) wherever it stands in `argv`, and `argv` without it: a global option that users
    also write after the command."""
    rest, chosen, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--log-format" and i + 1 < len(argv):
            chosen, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--log-format="):
            chosen = argv[i].split("=", 1)[1]
        else:
            rest.append(argv[i])
        i += 1
    return chosen, rest


def main(argv: list[str] | None = None) -> int:
    chosen, argv = _log_format(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    if chosen is not None and chosen not in logs.LOG_FORMATS:
        parser.error(f"--log-format {chosen!r}: choose one of {', '.join(logs.LOG_FORMATS)}")
    args = parser.parse_args(argv)
    log_format = chosen or log_format_from_environment() or "text"
    if log_format not in logs.LOG_FORMATS:
        parser.error(f"LAKELINE_LOG_FORMAT={log_format!r}: choose one of {', '.join(logs.LOG_FORMATS)}")
    set_for_this_process(log_format=log_format)  # the settings of this command and of what it starts
    logs.configure(log_format=log_format)
    try:
        return int(args.run(args))
    except LakelineError as exc:
        _say(log_format, f"lakeline: error: {exc}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        _say(log_format, "lakeline: interrupted")
        return int(ExitCode.INTERRUPTED)


def _say(log_format: str, message: str) -> None:
    """The command's last word on stderr: a plain line, or a JSON log record under --log-format json."""
    if log_format == "json":
        import logging

        logging.getLogger("lakeline").error(message)
    else:
        print(message, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
