"""The pipeline commands: check-config, produce, ingest, reconcile, freshness."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from ingest.errors import ConfigError, ExitCode
from lakeline.commands import load, pipeline_arg
from lakeline.output import output_arg, output_of


def register(sub) -> None:
    check = sub.add_parser("check-config", help="validate a pipeline YAML and print the resolved settings")
    pipeline_arg(check)
    check.set_defaults(run=check_config)

    produce = sub.add_parser("produce", help="send sample events, or your own JSON-lines file, to the source",
                             description="Sends JSON events to the pipeline's first topic or its Kinesis stream "
                                         "(created with --partitions partitions or shards if missing) and records "
                                         "the produced offsets in .lakeline/produced/<topic>.jsonl. Sample corpora: "
                                         "orders (flat ~200-byte orders, the demo's) and webhooks (nested events, "
                                         "for conf/examples/webhooks_*.yaml). --from-file sends each non-blank line "
                                         "of a file as one event, as it is.")
    pipeline_arg(produce)
    what = produce.add_mutually_exclusive_group(required=True)
    what.add_argument("--count", type=int, help="number of sample events")
    what.add_argument("--from-file", type=Path, metavar="EVENTS.jsonl",
                      help="send this file's lines instead of sample events")
    produce.add_argument("--corpus", choices=["orders", "webhooks"], default="orders",
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
    pipeline_arg(ingest)
    ingest.add_argument("--trigger", help="available-now | processing-time=<N>ms|s|m (default: the pipeline's)")
    ingest.add_argument("--standby", action="store_true",
                        help="warm standby: start Spark, open the tables and warm the batch code, then wait for "
                             "the pipeline's driver on this host to exit (kill -9 included) and take over at once. "
                             "Without it, a second driver of the same pipeline on this host is refused")
    ingest.add_argument("--events", metavar="FILE|-",
                        help="also write the run's events as JSON lines (one object per event: run_started, "
                             "batch_committed, batch_replayed, commit_retried, stop_requested, run_finished, ...) to "
                             "FILE, or to stdout with '-' (the per-batch lines then go to stderr)")
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
    config, settings = load(args)
    print(json.dumps({"pipeline": config.model_dump(by_alias=True), "settings": settings.describe()},
                     indent=2, default=str))
    return ExitCode.OK


def produce_events(args) -> ExitCode:
    from ingest.produce import produce

    config, settings = load(args)
    result = produce(config, settings, args.count or 0, args.rate, args.bad_ratio, args.seed, args.partitions,
                     corpus=args.corpus, from_file=args.from_file)
    print(json.dumps(result.to_json()))
    return ExitCode.OK


def ingest_run(args) -> ExitCode:
    from ingest.driver_lock import DriverLock
    from ingest.events import Events, HumanLines, JsonLines
    from ingest.pipeline import Pipeline

    config, settings = load(args)
    with ExitStack() as closing:
        events = Events()
        if args.events == "-":
            events.subscribe(HumanLines(sys.stderr))
            events.subscribe(JsonLines(sys.stdout))
        else:
            events.subscribe(HumanLines(sys.stdout))
            if args.events:
                events.subscribe(JsonLines(closing.enter_context(open(args.events, "a", encoding="utf-8"))))
        pipeline = Pipeline(config, settings, trigger=args.trigger, events=events)
        lock = DriverLock(config.pipeline, config.checkpoint_location(settings))
        if args.standby:
            if not _standby(pipeline, lock, events):
                return ExitCode.OK
        else:
            lock.acquire()
        try:
            pipeline.run()
        finally:
            lock.release()
    return ExitCode.OK


def _standby(pipeline, lock, events) -> bool:
    """Warm up, then wait for the driver lock. False when stopped (SIGTERM/SIGINT) before taking over."""
    import signal
    import threading

    from ingest.events import StandbyReady, StandbyStopped, StandbyTakingOver

    name = pipeline.config.pipeline
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        events.emit(StandbyReady(pipeline=name, warm_seconds=pipeline.warm_up(), lock=str(lock.path)))
        if not lock.wait(stop):
            events.emit(StandbyStopped(pipeline=name))
            return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    events.emit(StandbyTakingOver(pipeline=name))
    return True


def reconcile(args) -> ExitCode:
    from ingest.reconcile import reconcile as audit
    from lakeline import render
    from ingest.spark import build_spark

    config, settings = load(args)
    report = audit(config, settings, build_spark(settings, "lakeline-reconcile"))
    output_of(args).result(report.to_json(), lambda: render.reconcile(report))
    return ExitCode.OK if report.exact else ExitCode.NOT_EXACT


def freshness(args) -> ExitCode:
    from ingest.spark import build_spark
    from maintenance.freshness import check

    config, settings = load(args)
    try:
        as_of = datetime.fromisoformat(args.as_of) if args.as_of else datetime.now(UTC)
    except ValueError:
        raise ConfigError(f"--as-of {args.as_of!r} is not an ISO-8601 time") from None
    if as_of.tzinfo is None:
        raise ConfigError(f"--as-of {args.as_of!r}: give a time zone, e.g. 2026-11-22T10:00:00+00:00")
    report = check(config, settings, build_spark(settings, "lakeline-freshness"), as_of)

    def text() -> str:
        lag = f"{'' if report.lag_exact else 'at least '}{report.lag_records:,}"
        lines = [f"{report.pipeline}: {'FRESH' if report.ok else 'STALE'} as of {report.as_of}; newest commit "
                 f"{report.last_commit_at or 'none'}, lag {lag} records"]
        return "\n".join(lines + [f"  ! {problem}" for problem in report.problems])

    output_of(args).result(report.to_json(), text)
    return ExitCode.OK if report.ok else ExitCode.STALE
