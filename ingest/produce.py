"""`lakeline produce`: realistic sample order events (~200 bytes of JSON) with a controlled share of bad records
of every kind the pipeline dead-letters. Records what it produced (per-partition offsets) for reconcile."""

from __future__ import annotations

import logging
import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, UTC
from pathlib import Path

from ingest.adapters.kafka_admin import KafkaAdmin, librdkafka_config
from ingest.config import PipelineConfig
from ingest.errors import ConfigError, LakelineError
from ingest.settings import Settings

log = logging.getLogger(__name__)

BAD_KINDS = ("malformed_json", "type_mismatch", "missing_required_field", "oversize", "invalid_utf8")
STATUSES = ("created", "paid", "shipped", "delivered", "cancelled")
CURRENCIES = ("EUR", "USD", "GBP", "JPY")
COUNTRIES = ("DE", "FR", "US", "GB", "JP", "NL", "ES", "IT")


@dataclass
class ProduceResult:
    topic: str
    count: int
    bad: dict[str, int] = field(default_factory=dict)
    # Kafka: partition -> [first offset, last offset]; Kinesis: shard id -> [first sequence, last sequence]
    partitions: dict[int | str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    def to_json(self) -> dict:
        return {"topic": self.topic, "count": self.count, "bad": self.bad, "bad_total": self.bad_total,
                "partitions": {str(k): v for k, v in sorted(self.partitions.items())},
                "seconds": round(self.seconds, 3)}


def good_event(rng: random.Random, base: datetime) -> dict:
    event_time = base - timedelta(seconds=rng.randint(0, 2 * 86400))
    return {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "event_time": event_time.strftime("%Y-%m-%dT%H:%M:%S.") + f"{event_time.microsecond // 1000:03d}Z",
        "customer_id": f"c-{rng.randint(1, 50_000):06d}",
        "order_id": f"o-{rng.getrandbits(40):012x}",
        "status": rng.choice(STATUSES),
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(CURRENCIES),
        "items": rng.randint(1, 9),
        "country": rng.choice(COUNTRIES),
    }


def bad_payload(kind: str, event: dict, max_bytes: int) -> bytes:
    if kind == "malformed_json":
        return json.dumps(event).encode()[:-7]
    if kind == "type_mismatch":
        return json.dumps({**event, "amount": "twelve euros"}).encode()
    if kind == "missing_required_field":
        return json.dumps({k: v for k, v in event.items() if k != "order_id"}).encode()
    if kind == "oversize":
        return json.dumps({**event, "note": "x" * (max_bytes + 1)}).encode()
    if kind == "invalid_utf8":
        return json.dumps(event).encode().replace(b'"status"', b'"st\xc3\x28tus"')
    raise ValueError(kind)


def source_topic(config: PipelineConfig) -> str:
    if config.source.kind != "kafka" or not config.source.topics:
        raise ConfigError(f"pipeline {config.pipeline}: `produce` needs a Kafka source with explicit source.topics")
    return config.source.topics[0]


def produce(config: PipelineConfig, settings: Settings, count: int, rate: float | None = None,
            bad_ratio: float = 0.0, seed: int | None = None, partitions: int = 4,
            record_dir: Path | None = None, corpus: str = "orders", from_file: Path | None = None) -> ProduceResult:
    """Send `count` events of the sample `corpus` (CORPORA) to the pipeline's first topic (created with
    `partitions` if missing), or to its Kinesis stream (created with `partitions` shards if missing). With
    `from_file`, send that JSON-lines file's lines instead, one event per line, as they are."""
    if from_file is not None:
        count = _line_count(from_file)
    if count < 0 or not 0.0 <= bad_ratio <= 1.0:
        raise ConfigError("--count must be >= 0 and --bad-ratio between 0 and 1")
    if corpus not in CORPORA:
        raise ConfigError(f"--corpus {corpus!r}: choose one of {', '.join(CORPORA)}")
    result = ProduceResult(config.source.stream if config.source.kind == "kinesis" else source_topic(config), count)
    events = sample_messages(config, count, bad_ratio, seed, result, corpus, from_file)
    if config.source.kind == "kinesis":
        return _produce_kinesis(config, settings, result, rate, events, partitions, record_dir)
    from confluent_kafka import Producer

    topic = source_topic(config)
    if KafkaAdmin(settings).ensure_topic(topic, partitions):
        log.info(f"created topic {topic} ({partitions} partitions)")
    producer = Producer({**librdkafka_config(settings), "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "enable.idempotence": True, "acks": "all"})
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        span = result.partitions.setdefault(msg.partition(), [msg.offset(), msg.offset()])
        span[0], span[1] = min(span[0], msg.offset()), max(span[1], msg.offset())

    started = time.monotonic()
    next_report = started + 5
    for i, (key, payload, headers) in enumerate(events):
        while True:
            try:
                producer.produce(topic, value=payload, key=key.encode(), headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if rate:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if time.monotonic() >= next_report:
            log.info(f"  produced {i + 1}/{count} ({(i + 1) / (time.monotonic() - started):,.0f} msg/s)")
            next_report += 5
    remaining = producer.flush(60)
    result.seconds = time.monotonic() - started
    if remaining or errors:
        raise LakelineError(f"produce: {remaining} messages undelivered, {len(errors)} delivery errors "
                            f"(first: {errors[:1]}); nothing is recorded as produced for them")
    _record(result, record_dir or _default_record_dir())
    return result


CORPORA = ("orders", "webhooks", "events")


def sample_events(config: PipelineConfig, count: int, bad_ratio: float, seed: int | None, result: ProduceResult,
                  corpus: str = "orders", from_file: Path | None = None) -> Iterator[tuple[str, bytes]]:
    """(key, payload) of the events to send: `count` of the sample `corpus`, or every non-blank line of `from_file`
    as it is. Counts the generated bad ones by dead-letter reason in `result.bad`."""
    for key, payload, _headers in sample_messages(config, count, bad_ratio, seed, result, corpus, from_file):
        yield key, payload


def sample_messages(config: PipelineConfig, count: int, bad_ratio: float, seed: int | None, result: ProduceResult,
                    corpus: str = "orders", from_file: Path | None = None
                    ) -> Iterator[tuple[str, bytes, list[tuple[str, bytes]] | None]]:
    """`sample_events` with each message's Kafka headers (None: none; the `events` corpus carries the event type
    in `X-Event-Type`). `events` has no bad records: its type conflicts are what `bad_ratio` would add."""
    if from_file is not None:
        with open(from_file, "rb") as lines:
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    yield f"line-{number}", line.rstrip(b"\r\n"), None
        return
    if corpus == "webhooks":
        from ingest.corpus import webhooks

        for key, payload, reason in webhooks(count, bad_ratio, seed):
            if reason is not None:
                result.bad[reason] = result.bad.get(reason, 0) + 1
            yield key, payload, None
        return
    if corpus == "events":
        from ingest.corpus import heterogeneous

        for key, headers, payload in heterogeneous(count, seed):
            yield key, payload, headers
        return
    for key, payload in _orders(config, count, bad_ratio, seed, result):
        yield key, payload, None


def _line_count(path: Path) -> int:
    if not path.is_file():
        raise ConfigError(f"--from-file {path}: no such file")
    with open(path, "rb") as lines:
        return sum(1 for line in lines if line.strip())


def _orders(config: PipelineConfig, count: int, bad_ratio: float, seed: int | None, result: ProduceResult):
    """(key, payload) of `count` sample order events; counts the bad ones by kind in `result`."""
    rng = random.Random(seed)
    base = datetime.now(UTC).replace(microsecond=0)
    max_bytes = config.record_schema.max_record_bytes
    for _ in range(count):
        event = good_event(rng, base)
        if bad_ratio and rng.random() < bad_ratio:
            kind = BAD_KINDS[sum(result.bad.values()) % len(BAD_KINDS)]
            result.bad[kind] = result.bad.get(kind, 0) + 1
            payload = bad_payload(kind, event, max_bytes)
        else:
            if rng.random() < 0.02:
                event["coupon"] = f"SAVE{rng.randint(5, 30)}"  # undeclared field -> _rescued_data
            payload = json.dumps(event, separators=(",", ":")).encode()
        yield event["customer_id"], payload


def _produce_kinesis(config: PipelineConfig, settings: Settings, result: ProduceResult, rate: float | None,
                     events: Iterator[tuple[str, bytes, list | None]], shards: int,
                     record_dir: Path | None) -> ProduceResult:
    """put_records in chunks of 500; failed entries (throttling) are re-sent with backoff, in order per key."""
    from ingest.adapters.kinesis import BACKOFF_CAP, BACKOFF_FIRST, KinesisClient, client_options
    from ingest.errors import KinesisError, KinesisThrottled
    from ingest.retry import retrying

    stream = config.source.stream
    client = KinesisClient(client_options(settings))
    try:
        client.call("describe_stream_summary", StreamName=stream)
    except KinesisError as exc:
        if "not found" not in str(exc):
            raise
        client.call("create_stream", StreamName=stream, ShardCount=shards)
        client.client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 1})
        log.info(f"created stream {stream} ({shards} shards)")
    started = time.monotonic()
    pending: list[dict] = []

    def send(entries: list[dict]) -> None:
        """put_records; the refused entries stay in `entries` (in order) and raise KinesisThrottled."""
        response = client.call("put_records", StreamName=stream, Records=entries)
        refused = []
        for entry, outcome in zip(entries, response["Records"], strict=True):
            if "SequenceNumber" in outcome:
                seq = int(outcome["SequenceNumber"])
                span = result.partitions.setdefault(outcome["ShardId"], [seq, seq])
                span[0], span[1] = min(span[0], seq), max(span[1], seq)
            else:
                refused.append((entry, outcome.get("ErrorCode")))
        entries[:] = [entry for entry, _ in refused]
        if refused:
            raise KinesisThrottled(f"{len(refused)} records refused ({refused[0][1]})")

    def flush() -> None:
        entries = list(pending)
        if not entries:
            return
        try:
            for attempt in retrying((KinesisThrottled,), 9, first=BACKOFF_FIRST, cap=BACKOFF_CAP, jitter=True):
                with attempt:
                    send(entries)
        except KinesisThrottled as exc:
            raise LakelineError(f"produce: still refused by Kinesis after 8 retries: {exc}") from exc
        pending.clear()

    for i, (key, payload, _headers) in enumerate(events):  # Kinesis records carry no headers
        pending.append({"Data": payload, "PartitionKey": key})
        if len(pending) == 500:
            flush()
        if rate:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                flush()
                time.sleep(ahead)
    flush()
    result.seconds = time.monotonic() - started
    _record(result, record_dir or _default_record_dir())
    return result


def _default_record_dir() -> Path:
    from infra.paths import state_dir

    return state_dir() / "produced"


def _record(result: ProduceResult, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    line = {"at": datetime.now(UTC).isoformat(), **result.to_json()}
    with open(directory / f"{result.topic}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")
