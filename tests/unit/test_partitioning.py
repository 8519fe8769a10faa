"""Partition fields: parsing, which types each transform takes, names, and the partition keys maintenance uses."""

from datetime import UTC, datetime

import pytest
import yaml

from ingest.config import load_pipeline
from ingest.errors import ConfigError
from ingest.partitioning import (NULL_VALUE, Transform, key_matches, parse_key, partition_key, recency_key)

FIELDS = [
    {"name": "event_id", "type": "string", "required": True},
    {"name": "occurred_at", "type": "timestamp"},
    {"name": "day", "type": "date"},
    {"name": "amount", "type": "decimal(12,2)"},
    {"name": "score", "type": "double"},
    {"name": "qty", "type": "int"},
    {"name": "customer", "type": "struct<id:string, tier:string, since:timestamp>"},
    {"name": "items", "type": "array<struct<sku:string>>"},
]


def _load(tmp_path, partition):
    data = {"pipeline": "p", "source": {"kind": "kafka", "topics": ["t"]},
            "schema": {"fields": FIELDS}, "sink": {"format": "iceberg", "table": "t", "partition": partition}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def _error(tmp_path, partition) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, partition)
    return str(caught.value)


def test_transforms_parse_and_print_back():
    assert [str(Transform.parse(t)) for t in ("identity", "day", " hour ", "bucket(16)", "truncate( 4 )")] == \
        ["identity", "day", "hour", "bucket(16)", "truncate(4)"]
    for bad in ("days", "bucket", "bucket(0)", "bucket(-1)", "truncate(x)"):
        with pytest.raises(ValueError):
            Transform.parse(bad)


def test_a_list_of_fields_on_top_level_and_nested_sources_with_default_names(tmp_path):
    config = _load(tmp_path, [{"source": "occurred_at", "transform": "hour"},
                              {"source": "customer.tier", "transform": "identity"},
                              {"source": "Customer.ID", "transform": "bucket(16)"},
                              {"source": "event_id", "transform": "truncate(2)", "column": "id_prefix"},
                              {"source": "qty", "transform": "identity"}])
    assert [(f.column, f.source, str(f.transform), f.is_source_column) for f in config.partitioning] == [
        ("occurred_at_hour", "occurred_at", "hour", False),
        ("customer_tier", "customer.tier", "identity", False),
        ("customer_id_bucket", "customer.id", "bucket(16)", False),  # the declared spelling, not the YAML's
        ("id_prefix", "event_id", "truncate(2)", False),
        ("qty", "qty", "identity", True)]


def test_the_single_mapping_of_earlier_releases_keeps_its_defaults(tmp_path):
    config = _load(tmp_path, {"source": "occurred_at"})
    assert [(f.column, str(f.transform)) for f in config.partitioning] == [("event_date", "day")]


@pytest.mark.parametrize(("partition", "expected"), [
    ([{"source": "amount", "transform": "day"}], "transform day needs a timestamp or date field; 'amount' is decimal"),
    ([{"source": "day", "transform": "hour"}], "transform hour needs a timestamp field; 'day' is date"),
    ([{"source": "score", "transform": "identity"}], "a float takes bucket"),
    ([{"source": "occurred_at", "transform": "identity"}], "a timestamp takes hour or day"),
    ([{"source": "amount", "transform": "truncate(10)"}], "truncate(10) needs a string or integer field"),
    ([{"source": "customer.nope", "transform": "identity"}], "'nope' is not a field in 'customer'; declared: id, tier"),
    ([{"source": "items.sku", "transform": "identity"}], "'items' is array<struct<sku:string>>: a partition source"),
    ([{"source": "missing", "transform": "day"}], "'missing' is not a field; declared: event_id"),
    ([{"source": "occurred_at", "transform": "weekly"}], "transform 'weekly' is not one of identity, year, month"),
    ([{"source": "occurred_at", "transform": "day"}, {"source": "occurred_at", "transform": "hour"}],
     "'occurred_at' is partitioned by both day and hour"),
    ([{"source": "qty", "transform": "bucket(4)"}, {"source": "event_id", "transform": "bucket(4)",
                                                    "column": "qty_bucket"}], "two partition fields are named"),
    ([{"source": "occurred_at", "transform": "day", "column": "amount"}], "'amount' is also a field in schema"),
    ([{"source": "occurred_at", "transform": "day", "column": "_day"}], "must start with a letter"),
])
def test_bad_partition_fields_say_which_and_what_fits(tmp_path, partition, expected):
    message = _error(tmp_path, partition)
    assert "sink.partition" in message and expected in message, message


