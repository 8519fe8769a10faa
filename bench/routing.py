"""A routed pipeline (`sink.route`, one table per event kind) against the same events into one table: records/s
per format. Prints a table and writes bench/results/routing-<date>.{json,md}.

    .venv/bin/python -m bench.routing --count 20000 --kinds 58 --max-offsets 10000

One topic gets --count sample order events, each with an `X-Event` header naming one of --kinds kinds (round
robin). Per format, two pipelines read it in one Spark session, available-now, rescue mode: "one table" (no route)
and "routed" (`by: header:X-Event`, one table per kind). Measured per pipeline: the seconds of its batches (from
the first batch's start to the last commit; Spark and table creation before the first batch excluded, the routed
tables' creation in the first batch included), records/s over that, batches, and the mean of the routed phase
(the routed tables' commits side by side) per batch. Both must reconcile exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

from bench.common import document, orders_pipeline, write


def _events(count: int, kinds: int) -> list[tuple[bytes, dict[str, str]]]:
    import random
    from datetime import UTC, datetime

    from ingest.produce import good_event

    rng, base = random.Random(7), datetime.now(UTC)
    return [(json.dumps(good_event(rng, base)).encode(), {"X-Event": f"kind-{i % kinds:03d}"})
            for i in range(count)]


def _send(settings, topic: str, events) -> None:
    from confluent_kafka import Producer

    from ingest.adapters.kafka_admin import KafkaAdmin, librdkafka_config, new_client

    KafkaAdmin(settings).ensure_topic(topic, 2)
    producer = new_client(Producer, {**librdkafka_config(settings), "linger.ms": 50})
    for payload, headers in events:
        while True:
            try:
                producer.produce(topic, payload, headers=list(headers.items()))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer did not deliver every event")


def measure(spark, settings, fmt: str, topic: str, count: int, kinds: int, max_offsets: int, run_id: str) -> list:
    from ingest.config import PipelineConfig
    from ingest.pipeline import Pipeline
    from ingest.reconcile import reconcile

    rows = []
    for mode in ("one-table", "routed"):
        name = f"bench_route_{fmt}_{mode.replace('-', '_')}_{run_id}"
        data = orders_pipeline(name, fmt, topic, max_offsets).model_dump(by_alias=True)
        data["source"]["include_headers"] = True
        if mode == "routed":
            data["sink"]["route"] = {"by": "header:X-Event", "table": name + "_{value}", "max_tables": max(kinds, 1)}
        config = PipelineConfig.model_validate(data)
        began = time.monotonic()
        summary = Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
        wall = time.monotonic() - began
        batches = summary.batches
        seconds = sum(b.seconds for b in batches)
        report = reconcile(config, settings, spark)
        exact = report.exact and report.rows == count
        routes = [b.phases.get("routes", 0.0) for b in batches]
        row = {"benchmark": "routing", "format": fmt, "mode": mode, "records": count, "kinds": kinds,
               "tables": len({t for b in batches for t in b.routed}) + 1 if mode == "routed" else 1,
               "batches": len(batches), "batch_seconds": round(seconds, 2), "run_seconds": round(wall, 2),
               "records_per_s": round(count / seconds, 1) if seconds else None,
               "routes_phase_mean_s": round(sum(routes) / len(routes), 2) if mode == "routed" and routes else None,
               "exact": exact}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--kinds", type=int, default=58)
    parser.add_argument("--max-offsets", type=int, default=10_000, help="records per micro-batch")
    parser.add_argument("--formats", nargs="+", choices=["delta", "iceberg"], default=["delta", "iceberg"])
    parser.add_argument("--no-write", action="store_true", help="print only (quick runs)")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    topic = f"bench_route_{run_id}"
    print(f"producing {args.count:,} events of {args.kinds} kinds to {topic} ...", flush=True)
    _send(settings, topic, _events(args.count, args.kinds))
    spark = build_spark(settings, "lakeline-bench-routing")
    results = []
    try:
        for fmt in args.formats:
            results += measure(spark, settings, fmt, topic, args.count, args.kinds, args.max_offsets, run_id)
    finally:
        spark.stop()
    lines = ["| format | mode | tables | batches | batch seconds | records/s | routed phase per batch (s) | exact |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        phase = "-" if r["routes_phase_mean_s"] is None else r["routes_phase_mean_s"]
        lines.append(f"| {r['format']} | {r['mode']} | {r['tables']} | {r['batches']} | {r['batch_seconds']} | "
                     f"{r['records_per_s']} | {phase} | {r['exact']} |")
    print("\n".join(lines))
    if not args.no_write:
        doc = document("routing", argv, results, count=args.count, kinds=args.kinds, max_offsets=args.max_offsets)
        write(doc, "Routing: one topic into one table per kind vs one table", "\n".join(lines) + "\n")
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    sys.exit(main())
