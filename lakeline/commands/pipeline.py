"""The pipeline commands: check-config, produce, ingest, reconcile, freshness."""

from __future__ import annotations

import json
import logging
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from ingest.errors import ConfigError, ExitCode
from lakeline.commands import load, pipeline_arg, pipeline_files
from lakeline.output import output_arg, output_of


def register(sub) -> None:
    check = sub.add_parser("check-config", help="validate a pipeline YAML and print the resolved settings",
                           description="Validates the YAML, prints the resolved settings (secrets masked) and, "
                                       "where the table's store answers, what the next start would change in the "
                                       "existing table, or its refusal (a narrowing; a widening that would lock a "
                                       "supported reader out, docs/readers.md).")
    pipeline_arg(check)
    check.set_defaults(run=check_config)

    produce = sub.add_parser("produce", help="send sample events, or your own JSON-lines file, to the source",
                             description="Sends JSON events to the pipeline's first topic or its Kinesis stream "
                                         "(created with --partitions partitions or shards if missing) and records "
                                         "the produced offsets in .lakeline/produced/<topic>.jsonl. Sample corpora: "
                                         "orders (flat ~200-byte orders, the demo's), webhooks (nested events, "
                                         "for conf/examples/webhooks_*.yaml) and events (sixty event types in one "
                                         "topic, the type in the X-Event-Type header and in event_type, nested, "
                                         "with type conflicts: for add mode and routing). --from-file sends each "
                                         "non-blank line of a file as one event, as it is.")
    pipeline_arg(produce)
    what = produce.add_mutually_exclusive_group(required=True)
    what.add_argument("--count", type=int, help="number of sample events")
    what.add_argument("--from-file", type=Path, metavar="EVENTS.jsonl",
                      help="send this file's lines instead of sample events")
    produce.add_argument("--corpus", choices=["orders", "webhooks", "events"], default="orders",
                         help="the sample events to send with --count (default orders)")
    produce.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    produce.add_argument("--bad-ratio", type=float, default=0.0,
                         help="share of bad records, spread over every dead-letter kind (default 0)")
    produce.add_argument("--seed", type=int, help="random seed for reproducible content")
    produce.add_argument("--partitions", type=int, default=4, help="partitions if the topic is created (default 4)")
    produce.set_defaults(run=produce_events)

    ingest = sub.add_parser("ingest", help="run the streaming pipeline (prints one line per batch)",
                            description="Runs the pipeline until the backlog is ingested (available-now) or until "
                                        "SIGTERM/SIGINT (processing-time), then exits 0. Safe to kill at any "
                                        "moment: the next run neither duplicates nor skips.")
    ingest.add_argument("--pipeline", required=True, action="append", metavar="FILE|DIR",
                        help="pipeline YAML, e.g. conf/pipelines/orders_delta.yaml; repeat it, or give a folder "
                             "(every *.yaml in it), to run several pipelines in one Spark application: each its "
                             "own streaming query in its own scheduler pool, one that fails started again with "
                             "backoff while the others go on")
    ingest.add_argument("--trigger", help="available-now | processing-time=<N>ms|s|m (default: the pipeline's)")
    ingest.add_argument("--standby", action="store_true",
                        help="warm standby: start Spark, open the tables and warm the batch code, then wait for "
                             "the pipeline's driver to stop and take over: at once when it ran on this host (kill "
                             "-9 included), once its lease on S3 lapses (LAKELINE_LEASE_SECONDS, default 15) when "
                             "it ran on another host or hangs. Without it, a second driver of the same pipeline, on "
                             "any host, is refused")
    ingest.add_argument("--events", metavar="FILE|-",
                        help="also write the run's events as JSON lines (one object per event: run_started, "
                             "batch_committed, batch_replayed, commit_retried, stop_requested, run_finished, ...) to "
                             "FILE, or to stdout with '-' (the per-batch lines then go to stderr)")
    ingest.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics on http://HOST:PORT/metrics while the run lasts (records, "
                             "dead letters by reason, batch and phase durations, source lag, seconds since the last "
                             "commit, committed offsets, restarts, start plans, schema evolutions; README "
                             "'Operating'); 0 picks a free port and prints it")
    ingest.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address the metrics server listens on (default 127.0.0.1; 0.0.0.0 in a container "
                             "that Prometheus scrapes from outside)")
    ingest.set_defaults(run=ingest_run)

    rec = sub.add_parser("reconcile", help="exactly-once audit: produced vs rows + dead letters",
                         description=f"Compares every offset retained in the source with the table and the "
                                     f"dead-letter table. Exit code {int(ExitCode.NOT_EXACT)} when duplicates or "
                                     f"missing > 0.")
    pipeline_arg(rec)
    output_arg(rec)
    rec.set_defaults(run=reconcile)

    fresh = sub.add_parser("freshness", help="check a table against its pipeline's freshness SLA",
                           description="Stale when records are waiting in the source and the table's newest "
                                       "commit is older than freshness.max_staleness, or when more than "
                                       "freshness.max_lag_records are waiting (both from the pipeline YAML). An "
                                       "idle, fully ingested source is fresh. Kafka lag comes from the partition "
                                       "watermarks; Kinesis lag is counted by reading each shard from the table's "
                                       "recorded end, up to 100,000 records (beyond that: 'at least'). Exit code "
                                       f"{int(ExitCode.STALE)} when breached.")
    pipeline_arg(fresh)
    fresh.add_argument("--as-of", metavar="ISO-8601", help="the moment judged (default: now); Airflow passes the "
                                                            "run's data interval end")
    output_arg(fresh)
    fresh.set_defaults(run=freshness)


