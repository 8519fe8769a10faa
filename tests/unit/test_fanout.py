"""A routed batch's route values and its one aggregation, on small in-memory frames (the session's SparkSession;
no broker, S3 or tables)."""

from __future__ import annotations

import json
from datetime import datetime

from ingest.config import PipelineConfig
from ingest.fanout import ROUTE, _routed_cover, route_value
from ingest.transforms import coordinates_for, decode
from tests.helpers import pipeline_dict

GOOD = {"event_id": "e1", "event_time": "2026-11-20T10:15:00Z", "customer_id": "c1", "order_id": "o1",
        "amount": 12.5, "status": "Paid"}


def _config(by: str) -> PipelineConfig:
    data = pipeline_dict("delta", name="unit")
    data["source"]["include_headers"] = True
    data["sink"]["route"] = {"by": by, "table": "u_{value}"}
    return PipelineConfig.model_validate(data)


def _decoded(spark, config):
    rows = [("t", 0, 0, datetime(2026, 11, 20), b"k1", {"X-Event": b"push"}, json.dumps(GOOD).encode()),
            ("t", 0, 1, datetime(2026, 11, 20), None, {}, json.dumps({**GOOD, "status": None}).encode()),
            ("t", 1, 5, datetime(2026, 11, 20), b"k1", {"X-Event": b"push"}, b"{not json"),
            ("t", 1, 6, datetime(2026, 11, 20), b"k2", None, json.dumps({**GOOD, "extra": 1}).encode())]
    raw = spark.createDataFrame(rows, "_topic string, _kafka_partition int, _offset long, _kafka_timestamp timestamp, "
                                      "_key binary, _headers map<string,binary>, _raw binary")
    return decode(raw, config.record_schema)


def test_route_values_by_header_key_and_field(spark):
    expected = {"header:X-Event": ["push", "", "push", ""], "key": ["k1", "", "k1", "k2"],
                "field:status": ["Paid", "", "", "Paid"]}  # a bad record has no fields: no value
    for by, values in expected.items():
        config = _config(by)
        frame = _decoded(spark, config).withColumn(ROUTE, route_value(config))
        assert [r[ROUTE] for r in frame.orderBy("_offset").collect()] == values, by


def test_one_aggregation_gives_ranges_and_counts_per_partition_and_value(spark):
    config = _config("header:X-Event")
    frame = _decoded(spark, config).withColumn(ROUTE, route_value(config))
    cover = {(r[0], r[1], r[ROUTE]): r for r in _routed_cover(frame, coordinates_for(config))}
    assert set(cover) == {("t", 0, "push"), ("t", 0, ""), ("t", 1, "push"), ("t", 1, "")}
    assert (cover[("t", 1, "push")]["first"], cover[("t", 1, "push")]["dead"]) == (5, 1)
    assert cover[("t", 1, "push")]["dead_malformed_json"] == 1
    assert (cover[("t", 1, "")]["rows"], cover[("t", 1, "")]["rescued"]) == (1, 1)
    assert cover[("t", 0, "push")]["rows"] == 1 and cover[("t", 0, "push")]["last"] == 0
