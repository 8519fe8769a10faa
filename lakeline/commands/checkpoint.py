"""`lakeline checkpoint backup|verify|restore|repair|list`."""

from __future__ import annotations

from dataclasses import asdict

from ingest.errors import ExitCode
from lakeline.commands import actions, load, pipeline_arg
from lakeline.output import output_arg, output_of


def register(sub) -> None:
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
    ckpt.set_defaults(run=run)
    sub_actions = actions(ckpt)
    backup = sub_actions.add_parser("backup", help="copy the committed part of the checkpoint, with checksums")
    verify = sub_actions.add_parser("verify", help="check a backup's checksums and structure")
    restore = sub_actions.add_parser("restore", help="move the checkpoint aside and restore a backup")
    repair = sub_actions.add_parser("repair", help="find and explain checkpoint damage; fix it with --apply")
    listing = sub_actions.add_parser("list", help="the complete backups, oldest first")
    for action in (backup, verify, restore, repair, listing):
        pipeline_arg(action)
        output_arg(action)
    for action in (verify, restore):
        action.add_argument("--backup", metavar="ID", help="backup id (default: the newest)")
    repair.add_argument("--apply", action="store_true",
                        help="carry out the fix (default: dry-run, report only; exit "
                             f"{int(ExitCode.CHECKPOINT_DAMAGED)} if a fix is needed)")
    for action in (restore, repair):
        action.add_argument("--force", action="store_true", help="even if the pipeline's heartbeat looks fresh")


def run(args) -> ExitCode:
    from ingest.adapters.hadoop_fs import HadoopFS
    from ingest.adapters.object_store import S3Files, is_s3_uri
    from ingest.formats import tables_for
    from ingest.checkpoint import HEARTBEAT_STALE_SECONDS
    from ingest.spark import build_spark
    from maintenance import checkpoints
    from maintenance.presence import table_exists

    config, settings = load(args)
    out = output_of(args)
    from maintenance.yielding import yield_to_streams

    location, root = config.checkpoint_location(settings), config.backup_location(settings)
    # backup and verify run beside the stream (the DAG); restore and repair are an operator's, with the stream down
    beside_stream = args.action in ("backup", "verify")
    defaults = yield_to_streams(settings) if beside_stream else None
    known = _record_without_spark(config, settings) if beside_stream and is_s3_uri(location) \
        and is_s3_uri(root) else None
    if known is not None:
        # Every few minutes beside the stream: on S3, with a table its format's library reads, no JVM at all.
        fs = S3Files(settings)

        def table_record():
            return known[0]
    else:
        spark = build_spark(settings, f"lakeline-checkpoint-{args.action}", defaults=defaults)
        fs = HadoopFS(spark)

        def table_record():
            from pyspark.errors import AnalysisException

            if table_exists(config, settings) is False:
                return None  # the pipeline has not run yet: nothing committed
            try:
                return tables_for(spark, config, settings)[0].last_commit()
            except AnalysisException:  # table not created yet
                return None

    if args.action == "list":
        backups = checkpoints.list_backups(fs, root)
        out.result(backups, "\n".join(backups))
        return ExitCode.OK
    if args.action == "backup":
        with out.progress(f"backing up {config.pipeline}'s checkpoint") as advance:
            manifest = checkpoints.backup(fs, location, root, config.pipeline, table_record(),
                                          config.checkpoint.keep_backups, on_progress=advance)
        out.result({"backup_id": manifest.backup_id, "location": f"{root}/{manifest.backup_id}",
                    "last_committed_batch": manifest.last_committed_batch, "files": len(manifest.files),
                    "bytes": manifest.bytes, "kept": checkpoints.list_backups(fs, root)},
                   f"backup {manifest.backup_id}: batch {manifest.last_committed_batch}, {len(manifest.files)} "
                   f"files, {manifest.bytes:,} bytes -> {root}/{manifest.backup_id}")
        return ExitCode.OK
    if args.action == "verify":
        report = checkpoints.verify(fs, root, args.backup, table_record())
        out.result(asdict(report), lambda: "\n".join(
            [f"backup {report.backup_id}: {'OK' if report.ok else 'FAILED'} ({report.files} files, last "
             f"committed batch {report.last_committed_batch}); {report.consistency}"]
            + [f"  ! {problem}" for problem in report.problems]))
        return ExitCode.OK if report.ok else ExitCode.CHECKPOINT_DAMAGED
    if args.action == "repair":
        return _repair(args, out, fs, location, table_record())
    manifest = checkpoints.restore(fs, root, args.backup, location, HEARTBEAT_STALE_SECONDS, force=args.force)
    out.result({"restored": manifest.backup_id, "checkpoint": location,
                "last_committed_batch": manifest.last_committed_batch, "files": len(manifest.files)},
               f"restored backup {manifest.backup_id} (batch {manifest.last_committed_batch}, "
               f"{len(manifest.files)} files) to {location}")
    return ExitCode.OK


def _record_without_spark(config, settings) -> tuple | None:
    """(the pipeline's newest commit record in its main table, or None when nothing is committed yet), read by the
    format's own library; None when only Spark can tell (an Iceberg JDBC catalog, table features the library
    cannot read)."""
    from ingest.errors import ReaderLockedOut
    from ingest.formats import format_for
    from maintenance.presence import table_exists

    exists = table_exists(config, settings)
    if exists is None:
        return None
    if not exists:
        return (None,)
    fmt = format_for(config.sink.format)
    try:
        newest = fmt.reader(fmt.ref(config, settings), settings).last_commit(config.pipeline)
    except ReaderLockedOut:
        return None
    return (newest.record if newest else None,)


def _repair(args, out, fs, location: str, table) -> ExitCode:
    from ingest.checkpoint import HEARTBEAT_STALE_SECONDS
    from maintenance import checkpoint_repair, checkpoints

    plan = checkpoint_repair.diagnose(fs, location, table)
    moved = None
    if args.apply and not plan.healthy:
        checkpoints.ensure_not_running(fs, location, HEARTBEAT_STALE_SECONDS, force=args.force)
        moved = checkpoint_repair.apply(fs, plan)

    def text() -> str:
        lines = [f"checkpoint {location}: {plan.action} - {plan.explanation}"]
        lines += [f"  {'!' if f.blocking else '-'} {f.path}: {f.problem}: {f.detail}" for f in plan.findings]
        lines += [f"  {'moved' if moved else 'would move'} aside: {rel}" for rel in plan.move]
        lines.append(f"next start: {plan.next_start}")
        if moved:
            lines.append(f"done; moved files are kept in {moved}")
        elif not plan.healthy:
            lines.append("dry-run: nothing changed; run again with --apply to fix")
        return "\n".join(lines)

    out.result({**plan.to_json(), "applied": bool(moved), "moved_to": moved}, text)
    return ExitCode.OK if plan.healthy or moved else ExitCode.CHECKPOINT_DAMAGED
