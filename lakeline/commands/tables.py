"""Table maintenance driven by conf/tables/<name>.yaml (see conf/README.md): health, compact, retain."""

from __future__ import annotations

import functools
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest.errors import ConfigError, ExitCode
from lakeline.output import output_arg, output_of


def _table_args(parser) -> None:
    parser.add_argument("--table", required=True, metavar="NAME",
                        help="table name (conf/tables/NAME.yaml under --conf-dir) or a path to a table YAML")
    parser.add_argument("--conf-dir", default="conf", metavar="DIR", help="configuration folder (default conf)")
    output_arg(parser)
    parser.add_argument("--now", metavar="ISO", help="the moment decisions are made for, e.g. the DAG run's "
                                                    "data interval end (default: the current UTC time)")


def register(sub) -> None:
    health = sub.add_parser("health", help="measure a table: files, sizes and small files per partition",
                            description="Per partition: file count, bytes, size histogram (share of the target "
                                        "file size) and small-file ratio. Table: versions/snapshots retained, log or "
                                        "metadata size, oldest retained version, time since the last compaction.")
    _table_args(health)
    health.add_argument("--plot", metavar="FILE.png", help="write a PNG of the file-size distribution")
    health.add_argument("--compare", metavar="HEALTH.json", help="with --plot: an earlier `health --output json "
                                                                 "--save-sizes` run, drawn as 'before'")
    health.add_argument("--save-sizes", action="store_true", help="include every file size in the JSON output")
    health.set_defaults(run=run_health)

    compact = sub.add_parser("compact", help="compact the partitions the table's policy selects",
                             description="Compacts only partitions over threshold (min_small_files and "
                                         "small_file_ratio), newest first, up to max_bytes_per_run, skipping the "
                                         "partition the stream is writing (hot_partition_window) unless "
                                         "--include-hot. Delta: OPTIMIZE (ZORDER BY with zorder_by); Iceberg: "
                                         "rewrite_data_files then rewrite_manifests. Each partition commits "
                                         "atomically; conflicts with the stream are retried, then skipped.")
    _table_args(compact)
    compact.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    compact.add_argument("--partitions", nargs="+", metavar="P",
                         help="only these partitions (values like 2026-11-20 or col=value)")
    compact.add_argument("--include-hot", action="store_true", help="also compact the hot partition")
    compact.add_argument("--bound-only", action="store_true",
                         help="only the hot partitions holding half the policy's max_files_per_partition or more "
                              "(the other half is room until the next such run), rewritten without Spark (Delta: "
                              "delta-rs); a table only Spark can rewrite is left to the compaction run")
    compact.add_argument("--interval", nargs=2, metavar=("START", "END"),
                         help="a scheduler run's data interval (ISO times; START may be '-'): decide as of END "
                              "(--now defaults to it), and take first the partitions that went quiet in the "
                              "interval (newest file in [START - hot_partition_window, END - hot_partition_window)), "
                              "then any backlog still over threshold")
    compact.set_defaults(run=run_compact)

    retain = sub.add_parser("retain", help="delete files no longer needed (dry run unless --delete)",
                            description="Delta: VACUUM. Iceberg: expire_snapshots and orphan-file removal. Dry run "
                                        "by default; --delete deletes. Refuses a window shorter than the table "
                                        "file's min_retain (or Delta's delta.deletedFileRetentionDuration) and an "
                                        "orphan age below min_orphan_age, saying what to change (exit code "
                                        f"{int(ExitCode.REFUSED)}). Never expires the snapshot holding the "
                                        "pipeline's newest commit record.")
    _table_args(retain)
    mode = retain.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="report only (the default)")
    mode.add_argument("--delete", action="store_true", help="really delete")
    retain.add_argument("--retain", metavar="DURATION", help="override retention.retain, e.g. 72h")
    retain.add_argument("--orphan-older-than", metavar="DURATION", help="override retention.orphan_older_than")
    retain.set_defaults(run=run_retain)