def test_keys_escape_values_and_round_trip():
    pairs = [("region", "eu/west=1%"), ("day", None), ("qty", "3")]
    key = partition_key(pairs)
    assert key == f"region=eu%2Fwest%3D1%25/day={NULL_VALUE}/qty=3"
    assert parse_key(key) == pairs and parse_key("") == [] and partition_key([]) == ""
    with pytest.raises(ValueError, match="is not column=value"):
        parse_key("day")


def test_a_key_matches_a_wanted_key_naming_some_of_its_columns():
    key = "day=2026-11-20/bucket=3"
    assert key_matches(key, "day=2026-11-20") and key_matches(key, "bucket=3/day=2026-11-20")
    assert not key_matches(key, "day=2026-11-21") and not key_matches(key, "other=3")


def test_recency_sorts_by_the_time_columns_then_the_key():
    keys = ["b=1/h=2026-11-20-01", "b=0/h=2026-11-20-10", f"b=2/h={NULL_VALUE}", "b=5/h=2026-11-19-23"]
    assert sorted(keys, key=lambda k: recency_key(k, ["h"])) == [
        f"b=2/h={NULL_VALUE}", "b=5/h=2026-11-19-23", "b=1/h=2026-11-20-01", "b=0/h=2026-11-20-10"]


def test_delta_generated_columns_and_iceberg_values_show_a_partition_the_same_way(spark, tmp_path):
    """Delta computes each partition with `generation_expression`; Iceberg stores ordinals that `shown_value`
    turns into the same text, and `stored_value` turns back into the literal its filter needs."""
    from pyspark.sql import functions as F

    from ingest.formats.delta import generation_expression, generated_type
    from ingest.formats.iceberg import partition_term
    from ingest.formats.iceberg_maintenance import shown_value, stored_value

    config = _load(tmp_path, [{"source": "occurred_at", "transform": "hour"},
                              {"source": "occurred_at", "transform": "bucket(8)"},
                              {"source": "customer.since", "transform": "month"},
                              {"source": "day", "transform": "year"},
                              {"source": "customer.tier", "transform": "identity"},
                              {"source": "event_id", "transform": "truncate(3)"},
                              {"source": "qty", "transform": "truncate(10)"}])
    row = spark.sql("SELECT 'abcdef' AS event_id, TIMESTAMP '2026-11-20 13:45:00' AS occurred_at, "
                    "DATE '2026-02-03' AS day, -7 AS qty, "
                    "named_struct('id', 'c1', 'tier', 'gold', 'since', TIMESTAMP '2025-01-31 23:00:00') AS customer")
    fields = config.partitioning
    delta = row.select(*[F.expr(generation_expression(f)).cast(generated_type(f)).alias(f.column)
                         for f in fields]).first()
    shown = [None if delta[f.column] is None else str(delta[f.column]) for f in fields]
    assert shown[0] == "2026-11-20-13" and shown[2:] == ["2025-01", "2026", "gold", "abc", "-10"]
    hours = (datetime(2026, 11, 20, 13, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() // 3600
    assert shown_value(fields[0], str(int(hours))) == "2026-11-20-13"
    assert shown_value(fields[2], str((2025 - 1970) * 12)) == "2025-01"
    assert shown_value(fields[3], "56") == "2026"
    assert [stored_value(f, v) for f, v in zip(fields, shown, strict=True) if f.transform.kind != "bucket"] == \
        [int(hours), (2025 - 1970) * 12, 56, "gold", "abc", -10]
    assert [partition_term(f) for f in fields] == [
        "hours(`occurred_at`)", "bucket(8, `occurred_at`)", "months(`customer`.`since`)", "years(`day`)",
        "`customer`.`tier`", "truncate(3, `event_id`)", "truncate(10, `qty`)"]
