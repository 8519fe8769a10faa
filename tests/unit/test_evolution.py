"""Schema changes between the table and the YAML, decided without Spark (ingest.evolution)."""

from __future__ import annotations

from pyspark.sql.types import StructType

from ingest.evolution import plan_changes, widens
from ingest.types import parse_type, table_type


def _struct(ddl: str) -> StructType:
    return table_type(parse_type(f"struct<{ddl}>")[0])


def test_an_equal_schema_changes_nothing():
    schema = _struct("a: int, b: struct<c: string>, d: array<struct<e: decimal(10,2)>>")
    assert plan_changes(schema, schema) == ([], [])


def test_new_fields_are_added_at_their_path_top_level_and_nested():
    table = _struct("a: int, b: struct<c: string>, d: array<struct<e: int>>, m: map<string, struct<x: int>>")
    declared = _struct("a: int, b: struct<c: string, new1: bigint>, d: array<struct<e: int, f: string>>, "
                       "m: map<string, struct<x: int, y: double>>, z: struct<q: string>")
    changes, refusals = plan_changes(table, declared)
    assert refusals == []
    assert [c.describe() for c in changes] == ["add b.new1 bigint", "add d.element.f string", "add m.value.y double",
                                               "add z struct<q:string>"]


def test_widenings_both_formats_support_are_applied():
    table = _struct("a: int, b: float, c: decimal(10,2), d: array<smallint>")
    declared = _struct("a: bigint, b: double, c: decimal(12,2), d: array<int>")
    changes, refusals = plan_changes(table, declared)
    assert refusals == [] and [c.describe() for c in changes] == [
        "widen a int -> bigint", "widen b float -> double", "widen c decimal(10,2) -> decimal(12,2)",
        "widen d.element smallint -> int"]


def test_narrowing_and_incompatible_changes_are_refused_naming_the_column_and_the_fix():
    table = _struct("a: bigint, b: string, c: decimal(10,2), s: struct<x: int>")
    declared = _struct("a: int, b: int, c: decimal(12,4), s: string")
    changes, refusals = plan_changes(table, declared)
    assert changes == []
    assert refusals[0].startswith("a: the table has bigint, the YAML declares int (a narrowing)")
    assert "b: the table has string, the YAML declares int (an incompatible change)" in refusals[1]
    assert refusals[2].startswith("c: the table has decimal(10,2)")  # a scale change rewrites values: refused
    assert refusals[3].startswith("s: the table has struct<x:int>")
    assert all("only widens" in r for r in refusals)


def test_columns_the_table_has_and_the_yaml_does_not_are_left_alone():
    assert plan_changes(_struct("a: int, legacy: string"), _struct("a: int")) == ([], [])


def test_widening_rules():
    def t(ddl):
        return parse_type(ddl)[0]

    assert widens(t("tinyint"), t("int")) and widens(t("int"), t("bigint")) and widens(t("float"), t("double"))
    assert not widens(t("bigint"), t("int")) and not widens(t("int"), t("double"))
    assert not widens(t("decimal(10,2)"), t("decimal(12,3)")) and widens(t("decimal(10,2)"), t("decimal(11,2)"))


def test_additions_type_new_fields_from_their_values_at_their_path():
    import json

    from ingest.evolution import additions

    table = _struct("id: string, customer: struct<id: string>, items: array<struct<sku: string>>, "
                    "attrs: map<string, string>")
    rescued = [json.dumps({"coupon": "A", "customer.since": 2020, "items[0].color": "red", "score": 1}),
               json.dumps({"score": 2.5, "promo": {"code": "X", "pct": 10, "bad-key": 1}, "tags": ["a"],
                           "@version": "1", "attrs.x.y": 1, "empty": [], "nothing": None})]
    changes = additions(rescued, table)
    assert [c.describe() for c in changes] == [
        "add coupon string", "add customer.since bigint", "add items.element.color string",
        "add score double",  # an integer and a fraction in one batch: double
        "add promo struct<code:string,pct:bigint>",  # `bad-key` is not a column name: it stays rescued
        "add tags array<string>"]
    # `@version` (not a column name), `attrs.x.y` (under a map), an empty array and a null give nothing to add


def test_infer_proposes_a_schema_block_from_sample_payloads():
    import json

    import yaml

    from ingest.config import RecordSchema
    from ingest.schema_tools import infer_schema

    records = [json.dumps({"@timestamp": "2026-11-20T10:15:00.123Z", "id": 1, "day": "2026-11-20",
                           "order": {"total": 12.5, "items": [{"sku": "a", "qty": 2}]}, "tag": None}).encode(),
               json.dumps({"@timestamp": "2026-11-20T11:00:00Z", "id": 2.5, "day": "2026-11-21",
                           "order": {"total": 3, "items": [], "note": "x"}, "extra": True}).encode(),
               b"not json", b"[1, 2]"]
    inferred = infer_schema(records)
    assert (inferred.sampled, inferred.not_json) == (4, 2)
    fields = {f["name"]: f for f in inferred.fields}
    assert fields["timestamp"] == {"name": "timestamp", "json_name": "@timestamp", "type": "timestamp",
                                   "required": True}
    assert fields["id"]["type"] == "double" and fields["day"]["type"] == "date"
    assert fields["order"]["type"] == "struct<total:double,items:array<struct<sku:string,qty:bigint>>,note:string>"
    assert "required" not in fields["extra"] and fields["tag"]["type"] == "string"  # all null: string, optional
    block = yaml.safe_load(inferred.yaml())
    assert RecordSchema.model_validate(block["schema"]).fields[0].json_name == "@timestamp"  # it loads as is


def test_additions_never_re_add_a_column_the_table_has_and_compare_names_case_insensitively():
    import json

    from ingest.evolution import additions

    table = _struct("id: string, customer: struct<id: string>")
    rescued = [json.dumps({"coupon": "A", "Coupon": None, "event_date": "x", "CUSTOMER.Tier": "gold",
                           "customer.tier": "silver", "`a.b`": 1})]
    changes = additions(rescued, table, reserved=["event_date", "_topic"])
    # one column per name whatever its case (the first spelling seen); the partition column's name and a quoted
    # key holding a dot stay rescued
    assert [c.describe() for c in changes] == ["add coupon string", "add customer.Tier string"]
