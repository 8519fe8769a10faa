"""`lakeline dead-letters show|replay`."""

from __future__ import annotations

from datetime import UTC, datetime

from ingest.errors import ConfigError, ExitCode
from lakeline.commands import actions, load, pipeline_arg
from lakeline.output import output_arg, output_of


def register(sub) -> None:
    letters = sub.add_parser("dead-letters", help="see the dead letters, or replay them after a schema fix",
                             description="show: the dead letters not replayed yet, newest first, with their reason, "
                                         "detail and raw payload. replay: decode them again with the pipeline's "
                                         "current schema and append the ones that parse now to the main table, "
                                         "exactly once, safe while the stream runs (a second replay adds nothing). "
                                         "A dry run unless --apply. Dead letters are never deleted; reconcile counts "
                                         "a replayed one once, in the main table.")
    letters.set_defaults(run=run)
    sub_actions = actions(letters)
    show = sub_actions.add_parser("show", help="the dead letters not replayed yet, newest first")
    replay = sub_actions.add_parser("replay", help="decode them again and append the ones that parse now")
    for action in (show, replay):
        pipeline_arg(action)
        action.add_argument("--reason", metavar="R", help="only this reason, e.g. type_mismatch")
        output_arg(action)
    show.add_argument("--limit", type=int, default=20, metavar="N", help="at most N (default 20)")
    replay.add_argument("--since", metavar="ISO", help="only dead letters ingested at or after this time")
    replay.add_argument("--apply", action="store_true", help="append (default: dry run, report only)")


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"--since {value!r} is not an ISO-8601 time, e.g. 2026-11-24T10:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run(args) -> ExitCode:
    from ingest import replay
    from ingest.spark import build_spark
    from lakeline import render
    from maintenance.presence import require_tables, spark_missing_tables

    config, settings = load(args)
    out = output_of(args)
    tables = (None, config.sink.dead_letters)
    require_tables(config, settings, args.pipeline, *tables)  # before Spark starts: a missing table in a second
    spark = build_spark(settings, f"lakeline-dead-letters-{args.action}")
    with spark_missing_tables(config, settings, args.pipeline, *tables):
        if args.action == "show":
            rows = replay.show(spark, config, settings, args.reason, args.limit)
            out.result(rows, lambda: render.dead_letters(rows))
            return ExitCode.OK
        report = replay.replay(spark, config, settings, args.reason, _since(args.since), apply=args.apply)
    out.result(report.to_json(), lambda: render.replay(report))
    return ExitCode.OK
