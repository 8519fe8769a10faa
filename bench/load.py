"""Open-loop load: sample order events at a fixed rate, each stamped with its *intended* send time.

    .venv/bin/python -m bench.load --topic T --rate 5000 --seconds 80

`event_time` of record i is t0 + i/rate (ms precision), whether or not the producer keeps up, so a stall anywhere
shows up as latency instead of silently lowering the load (no coordinated omission). Runs as its own process so
it never shares a GIL with the system under test. Prints one JSON line: sent, seconds, the schedule start and
end (epoch ms) and how far the producer itself fell behind.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, UTC


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, required=True, help="records per second")
    parser.add_argument("--seconds", type=float, required=True, help="how long to send")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--start-at", type=float, help="epoch seconds the schedule starts at (events are built "
                                                       "before it): back-to-back segments of one long load")
    args = parser.parse_args(argv)

    from confluent_kafka import Producer

    from ingest.adapters.kafka_admin import librdkafka_config
    from ingest.produce import good_event
    from ingest.settings import load_settings

    settings = load_settings()
    errors: list[str] = []

    def delivered(err, _msg) -> None:
        errors.append(str(err))

    # Only failed deliveries are reported: a Python callback per message costs the loop below ~10 % of its rate.
    producer = Producer({**librdkafka_config(settings), "linger.ms": 5, "batch.size": 1_000_000,
                         "compression.type": "lz4", "acks": "all", "enable.idempotence": True,
                         "on_delivery": delivered, "delivery.report.only.error": True})
    rng = random.Random(args.seed)
    total = int(args.rate * args.seconds)
    # Every event is generated and serialised before the clock starts, with a hole where its intended send time
    # goes: the timed loop only fills the hole and sends, so the load generator keeps up with high rates on a
    # small machine (at 20,000 msg/s it fell up to 60 s behind when it built each event on the clock).
    hole = "\u0000"
    now = datetime.now(UTC)
    payloads = []
    for _ in range(total):
        event = good_event(rng, now)
        event["event_time"] = hole
        head, tail = json.dumps(event, separators=(",", ":")).split(json.dumps(hole))
        payloads.append((head.encode() + b'"', b'"' + tail.encode(), event["customer_id"].encode()))
    seconds_text: dict[int, bytes] = {}

    if args.start_at is not None:
        # Late (the events took longer to build): the schedule still starts at --start-at and the producer catches
        # up, which producer_worst_behind_s reports.
        time.sleep(max(0.0, args.start_at - time.time()))
    print("schedule started", file=sys.stderr, flush=True)  # bench.latency times a kill -9 from here
    start_wall = args.start_at if args.start_at is not None else time.time()
    start_mono = time.monotonic() - (time.time() - start_wall)
    worst_behind = 0.0
    for i, (head, tail, key) in enumerate(payloads):
        due = i / args.rate
        ahead = due - (time.monotonic() - start_mono)
        if ahead > 0.001:
            time.sleep(ahead)
        else:
            worst_behind = max(worst_behind, -ahead)
        intended_ms = int((start_wall + due) * 1000)
        second, millis = divmod(intended_ms, 1000)
        prefix = seconds_text.get(second)
        if prefix is None:
            prefix = seconds_text[second] = datetime.fromtimestamp(second, UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.").encode()
        payload = b"".join((head, prefix, b"%03dZ" % millis, tail))
        while True:
            try:
                producer.produce(args.topic, value=payload, key=key)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    remaining = producer.flush(60)
    print(json.dumps({"sent": total - remaining - len(errors), "errors": len(errors) + remaining,
                      "seconds": round(time.monotonic() - start_mono, 2), "rate": args.rate,
                      "schedule_start_ms": int(start_wall * 1000),
                      "schedule_end_ms": int((start_wall + total / args.rate) * 1000),
                      "producer_worst_behind_s": round(worst_behind, 3)}), flush=True)
    return 0 if not errors and not remaining else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
