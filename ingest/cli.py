"""The `lakeline` command. This module is the composition root: it may import ingest, maintenance and infra;
nothing else in ingest imports it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ingest.errors import ConfigError, LakelineError

EXIT_USAGE = 2
EXIT_NOT_EXACT = 3


def _pipeline_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pipeline", required=True, metavar="FILE",
                        help="pipeline YAML, e.g. conf/pipelines/orders_delta.yaml")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakeline",
        description="Exactly-once Kafka JSON ingestion into Delta Lake and Apache Iceberg on S3. Endpoints and "
                    "secrets come from the environment (or the env file `lakeline dev up` writes).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dev = sub.add_parser("dev", help="the embedded local stack: Kafka broker, moto S3/Kinesis, Iceberg catalog",
                         description="Start, stop or inspect the local stack. `up` starts a KRaft Kafka broker and "
                                     "a moto server (S3 + Kinesis) on free 127.0.0.1 ports, creates the warehouse "
                                     "bucket and the SQLite Iceberg catalog, and writes the endpoints to "
                                     ".lakeline/stack/stack.env, where every other command finds them. Running "
                                     "`up` twice reuses the running stack. `down` stops only what `up` started.")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--state-dir", type=Path, help="state folder (default .lakeline in the repo, or "
                                                    "LAKELINE_STATE_DIR)")

    check = sub.add_parser("check-config", help="validate a pipeline YAML and print the resolved settings")
    _pipeline_arg(check)

    produce = sub.add_parser("produce", help="send sample order events (with a share of bad records) to Kafka",
                             description="Sends ~200-byte JSON order events to the pipeline's first topic (created "
                                         "with --partitions if missing) and records the produced offsets in "
                                         ".lakeline/produced/<topic>.jsonl.")
    _pipeline_arg(produce)
    produce.add_argument("--count", type=int, required=True, help="number of events")
    produce.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    produce.add_argument("--bad-ratio", type=float, default=0.0,
                         help="share of bad records, spread over every dead-letter kind (default 0)")
    produce.add_argument("--seed", type=int, help="random seed for reproducible content")
    produce.add_argument("--partitions", type=int, default=4, help="partitions if the topic is created (default 4)")

    ingest = sub.add_parser("ingest", help="run the streaming pipeline (prints one line per batch)",
                            description="Runs the pipeline until the backlog is ingested (available-now) or until "
                                        "SIGTERM/SIGINT (processing-time), then exits 0. Safe to kill at any "
                                        "moment: the next run neither duplicates nor skips.")
    _pipeline_arg(ingest)
    ingest.add_argument("--trigger", help="available-now | processing-time=<N>ms|s|m (default: the pipeline's)")
    ingest.add_argument("--standby", action="store_true",
                        help="warm standby: start Spark, open the tables and warm the batch code, then wait for "
                             "the pipeline's driver on this host to exit (kill -9 included) and take over at once. "
                             "Without it, a second driver of the same pipeline on this host is refused")

    rec = sub.add_parser("reconcile", help="exactly-once audit: produced vs rows + dead letters",
                         description=f"Compares every offset retained in the source with the table and the "
                                     f"dead-letter table. Exit code {EXIT_NOT_EXACT} when duplicates or missing > 0.")
    _pipeline_arg(rec)
    rec.add_argument("--output", choices=["text", "json"], default="text")

    ckpt = sub.add_parser("checkpoint", help="back up, verify, restore or repair a pipeline's Spark checkpoint",
                          description="backup: copy the committed part of the checkpoint (consistent while the "
                                      "stream runs) to <warehouse>/_checkpoint_backups/<pipeline>/<batch>-<time>/ "
                                      "with a manifest of SHA-256 checksums; keeps checkpoint.keep_backups. "
                                      "verify: checksums, structure, and whether a start from the backup would "
                                      "resume or rebuild from the table's offsets. restore: refuses while the "
                                      "pipeline's heartbeat is fresh; moves the current checkpoint aside (never "
                                      "deletes it) and restores the backup (default: the newest). repair: finds "
                                      "truncated, garbage or missing offsets/commits entries, gaps and leftovers, "
                                      "explains them and what the next start will do; with --apply it moves the "
                                      "damaged or uncommitted tail aside (or the whole checkpoint, when nothing "
                                      "intact is left, so the next start rebuilds from the table's offsets). "
                                      "list: the complete backups, oldest first.")
    ckpt.add_argument("action", choices=["backup", "verify", "restore", "repair", "list"])
    _pipeline_arg(ckpt)
    ckpt.add_argument("--backup", metavar="ID", help="backup id for verify/restore (default: the newest)")
    ckpt.add_argument("--apply", action="store_true",
                      help="repair: carry out the fix (default: dry-run, report only; exit 3 if a fix is needed)")
    ckpt.add_argument("--force", action="store_true",
                      help="restore/repair even if the pipeline's heartbeat looks fresh")
    ckpt.add_argument("--output", choices=["text", "json"], default="text")

    drill = sub.add_parser("drill", help="rehearse checkpoint recovery on a drill copy and verify it exactly",
                           description="Runs recovery drills on a copy of the pipeline: its own topic, tables, "
                                       "dead-letter table, checkpoint and backups under <warehouse>/_drills/"
                                       "<pipeline>/<run>/ (Iceberg: namespace drill_<run>_<scenario>), never "
                                       "production data. Each scenario produces events, runs real `lakeline "
                                       "ingest` drivers, injects the fault, recovers with the checkpoint tools and "
                                       "audits with reconcile. kill: kill -9 mid-stream; lose-checkpoint: delete "
                                       "it; corrupt-checkpoint: truncate/garble entries, then `checkpoint repair`; "
                                       "stale-restore: restore an old backup. Writes report.json under the drill "
                                       f"prefix and .lakeline/drills/. Exit code {EXIT_NOT_EXACT} when any scenario "
                                       "fails; a passed scenario's copy is removed, a failed one is kept.")
    _pipeline_arg(drill)
    drill.add_argument("--scenario", choices=["kill", "lose-checkpoint", "corrupt-checkpoint", "stale-restore", "all"],
                       default="all", help="default: all")
    drill.add_argument("--events", type=int, default=3000, help="events per production phase (default 3000)")
    drill.add_argument("--batch-size", type=int, default=500,
                       help="max offsets per micro-batch in the drill copy (default 500)")
    drill.add_argument("--keep", action="store_true", help="keep every scenario's drill copy (default: only failed)")
    drill.add_argument("--run-id", help="name of this drill run (letters and digits; default: UTC time + random); "
                                        "a scheduler passes a stable id so a retry reuses the same names")
    drill.add_argument("--cleanup", action="store_true",
                       help="only remove every scenario's drill copy of --run-id (topics, tables, prefix), then exit")
    drill.add_argument("--output", choices=["text", "json"], default="text")

    fresh = sub.add_parser("freshness", help="check a table against its pipeline's freshness SLA",
                           description="Stale when records are waiting in the source and the table's newest "
                                       "commit is older than freshness.max_staleness, or when more than "
                                       "freshness.max_lag_records are waiting (both from the pipeline YAML). An "
                                       f"idle, fully ingested source is fresh. Kafka lag comes from the partition "
                                       "watermarks; Kinesis lag is counted by reading each shard from the table's "
                                       "recorded end, up to 100,000 records (beyond that: 'at least'). Exit code "
                                       f"{EXIT_NOT_EXACT} when breached.")
    _pipeline_arg(fresh)
    fresh.add_argument("--as-of", metavar="ISO-8601", help="the moment judged (default: now); Airflow passes the "
                                                            "run's data interval end")
    fresh.add_argument("--output", choices=["text", "json"], default="text")

    _maintenance_parsers(sub)

    demo = sub.add_parser("demo", help="the main job end to end on the embedded defaults",
                          description="Starts the local stack, produces sample events (1% bad), ingests them into "
                                      "a Delta and an Iceberg table (available-now, 10,000 records per batch), "
                                      "compacts both by their conf/tables policies, and prints the reconcile "
                                      "report for both.")
    demo.add_argument("--count", type=int, default=50_000, help="events to produce (default 50000)")
    demo.add_argument("--bad-ratio", type=float, default=0.01, help="share of bad records (default 0.01)")
    demo.add_argument("--down", action="store_true", help="stop the local stack at the end")
    return parser


def _maintenance_parsers(sub) -> None:
    """health / compact / retain: table maintenance driven by conf/tables/<name>.yaml (see conf/README.md)."""
    def table_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--table", required=True, metavar="NAME",
                            help="table name (conf/tables/NAME.yaml under --conf-dir) or a path to a table YAML")
        parser.add_argument("--conf-dir", default="conf", metavar="DIR", help="configuration folder (default conf)")
        parser.add_argument("--output", choices=["text", "json"], default="text")
        parser.add_argument("--now", metavar="ISO", help="the moment decisions are made for, e.g. the DAG run's "
                                                        "data interval end (default: the current UTC time)")

    health = sub.add_parser("health", help="measure a table: files, sizes and small files per partition",
                            description="Per partition: file count, bytes, size histogram (share of the target "
                                        "file size) and small-file ratio. Table: versions/snapshots retained, log or "
                                        "metadata size, oldest retained version, time since the last compaction.")
    table_args(health)
    health.add_argument("--plot", metavar="FILE.png", help="write a PNG of the file-size distribution")
    health.add_argument("--compare", metavar="HEALTH.json", help="with --plot: an earlier `health --output json "
                                                                 "--save-sizes` run, drawn as 'before'")
    health.add_argument("--save-sizes", action="store_true", help="include every file size in the JSON output")

    compact = sub.add_parser("compact", help="compact the partitions the table's policy selects",
                             description="Compacts only partitions over threshold (min_small_files and "
                                         "small_file_ratio), newest first, up to max_bytes_per_run, skipping the "
                                         "partition the stream is writing (hot_partition_window) unless "
                                         "--include-hot. Delta: OPTIMIZE (ZORDER BY with zorder_by); Iceberg: "
                                         "rewrite_data_files then rewrite_manifests. Each partition commits "
                                         "atomically; conflicts with the stream are retried, then skipped.")
    table_args(compact)
    compact.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    compact.add_argument("--partitions", nargs="+", metavar="P",
                         help="only these partitions (values like 2026-11-20 or col=value)")
    compact.add_argument("--include-hot", action="store_true", help="also compact the hot partition")
    compact.add_argument("--interval", nargs=2, metavar=("START", "END"),
                         help="a scheduler run's data interval (ISO times; START may be '-'): decide as of END "
                              "(--now defaults to it), and take first the partitions that went quiet in the "
                              "interval (newest file in [START - hot_partition_window, END - hot_partition_window)), "
                              "then any backlog still over threshold")

    retain = sub.add_parser("retain", help="delete files no longer needed (dry run unless --delete)",
                            description="Delta: VACUUM. Iceberg: expire_snapshots and orphan-file removal. Dry run "
                                        "by default; --delete deletes. Refuses a window shorter than the table "
                                        "file's min_retain (or Delta's delta.deletedFileRetentionDuration) and an "
                                        "orphan age below min_orphan_age, saying what to change. Never expires "
                                        "the snapshot holding the pipeline's newest commit record.")
    table_args(retain)
    mode = retain.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="report only (the default)")
    mode.add_argument("--delete", action="store_true", help="really delete")
    retain.add_argument("--retain", metavar="DURATION", help="override retention.retain, e.g. 72h")
    retain.add_argument("--orphan-older-than", metavar="DURATION", help="override retention.orphan_older_than")


def _maintenance(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from ingest.settings import load_settings
    from ingest.spark import build_spark
    from maintenance.policy import load_table, parse_duration

    def moment(value: str, option: str) -> datetime:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"{option} {value!r} is not an ISO-8601 time, e.g. 2026-11-22T10:00:00+00:00") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)

    table = load_table(args.table, args.conf_dir)
    settings = load_settings()
    interval = None
    if getattr(args, "interval", None):
        start = None if args.interval[0] == "-" else moment(args.interval[0], "--interval START")
        end = moment(args.interval[1], "--interval END")
        if start is not None and start >= end:
            raise ConfigError(f"--interval: START {start.isoformat()} is not before END {end.isoformat()}")
        interval = (start, end)
    now = moment(args.now, "--now") if args.now else interval[1] if interval else datetime.now(UTC)
    if args.command == "retain" and args.delete and now > datetime.now(UTC) + timedelta(minutes=5):
        # Retention cut-offs are computed from `now`: a time in the future would delete inside the real window.
        raise ConfigError(f"--now {now.isoformat()} is in the future; retain --delete only runs as of the present "
                          "or the past")
    spark = build_spark(settings, f"lakeline-{args.command}-{table.name}")
    quiet = args.output == "json"
    echo = (lambda msg: print(msg, file=sys.stderr)) if quiet else print
    if args.command == "health":
        from maintenance.health import collect_health, format_health, health_json, plot_sizes

        health = collect_health(spark, table, settings, now)
        data = health_json(health)
        if args.save_sizes:
            data["file_sizes"] = health.file_sizes
        if args.plot:
            runs = [("now", health.file_sizes)]
            if args.compare:
                runs.insert(0, ("before", json.loads(Path(args.compare).read_text()).get("file_sizes", [])))
                runs[1] = ("after", health.file_sizes)
            plot_sizes(args.plot, runs, health.target_file_size)
            echo(f"plot written to {args.plot}")
        print(json.dumps(data, indent=2) if quiet else format_health(health))
        return 0
    if args.command == "compact":
        from maintenance.compaction import compact

        result = compact(spark, table, settings, now, dry_run=args.dry_run, partitions=args.partitions,
                         include_hot=args.include_hot, interval=interval, echo=echo)
        print(json.dumps(result.to_json(), indent=2) if quiet else result.summary())
        return 0
    from maintenance.retention import retain

    result = retain(spark, table, settings, now, dry_run=not args.delete,
                    retain_override=parse_duration(args.retain) if args.retain else None,
                    orphan_override=parse_duration(args.orphan_older_than) if args.orphan_older_than else None,
                    echo=echo)
    if quiet:
        print(json.dumps(result.to_json(), indent=2))
    else:
        for note in result.notes:
            print(f"  note: {note}")
        print(result.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except LakelineError as exc:
        print(f"lakeline: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("lakeline: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "dev":
        return _dev(args)
    if args.command in ("health", "compact", "retain"):
        return _maintenance(args)
    from ingest.config import load_pipeline
    from ingest.settings import load_settings

    if args.command == "demo":
        from ingest.demo import run_demo

        return run_demo(count=args.count, bad_ratio=args.bad_ratio, stop_stack=args.down)
    config = load_pipeline(args.pipeline)
    settings = load_settings()
    if args.command == "check-config":
        print(json.dumps({"pipeline": config.model_dump(by_alias=True), "settings": settings.describe()},
                         indent=2, default=str))
        return 0
    if args.command == "produce":
        from ingest.produce import produce

        result = produce(config, settings, args.count, args.rate, args.bad_ratio, args.seed, args.partitions)
        print(json.dumps(result.to_json()))
        return 0
    if args.command == "ingest":
        from ingest.driver_lock import DriverLock
        from ingest.pipeline import Pipeline

        pipeline = Pipeline(config, settings, trigger=args.trigger)
        lock = DriverLock(config.pipeline, config.checkpoint_location(settings))
        if args.standby:
            if not _wait_as_standby(pipeline, lock):
                return 0
        else:
            lock.acquire()
        started = time.monotonic()
        try:
            summary = pipeline.run()
        finally:
            lock.release()
        print(f"[{config.pipeline}] done: {len(summary.batches)} batches, {summary.rows} rows, "
              f"{summary.dead_letters} dead letters in {time.monotonic() - started:.1f}s")
        return 0
    if args.command == "reconcile":
        from ingest.reconcile import format_report, reconcile
        from ingest.spark import build_spark

        report = reconcile(config, settings, build_spark(settings, "lakeline-reconcile"))
        print(json.dumps(report.to_json(), indent=2) if args.output == "json" else format_report(report))
        return 0 if report.exact else EXIT_NOT_EXACT
    if args.command == "checkpoint":
        return _checkpoint(args, config, settings)
    if args.command == "freshness":
        from datetime import datetime, UTC

        from ingest.spark import build_spark
        from maintenance.freshness import check

        try:
            as_of = datetime.fromisoformat(args.as_of) if args.as_of else datetime.now(UTC)
        except ValueError:
            raise ConfigError(f"--as-of {args.as_of!r} is not an ISO-8601 time") from None
        if as_of.tzinfo is None:
            raise ConfigError(f"--as-of {args.as_of!r}: give a time zone, e.g. 2026-11-22T10:00:00+00:00")
        report = check(config, settings, build_spark(settings, "lakeline-freshness"), as_of)
        if args.output == "json":
            print(json.dumps(report.to_json(), indent=2))
        else:
            lag = f"{'' if report.lag_exact else 'at least '}{report.lag_records:,}"
            print(f"{report.pipeline}: {'FRESH' if report.ok else 'STALE'} as of {report.as_of}; newest commit "
                  f"{report.last_commit_at or 'none'}, lag {lag} records")
            for problem in report.problems:
                print(f"  ! {problem}")
        return 0 if report.ok else EXIT_NOT_EXACT
    if args.command == "drill":
        from ingest.spark import build_spark
        from maintenance.drill import SCENARIOS, Drill, format_report

        drill = Drill(config, settings, build_spark(settings, "lakeline-drill"), events=args.events,
                      batch_size=args.batch_size, run_id=args.run_id, echo=lambda msg: print(msg, file=sys.stderr))
        if args.cleanup:
            if not args.run_id:
                raise ConfigError("drill --cleanup needs --run-id (the run whose copies to remove)")
            removed = drill.cleanup()
            print(json.dumps({"run_id": drill.run_id, "removed": removed}) if args.output == "json"
                  else f"drill {drill.run_id}: removed {', '.join(removed) or 'nothing (no copies left)'}")
            return 0
        report = drill.run(list(SCENARIOS) if args.scenario == "all" else [args.scenario], keep=args.keep)
        print(json.dumps(report.to_json(), indent=2) if args.output == "json" else format_report(report))
        return 0 if report.passed else EXIT_NOT_EXACT
    raise AssertionError(args.command)


def _wait_as_standby(pipeline, lock) -> bool:
    """Warm up, then wait for the driver lock. False when stopped (SIGTERM/SIGINT) before taking over."""
    import signal
    import threading

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    name = pipeline.config.pipeline
    try:
        seconds = pipeline.warm_up()
        print(f"[{name}] standby: warm in {seconds:.1f}s; waiting for the driver on this host to exit "
              f"(lock {lock.path})", flush=True)
        if not lock.wait(stop):
            print(f"[{name}] standby: stopped before taking over", flush=True)
            return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"[{name}] standby: the driver exited; taking over", flush=True)
    return True


def _checkpoint(args: argparse.Namespace, config, settings) -> int:
    from dataclasses import asdict

    from ingest.adapters.hadoop_fs import HadoopFS
    from ingest.pipeline import HEARTBEAT_STALE_SECONDS
    from ingest.sinks import sinks_for
    from ingest.spark import build_spark
    from maintenance import checkpoints

    spark = build_spark(settings, f"lakeline-checkpoint-{args.action}")
    fs = HadoopFS(spark)
    location, root = config.checkpoint_location(settings), config.backup_location(settings)

    def table_record():
        main, _ = sinks_for(spark, config, settings)
        from pyspark.errors import AnalysisException

        try:
            return main.last_commit()
        except AnalysisException:  # table not created yet
            return None

    if args.action == "list":
        for backup_id in checkpoints.list_backups(fs, root):
            print(backup_id)
        return 0
    if args.action == "backup":
        manifest = checkpoints.backup(fs, location, root, config.pipeline, table_record(),
                                      config.checkpoint.keep_backups, echo=lambda msg: print(msg, file=sys.stderr))
        if args.output == "json":
            print(json.dumps({"backup_id": manifest.backup_id, "location": f"{root}/{manifest.backup_id}",
                              "last_committed_batch": manifest.last_committed_batch, "files": len(manifest.files),
                              "bytes": manifest.bytes, "kept": checkpoints.list_backups(fs, root)}, indent=2))
        else:
            print(f"backup {manifest.backup_id}: batch {manifest.last_committed_batch}, {len(manifest.files)} "
                  f"files, {manifest.bytes:,} bytes -> {root}/{manifest.backup_id}")
        return 0
    if args.action == "verify":
        report = checkpoints.verify(fs, root, args.backup, table_record())
        if args.output == "json":
            print(json.dumps(asdict(report), indent=2))
        else:
            print(f"backup {report.backup_id}: {'OK' if report.ok else 'FAILED'} ({report.files} files, last "
                  f"committed batch {report.last_committed_batch}); {report.consistency}")
            for problem in report.problems:
                print(f"  ! {problem}")
        return 0 if report.ok else EXIT_NOT_EXACT
    if args.action == "repair":
        return _repair(args, fs, location, table_record())
    checkpoints.restore(fs, root, args.backup, location, HEARTBEAT_STALE_SECONDS, force=args.force)
    return 0


def _repair(args: argparse.Namespace, fs, location: str, table) -> int:
    from ingest.pipeline import HEARTBEAT_STALE_SECONDS
    from maintenance import checkpoint_repair, checkpoints

    plan = checkpoint_repair.diagnose(fs, location, table)
    moved = None
    if args.apply and not plan.healthy:
        checkpoints.ensure_not_running(fs, location, HEARTBEAT_STALE_SECONDS, force=args.force)
        moved = checkpoint_repair.apply(fs, plan)
    if args.output == "json":
        print(json.dumps({**plan.to_json(), "applied": bool(moved), "moved_to": moved}, indent=2))
    else:
        print(f"checkpoint {location}: {plan.action} - {plan.explanation}")
        for finding in plan.findings:
            print(f"  {'!' if finding.blocking else '-'} {finding.path}: {finding.problem}: {finding.detail}")
        for rel in plan.move:
            print(f"  {'moved' if moved else 'would move'} aside: {rel}")
        print(f"next start: {plan.next_start}")
        if moved:
            print(f"done; moved files are kept in {moved}")
        elif not plan.healthy:
            print("dry-run: nothing changed; run again with --apply to fix")
    return 0 if plan.healthy or moved else EXIT_NOT_EXACT


def _dev(args: argparse.Namespace) -> int:
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
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
