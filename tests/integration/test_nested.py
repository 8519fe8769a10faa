"""Real event data end to end: the nested webhooks corpus (several event types in one topic; structs, arrays of
structs, maps, decimals as strings and numbers, ISO and epoch-millisecond timestamps, keys that are not column
names) through the real broker into both formats. Exact, and the nested values read back the same through Spark and
through DuckDB (the analyst read), and `lakeline tables` / `lakeline query` over the tables the pipeline wrote.
Costs about 40 s per format."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from ingest.analyst import duckdb_query
from ingest.config import load_pipeline
from ingest.corpus import webhooks
from ingest.formats import tables_for
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import lakeline_in_process

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED = 20261124


def _pipeline(conf_dir: Path, fmt: str):
    data = yaml.safe_load((REPO / "conf" / "examples" / f"webhooks_{fmt}.yaml").read_text())
    name = f"t_hooks_{fmt}_{random.getrandbits(32):08x}"
    data["pipeline"] = name
    data["source"]["topics"] = [name]
    data["source"]["max_offsets_per_trigger"] = 1500
    data["sink"].update(table=name, namespace="tests")
    data["source"].update(include_key="string", include_headers=True)
    path = conf_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_pipeline(path)


def _expected(count: int, bad_ratio: float) -> dict:
    """What the good events of the corpus hold (the generator is deterministic for a seed, timestamps aside)."""
    types: Counter = Counter()
    qty, payments, tags, rescued = 0, Decimal(0), 0, 0
    for _key, payload, reason in webhooks(count, bad_ratio, SEED):
        if reason is not None:
            continue
        event = json.loads(payload)
        types[event["type"]] += 1
        qty += sum(item["qty"] for item in event.get("order", {}).get("items", []))
        payments += Decimal(event["payment"]["amount"]) if "payment" in event else 0
        tags += len(event["customer"].get("tags", []))
        rescued += "experiment" in event
    return {"types": dict(types), "qty": qty, "payments": payments, "tags": tags, "rescued": rescued}


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_nested_webhooks_land_exactly_and_read_back_through_spark_and_duckdb(fmt, conf_dir, settings, spark,
                                                                             tmp_path, capsys):
    config = _pipeline(conf_dir, fmt)
    count, bad_ratio = 3000, 0.02
    produced = produce(config, settings, count, bad_ratio=bad_ratio, seed=SEED, corpus="webhooks")
    assert produced.bad_total > 0 and set(produced.bad) == {"malformed_json", "type_mismatch",
                                                            "missing_required_field"}
    _send_with_headers(config, settings, 3)
    own = tmp_path / "events.jsonl"  # a user's own file: one good line, a blank one, one that is not JSON
    own.write_text('{"event-id": "f1", "type": "file", "@timestamp": "2026-11-20T09:00:00+01:00", '
                   '"customer": {"id": "c-file"}}\n\n{not json\n')
    assert produce(config, settings, 0, from_file=own).count == 2
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)

    report = reconcile(config, settings, spark)
    assert report.exact, (report.missing_sample, report.duplicate_sample)
    bad = {**produced.bad, "malformed_json": produced.bad["malformed_json"] + 1}  # the file's `{not json`
    assert report.dead_letters == produced.bad_total + 1 and report.dead_letters_by_reason == bad
    want = _expected(count, bad_ratio)

    table = tables_for(spark, config, settings)[0].read()
    table.createOrReplaceTempView("hooks")
    assert {r[0]: r[1] for r in spark.sql("SELECT event_type, count(*) FROM hooks GROUP BY 1").collect()} == \
        {**want["types"], "ping": 3, "file": 1}
    # Source metadata: the Kafka key as text and the headers by name (null for records sent without any).
    pings = spark.sql("SELECT _key, _headers FROM hooks WHERE event_type = 'ping' ORDER BY _key").collect()
    assert [(r["_key"], bytes(r["_headers"]["trace"])) for r in pings] == [(f"k{i}", f"t{i}".encode()) for i in
                                                                          range(3)]
    assert spark.sql("SELECT count(*) FROM hooks WHERE _headers IS NULL AND _key LIKE 'c-%'").first()[0] == \
        sum(want["types"].values())
    spark_figures = spark.sql(
        "SELECT (SELECT sum(i.qty) FROM hooks LATERAL VIEW explode(`order`.items) x AS i), "
        "sum(payment.amount), sum(size(customer.tags)) FILTER (WHERE customer.tags IS NOT NULL), "
        "count(_rescued_data) FROM hooks").first()
    assert tuple(spark_figures) == (want["qty"], want["payments"], want["tags"], want["rescued"])
    # Types as declared: decimals, timestamps from ISO and epoch millis, a map, JSON text.
    sample = spark.sql("SELECT * FROM hooks WHERE event_type = 'order.created' LIMIT 1").first()
    assert isinstance(sample["order"]["total"], Decimal) and isinstance(sample["received_at"], datetime)
    assert sample["received_at"] > sample["occurred_at"]
    assert json.loads(sample["context"])["ua"] in ("web", "ios", "android")
    schema = table.schema
    assert schema["order"].dataType.simpleString().startswith("struct<id:string,total:decimal(12,2)")
    assert schema["customer"].dataType["attributes"].dataType.simpleString() == "map<string,string>"

    analyst = duckdb_query(config, settings, """
        SELECT (SELECT sum(i.qty) FROM (SELECT unnest("order".items) AS i FROM t)),
               sum(payment.amount), sum(len(customer.tags)), count(_rescued_data) FROM t""")[0]
    assert (int(analyst[0]), Decimal(analyst[1]), int(analyst[2]), analyst[3]) == \
        (want["qty"], want["payments"], want["tags"], want["rescued"])
    letters = duckdb_query(config, settings, "SELECT _error, _error_detail FROM t", table=config.sink.dead_letters)
    details = {reason: detail for reason, detail in letters}
    assert "customer.id" in details["type_mismatch"] or "occurred_at" in details["type_mismatch"]
    assert datetime.now(UTC) > sample["occurred_at"].replace(tzinfo=UTC)

    # The analyst's commands over the tables the pipeline wrote (its commit records in them), Spark-free and
    # in-process: about 1 s.
    path = str(conf_dir / f"{config.pipeline}.yaml")
    code, out, err = lakeline_in_process(capsys, "tables", "--pipeline", path, "--output", "json")
    assert code == 0, err
    listing = {row["table"]: row for row in json.loads(out)}
    main_row, letters_row = listing[config.sink.table], listing[config.sink.dead_letters]
    assert (main_row["sla"], main_row["waiting_records"], main_row["rows"]) == ("FRESH", 0, report.rows)
    assert sum(main_row["complete_through"][config.source.topics[0]].values()) == report.produced
    assert (letters_row["created"], letters_row["rows"]) == (True, report.dead_letters)
    code, out, err = lakeline_in_process(capsys, "query", "--pipeline", path, "--freshness", "--output", "json",
                                         f"SELECT count(*) AS n, sum(len(customer.tags)) AS tags FROM "
                                         f"{config.sink.table}")
    assert code == 0 and json.loads(out) == [{"n": report.rows, "tags": want["tags"]}], err
    assert f"{config.sink.table}: FRESH, data as of " in err and ", 0 waiting, " in err
    # Time travel and the incremental read over the pipeline's own commits: the rows as of its first batch plus
    # the rows appended since are the table.
    code, out, err = lakeline_in_process(capsys, "tables", "--pipeline", path, "--history", config.sink.table,
                                         "--output", "json")
    first = next(v["version"] for v in json.loads(out) if v["pipeline"] == config.pipeline)
    counts = []
    for flag in ("--as-of", "--since"):
        code, out, err = lakeline_in_process(capsys, "query", "--pipeline", path, "--output", "json", flag,
                                             str(first), f"SELECT count(*) AS n FROM {config.sink.table}")
        assert code == 0, err
        counts.append(json.loads(out)[0]["n"])
    assert 0 < counts[0] < report.rows and sum(counts) == report.rows, counts

    # schema infer reads the topic and proposes a block that loads; schema diff finds nothing to change.
    from ingest.schema_tools import diff, infer_schema, sample as sample_source

    sampled = sample_source(config, settings, 500)
    proposed = {f["name"]: f for f in infer_schema(sampled).fields}
    # One value that is not ISO-8601 (the corpus's type_mismatch payloads carry "yesterday") keeps the field a
    # string, as add mode would type it; without those, the ISO strings propose a timestamp.
    not_iso = [r for r in sampled if b'"@timestamp": "yesterday"' in r]
    assert proposed["timestamp"]["json_name"] == "@timestamp"
    assert proposed["timestamp"]["type"] == ("string" if not_iso else "timestamp")
    iso_only = {f["name"]: f for f in infer_schema([r for r in sampled if r not in not_iso]).fields}
    assert iso_only["timestamp"]["type"] == "timestamp"
    assert proposed["order"]["type"].startswith("struct<id:string,total:double,currency:string,items:array<struct<")
    assert proposed["event_id"]["json_name"] == "event-id"
    same = diff(spark, config, settings)
    assert same.exists and (same.changes, same.refusals, same.table_only) == ([], [], [])


def _send_with_headers(config, settings, count: int) -> None:
    from confluent_kafka import Producer

    from ingest.adapters.kafka_admin import librdkafka_config

    producer = Producer(librdkafka_config(settings))
    for i in range(count):
        event = {"event-id": f"ping-{i}", "type": "ping", "@timestamp": "2026-11-20T10:00:00Z",
                 "customer": {"id": f"c-ping-{i}"}}
        producer.produce(config.source.topics[0], value=json.dumps(event).encode(), key=f"k{i}".encode(),
                         headers=[("trace", f"t{i}".encode()), ("source", b"test")])
    assert producer.flush(30) == 0


def test_every_strict_json_case_gets_its_reason_end_to_end(conf_dir, settings, spark):
    """The unit tests' strict-JSON payloads through the real broker into a Delta table: each lands as a row or
    as a dead letter with the reason and detail the unit test names (which, as there, sends every type conflict to
    the dead letters: schema.on_type_conflict: dead_letter). About 15 s."""
    from confluent_kafka import Producer

    from ingest.adapters.kafka_admin import KafkaAdmin, librdkafka_config
    from tests.helpers import pipeline_dict, write_pipeline
    from tests.unit.test_transforms import STRICT_CASES

    data = pipeline_dict("delta")
    data["schema"] = {**data["schema"], "on_type_conflict": "dead_letter"}
    config = load_pipeline(write_pipeline(conf_dir, data))
    topic = config.source.topics[0]
    KafkaAdmin(settings).ensure_topic(topic, 1)
    producer = Producer(librdkafka_config(settings))
    for payload, _reason, _detail in STRICT_CASES:
        producer.produce(topic, value=payload)
    assert producer.flush(30) == 0
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)

    main, dead = tables_for(spark, config, settings)
    landed = {r["_offset"]: None for r in main.read().select("_offset").collect()}
    landed.update({r["_offset"]: (r["_error"], r["_error_detail"]) for r in dead.read().collect()})
    assert sorted(landed) == list(range(len(STRICT_CASES)))
    for offset, (payload, reason, detail) in enumerate(STRICT_CASES):
        got = landed[offset]
        assert (got and got[0]) == reason, (payload, got)
        if detail is not None:
            assert detail in got[1], (payload, got)
    assert reconcile(config, settings, spark).exact
