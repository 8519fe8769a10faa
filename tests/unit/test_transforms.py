"""The pure decode/shape functions on small in-memory frames (plain local Spark, no connectors)."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

import pytest

from ingest.config import PipelineConfig
from ingest.transforms import (dead_letter_rows, decode, is_new, not_yet_committed, table_rows,
                               table_schema)
from tests.helpers import pipeline_dict


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("transforms")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.mapKeyDedupPolicy", "LAST_WIN").config("spark.sql.shuffle.partitions", "1")
               .getOrCreate())
    yield session
    session.stop()


@pytest.fixture
def config() -> PipelineConfig:
    return PipelineConfig.model_validate(pipeline_dict("delta", name="unit"))


GOOD = {"event_id": "e1", "event_time": "2026-11-20T10:15:00.250Z", "customer_id": "c1", "order_id": "o1",
        "status": "paid", "amount": 12.5, "currency": "EUR", "items": 2, "country": "DE"}


def _frame(spark, payloads):
    rows = [("orders", 0, i, datetime(2026, 11, 20), b"k", p) for i, p in enumerate(payloads)]
    return spark.createDataFrame(rows, "_topic string, _kafka_partition int, _offset long, "
                                       "_kafka_timestamp timestamp, _key binary, _raw binary")


def _errors(spark, config, payloads):
    decoded = decode(_frame(spark, payloads), config.record_schema)
    return [(r["_error"], r["_error_detail"]) for r in decoded.orderBy("_offset").collect()]


def test_good_record_is_typed_and_partitioned(spark, config):
    from pyspark.sql import functions as F

    decoded = decode(_frame(spark, [json.dumps(GOOD).encode()]), config.record_schema)
    row = table_rows(decoded, config, F.lit(datetime(2026, 11, 21)).cast("timestamp")).first()
    assert row["amount"] == 12.5 and row["items"] == 2
    assert row["event_time"] == datetime(2026, 11, 20, 10, 15, 0, 250000)
    assert str(row["event_date"]) == "2026-11-20"
    assert row["_rescued_data"] is None
    assert (row["_topic"], row["_kafka_partition"], row["_offset"]) == ("orders", 0, 0)
    assert table_rows(decoded, config, F.current_timestamp()).schema.fieldNames() == \
        table_schema(config).fieldNames()


def test_every_failure_kind_gets_a_reason(spark, config):
    payloads = [
        json.dumps(GOOD).encode()[:-5],                                   # truncated
        json.dumps({**GOOD, "amount": "lots"}).encode(),                  # wrong type
        json.dumps({k: v for k, v in GOOD.items() if k != "order_id"}).encode(),
        json.dumps({**GOOD, "pad": "x" * 5000}).encode(),                 # > max_record_bytes 4096
        b"\xff\xfe" + json.dumps(GOOD).encode(),                          # invalid UTF-8
        b"[1, 2, 3]",                                                     # JSON, but not an object
        json.dumps({**GOOD, "order_id": None}).encode(),                  # explicit null for required
        json.dumps({**GOOD, "items": 2.5}).encode(),                      # float for int
    ]
    errors = _errors(spark, config, payloads)
    assert [e[0] for e in errors] == ["malformed_json", "type_mismatch", "missing_required_field", "oversize",
                                      "invalid_utf8", "malformed_json", "missing_required_field",
                                      "type_mismatch"]
    assert "amount" in errors[1][1] and "lots" in errors[1][1]
    assert errors[2][1] == "missing: order_id"
    assert "5" in errors[3][1] and "4096" in errors[3][1]
    assert "items" in errors[7][1]


def test_unknown_fields_are_rescued_not_dropped(spark, config):
    decoded = decode(_frame(spark, [json.dumps({**GOOD, "coupon": "SAVE5", "meta": {"a": 1}}).encode()]),
                     config.record_schema)
    row = decoded.first()
    assert row["_error"] is None
    assert json.loads(row["_rescued_data"]) == {"coupon": "SAVE5", "meta": '{"a":1}'}


def test_dead_letters_keep_raw_bytes_and_coordinates(spark, config):
    from pyspark.sql import functions as F

    raw = b"\xff not json"
    letters = dead_letter_rows(decode(_frame(spark, [json.dumps(GOOD).encode(), raw]), config.record_schema),
                               F.current_timestamp()).collect()
    assert len(letters) == 1
    assert bytes(letters[0]["_raw"]) == raw and letters[0]["_offset"] == 1 and letters[0]["_key"] == bytearray(b"k")


def test_nothing_is_lost_between_the_two_outputs(spark, config):
    from pyspark.sql import functions as F

    payloads = [json.dumps({**GOOD, "event_id": str(i)}).encode() if i % 3 else b"{bad" for i in range(30)]
    decoded = decode(_frame(spark, payloads), config.record_schema)
    now = F.current_timestamp()
    assert table_rows(decoded, config, now).count() + dead_letter_rows(decoded, now).count() == 30


def test_offset_filter_drops_what_the_table_already_holds(spark):
    rows = [("a", 0, o) for o in range(10)] + [("a", 1, o) for o in range(5)] + [("b", 0, 3)]
    frame = spark.createDataFrame(rows, "_topic string, _kafka_partition int, _offset long")
    kept = not_yet_committed(frame, {("a", 0): 7, ("a", 1): 5}).collect()
    assert sorted((r[0], r[1], r[2]) for r in kept) == [("a", 0, 7), ("a", 0, 8), ("a", 0, 9), ("b", 0, 3)]
    assert frame.filter(is_new({})).count() == 16
