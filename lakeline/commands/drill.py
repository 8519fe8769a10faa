"""`lakeline drill`: recovery drills on an isolated copy of a pipeline."""

from __future__ import annotations

from ingest.errors import ConfigError, ExitCode
from lakeline.commands import load, pipeline_arg
from lakeline.output import output_arg, output_of


def register(sub) -> None:
    drill = sub.add_parser("drill", help="rehearse checkpoint recovery on a drill copy and verify it exactly",
                           description="Runs recovery drills on a copy of the pipeline: its own topic, tables, "
                                       "dead-letter table, checkpoint and backups under <warehouse>/_drills/"
                                       "<pipeline>/<run>/ (Iceberg: namespace drill_<run>_<scenario>), never "
                                       "production data. Each scenario produces events, runs real `lakeline "
                                       "ingest` drivers, injects the fault, recovers with the checkpoint tools and "
                                       "audits with reconcile. kill: kill -9 mid-stream; lose-checkpoint: delete "
                                       "it; corrupt-checkpoint: truncate/garble entries, then `checkpoint repair`; "
                                       "stale-restore: restore an old backup; shard-split (Kinesis): split a "
                                       "shard while the driver runs. Kafka and Kinesis pipelines (a drill topic "
                                       "or stream of its own). Writes report.json under the drill "
                                       f"prefix and .lakeline/drills/. Exit code {int(ExitCode.DRILL_FAILED)} when "
                                       "any scenario fails; a passed scenario's copy is removed, a failed one is "
                                       "kept.")
    pipeline_arg(drill)
    drill.add_argument("--scenario", choices=["kill", "lose-checkpoint", "corrupt-checkpoint", "stale-restore",
                                              "shard-split", "all"],
                       default="all", help="default: all")
    drill.add_argument("--events", type=int, default=3000, help="events per production phase (default 3000)")
    drill.add_argument("--batch-size", type=int, default=500,
                       help="max offsets per micro-batch in the drill copy (default 500)")
    drill.add_argument("--keep", action="store_true", help="keep every scenario's drill copy (default: only failed)")
    drill.add_argument("--run-id", help="name of this drill run (letters and digits; default: UTC time + random); "
                                        "a scheduler passes a stable id so a retry reuses the same names")
    drill.add_argument("--cleanup", action="store_true",
                       help="only remove every scenario's drill copy of --run-id (topics, tables, prefix), then exit")
    output_arg(drill)
    drill.set_defaults(run=run)


def run(args) -> ExitCode:
    from ingest.spark import build_spark
    from lakeline import render
    from maintenance import metrics
    from maintenance.drill import Drill, scenarios_for

    config, settings = load(args)
    out = output_of(args)
    drill = Drill(config, settings, build_spark(settings, "lakeline-drill"), events=args.events,
                  batch_size=args.batch_size, run_id=args.run_id)
    if args.cleanup:
        if not args.run_id:
            raise ConfigError("drill --cleanup needs --run-id (the run whose copies to remove)")
        removed = drill.cleanup()
        out.result({"run_id": drill.run_id, "removed": removed},
                   f"drill {drill.run_id}: removed {', '.join(removed) or 'nothing (no copies left)'}")
        return ExitCode.OK
    report = drill.run(scenarios_for(config) if args.scenario == "all" else [args.scenario], keep=args.keep)
    for scenario, figures in metrics.drill_figures(report).items():
        metrics.report(settings, "drill", {"pipeline": config.pipeline, "scenario": scenario}, figures)
    out.result(report.to_json(), lambda: render.drill(report))
    return ExitCode.OK if report.passed else ExitCode.DRILL_FAILED