def _moment(value: str, option: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{option} {value!r} is not an ISO-8601 time, e.g. 2026-11-22T10:00:00+00:00") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _interval(args) -> tuple[datetime | None, datetime] | None:
    if not getattr(args, "interval", None):
        return None
    start = None if args.interval[0] == "-" else _moment(args.interval[0], "--interval START")
    end = _moment(args.interval[1], "--interval END")
    if start is not None and start >= end:
        raise ConfigError(f"--interval: START {start.isoformat()} is not before END {end.isoformat()}")
    return start, end


def _open(args):
    """(table, settings, session, now, interval) of a maintenance command; `session()` starts its Spark on first
    use (health and dry runs measure without it where the table's own library can)."""
    from ingest.settings import load_settings
    from ingest.spark import build_spark
    from maintenance.policy import load_table
    from maintenance.presence import require_tables

    table = load_table(args.table, args.conf_dir)
    settings = load_settings()
    require_tables(table.pipeline, settings, _pipeline_file(table), table.sink_table())  # before Spark starts
    interval = _interval(args)
    now = _moment(args.now, "--now") if args.now else interval[1] if interval else datetime.now(UTC)
    if args.command == "retain" and args.delete and now > datetime.now(UTC) + timedelta(minutes=5):
        # Retention cut-offs are computed from `now`: a time in the future would delete inside the real window.
        raise ConfigError(f"--now {now.isoformat()} is in the future; retain --delete only runs as of the present "
                          "or the past")
    from maintenance.yielding import bound_nice, yield_to_streams

    # The files bound keeps up with the stream's new files beside a Spark compaction: it yields less than that.
    defaults = yield_to_streams(settings, bound_nice(settings) if getattr(args, "bound_only", False) else None)

    @functools.cache
    def session():
        return build_spark(settings, f"lakeline-{args.command}-{table.name}", defaults=defaults)

    return table, settings, session, now, interval


def _each(table, settings) -> list:
    """The tables a command acts on: the one the file names, or (`which: routed`) every routed table."""
    from ingest.formats import routed_names

    if table.policy.which != "routed":
        return [table]
    return [table.routed(name) for name in routed_names(table.pipeline, settings)]


def _result(out, table, results: list[tuple[dict, object]]) -> None:
    """One table's result as it is; a routed policy's as {"tables": [...]} and each table's text in turn.
    `results`: (JSON, text or a callable giving it) per table."""
    def text(item) -> str:
        return item() if callable(item) else item

    if table.policy.which != "routed":
        out.result(results[0][0], results[0][1])
    else:
        out.result({"tables": [data for data, _ in results]},
                   lambda: "\n".join(str(text(t)) for _, t in results) or "no routed tables yet")


def _pipeline_file(table) -> str:
    return os.path.relpath((table.path.parent / table.policy.pipeline).resolve())


def _missing(table, settings):
    """Spark's "not found" (a JDBC catalog) as the same one line as the check before Spark."""
    from maintenance.presence import spark_missing_tables

    return spark_missing_tables(table.pipeline, settings, _pipeline_file(table), table.sink_table())


def run_health(args) -> ExitCode:
    from lakeline import render
    from maintenance.health import collect_health, health_json, measure_without_spark, plot_sizes

    table, settings, session, now, _ = _open(args)
    out = output_of(args)
    results = []
    for one in _each(table, settings):
        with _missing(one, settings):
            measured = measure_without_spark(one, settings)
            health = collect_health(None if measured else session(), one, settings, now, measured=measured)
        data = health_json(health)
        if args.save_sizes:
            data["file_sizes"] = health.file_sizes
        if args.plot:
            runs = [("now", health.file_sizes)]
            if args.compare:
                runs.insert(0, ("before", json.loads(Path(args.compare).read_text()).get("file_sizes", [])))
                runs[1] = ("after", health.file_sizes)
            plot = args.plot if table.policy.which != "routed" else f"{Path(args.plot).with_suffix('')}-{one.name}.png"
            plot_sizes(plot, runs, health.target_file_size)
            out.note(f"plot written to {plot}")
        results.append((data, lambda health=health: render.health(health)))
    _result(out, table, results)
    return ExitCode.OK


def run_compact(args) -> ExitCode:
    from maintenance import metrics
    from maintenance.compaction import compact
    from maintenance.health import measure_without_spark

    table, settings, session, now, interval = _open(args)
    out = output_of(args)
    results = []
    for one in _each(table, settings):
        with _missing(one, settings), out.progress(f"compacting {one.name}") as advance:
            # The plan measures without a JVM where it can (under a stream, Spark's measure of a niced command
            # took minutes); Spark starts for the rewrite only, when there is one.
            measured = measure_without_spark(one, settings)
            result = compact(None if measured or args.bound_only else session(), one, settings, now,
                             dry_run=args.dry_run,
                             partitions=args.partitions, include_hot=args.include_hot, interval=interval,
                             on_progress=advance, measured=measured, start_spark=session,
                             bound_only=args.bound_only)
        if not args.dry_run:
            metrics.report(settings, "compaction", {"table": one.name}, metrics.compaction_figures(result))
        results.append((result.to_json(), result.summary))
    _result(out, table, results)
    return ExitCode.OK


def run_retain(args) -> ExitCode:
    from maintenance import metrics
    from maintenance.policy import parse_duration
    from maintenance.retention import retain

    table, settings, session, now, _ = _open(args)
    out = output_of(args)
    results = []
    for one in _each(table, settings):
        with _missing(one, settings):
            result = retain(session(), one, settings, now, dry_run=not args.delete,
                            retain_override=parse_duration(args.retain) if args.retain else None,
                            orphan_override=parse_duration(args.orphan_older_than) if args.orphan_older_than
                            else None)
        # A dry run and a real one are separate groups: a scheduled dry run must not replace the last deletion's
        # figures.
        metrics.report(settings, "retention", {"table": one.name, "mode": "dry_run" if result.dry_run else "delete"},
                       metrics.retention_figures(result))
        results.append((result.to_json(), lambda result=result: "\n".join(
            [f"  note: {note}" for note in result.notes] + [result.summary()])))
    _result(out, table, results)
    return ExitCode.OK
