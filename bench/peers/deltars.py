"""Peer (c): a plain Python consumer (confluent-kafka) writing batches with delta-rs (`deltalake`).

    .venv/bin/python -m bench.peers.deltars --topic T --location s3://... [--max-records 50000] [--max-wait-ms 500]

Each batch: poll until --max-records or --max-wait-ms, parse the JSON, append one Delta commit, then commit the
Kafka offsets. That is at-least-once (a crash between the two replays the batch); the benchmarks compare it only
on steady runs, where it is exact. Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
import uuid
from datetime import datetime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--location", required=True, help="s3:// or s3a:// table location")
    parser.add_argument("--max-records", type=int, default=50_000)
    parser.add_argument("--max-wait-ms", type=int, default=500)
    parser.add_argument("--group", help="consumer group (default: a new one, reading from the earliest offset); "
                                        "give the same one to resume after a restart")
    args = parser.parse_args(argv)

    import pyarrow as pa
    from confluent_kafka import Consumer
    from deltalake import DeltaTable, write_deltalake

    from ingest.formats.delta import delta_rs_uri, delta_storage_options
    from ingest.adapters.kafka_admin import librdkafka_config
    from ingest.settings import load_settings

    settings = load_settings()
    uri = delta_rs_uri(args.location)
    # One writer only, so no lock is needed for the log (delta-rs refuses S3 writes without one or this flag).
    options = {**delta_storage_options(settings), "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    schema = pa.schema([("event_id", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")),
                        ("customer_id", pa.string()), ("order_id", pa.string()), ("status", pa.string()),
                        ("amount", pa.float64()), ("currency", pa.string()), ("items", pa.int32()),
                        ("country", pa.string()), ("event_date", pa.date32())])
    group = args.group or f"bench-deltars-{uuid.uuid4().hex[:8]}"
    # session.timeout.ms at the broker's minimum: a restarted consumer gets its partitions back in ~6 s instead of
    # waiting out the killed member's 45 s default session (what any user of this design would tune first).
    consumer = Consumer({**librdkafka_config(settings), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([args.topic])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    table = None
    print("READY", flush=True)
    while not stop.is_set():
        records: list[dict] = []
        deadline = time.monotonic() + args.max_wait_ms / 1000
        while len(records) < args.max_records and time.monotonic() < deadline and not stop.is_set():
            for message in consumer.consume(min(10_000, args.max_records - len(records)), timeout=0.05):
                if message.error():
                    raise RuntimeError(f"consumer error: {message.error()}")
                event = json.loads(message.value())
                moment = datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
                event["event_time"], event["event_date"] = moment, moment.date()
                records.append(event)
        if records:
            # After the first commit the table object is kept and updated in place, as a long-running writer
            # would; passing the URI would re-open the table (replay its log) on every batch.
            write_deltalake(table if table is not None else uri, pa.Table.from_pylist(records, schema=schema),
                            mode="append", partition_by=["event_date"], storage_options=options)
            if table is None:
                table = DeltaTable(uri, storage_options=options)
            consumer.commit(asynchronous=False)
    consumer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