def check_config(args) -> ExitCode:
    from ingest.preflight import check_table

    config, settings = load(args)
    table = check_table(config, settings)
    print(json.dumps({"pipeline": config.model_dump(by_alias=True), "settings": settings.describe(),
                      "table": table}, indent=2, default=str))
    return ExitCode.OK


def produce_events(args) -> ExitCode:
    from ingest.produce import produce

    config, settings = load(args)
    result = produce(config, settings, args.count or 0, args.rate, args.bad_ratio, args.seed, args.partitions,
                     corpus=args.corpus, from_file=args.from_file)
    print(json.dumps(result.to_json()))
    return ExitCode.OK


def ingest_run(args) -> ExitCode:
    from ingest.events import Events, HumanLines, JsonLines, JsonLogLines, pipeline_context
    from ingest.lease import pipeline_lease
    from ingest.ownership import drive
    from ingest.pipeline import Pipeline

    from ingest.config import load_pipeline
    from ingest.settings import load_settings

    configs, settings = [load_pipeline(path) for path in pipeline_files(args.pipeline)], load_settings()
    if len(configs) > 1 and args.standby:
        raise ConfigError("--standby takes one --pipeline: start a standby per pipeline")
    with ExitStack() as closing:
        events = Events()
        human = JsonLogLines if settings.log_format == "json" else HumanLines
        if args.events == "-":
            events.subscribe(human(sys.stderr))
            events.subscribe(JsonLines(sys.stdout))
        else:
            events.subscribe(human(sys.stdout))
            if args.events:
                events.subscribe(JsonLines(closing.enter_context(open(args.events, "a", encoding="utf-8"))))
        if args.metrics_port is not None:
            _serve_metrics(events, args.metrics_host, args.metrics_port, closing)
        if len(configs) > 1:
            from ingest.multi import run_pipelines

            failed = [o for o in run_pipelines(configs, settings, args.trigger, events) if not o.ok]
            for outcome in failed:
                with pipeline_context(outcome.pipeline):  # a log record, so --log-format json names the pipeline
                    logging.getLogger("lakeline").error(f"lakeline: pipeline {outcome.pipeline} failed "
                                                        f"({outcome.failures} time(s)): {outcome.error}")
            return ExitCode.FAILED if failed else ExitCode.OK
        config = configs[0]
        closing.enter_context(pipeline_context(config.pipeline))
        lease = pipeline_lease(config.pipeline, config.checkpoint_location(settings), settings)
        pipeline = Pipeline(config, settings, trigger=args.trigger, events=events, lease=lease)
        with drive(pipeline, standby=args.standby) as driving:
            if driving:
                pipeline.run()
    return ExitCode.OK


def _serve_metrics(events, host: str, port: int, closing: ExitStack) -> None:
    """Subscribe run metrics to `events` and serve them until the command ends."""
    from ingest.metrics import RunMetrics, serve

    if not 0 <= port <= 65535:
        raise ConfigError(f"--metrics-port {port}: a port is 0-65535 (0 picks a free one)")
    metrics = RunMetrics()
    events.subscribe(metrics)
    try:
        server, thread = serve(metrics, port, host)
    except OSError as exc:
        raise ConfigError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror}); choose a free "
                          f"port, or 0 for any") from exc
    closing.callback(server.server_close)  # runs after shutdown (callbacks run last-in, first-out)
    closing.callback(server.shutdown)
    logging.getLogger("lakeline").info(f"lakeline: metrics on http://{host}:{server.server_port}/metrics")


def reconcile(args) -> ExitCode:
    from ingest.reconcile import reconcile as audit
    from lakeline import render
    from ingest.spark import build_spark
    from maintenance.presence import require_tables, spark_missing_tables

    config, settings = load(args)
    tables = (None, config.sink.dead_letters)
    require_tables(config, settings, args.pipeline, *tables)  # a pipeline that never ran has nothing to audit
    with spark_missing_tables(config, settings, args.pipeline, *tables):
        report = audit(config, settings, build_spark(settings, "lakeline-reconcile"))
    output_of(args).result(report.to_json(), lambda: render.reconcile(report))
    return ExitCode.OK if report.exact else ExitCode.NOT_EXACT


def freshness(args) -> ExitCode:
    from ingest.spark import build_spark
    from maintenance import metrics
    from maintenance.freshness import check
    from maintenance.presence import table_exists

    config, settings = load(args)
    try:
        as_of = datetime.fromisoformat(args.as_of) if args.as_of else datetime.now(UTC)
    except ValueError:
        raise ConfigError(f"--as-of {args.as_of!r} is not an ISO-8601 time") from None
    if as_of.tzinfo is None:
        raise ConfigError(f"--as-of {args.as_of!r}: give a time zone, e.g. 2026-11-22T10:00:00+00:00")
    # Without Spark (the table's reader facet), unless only Spark can open the catalog (an Iceberg JDBC catalog).
    # A pipeline that never ran has no table: records waiting and no commit yet is stale.
    spark = build_spark(settings, "lakeline-freshness") if table_exists(config, settings) is None else None
    report = check(config, settings, spark, as_of)
    metrics.report(settings, "freshness", {"pipeline": config.pipeline}, metrics.freshness_figures(report))

    def text() -> str:
        lag = f"{'' if report.lag_exact else 'at least '}{report.lag_records:,}"
        newest = report.last_commit_at or ("none" if report.table_exists else "none (the table does not exist "
                                                                               "yet: the pipeline has not run)")
        lines = [f"{report.pipeline}: {'FRESH' if report.ok else 'STALE'} as of {report.as_of}; newest commit "
                 f"{newest}, lag {lag} records"]
        return "\n".join(lines + [f"  ! {problem}" for problem in report.problems])

    output_of(args).result(report.to_json(), text)
    return ExitCode.OK if report.ok else ExitCode.STALE
