"""One evolution as one schema commit, one typing of JSON values for `schema infer` and add mode
(`schema.infer_timestamps`), and the heterogeneous corpus the evolution tests and benchmark use."""

from __future__ import annotations

import json
from types import SimpleNamespace

from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from ingest.config import NAME
from ingest.corpus import EVENT_HEADER, EVENT_TYPES, heterogeneous, wide_events
from ingest.evolution import SchemaChange, additions, infer
from ingest.types import parse_type

DECLARED = StructType([StructField("event_type", StringType(), True), StructField("delivery", StringType(), True)])


def _rescued(payloads: list[bytes]) -> list[str]:
    """What the record decoder rescues for DECLARED: every undeclared top-level key with its value."""
    return [json.dumps({k: v for k, v in json.loads(p).items() if k not in DECLARED.fieldNames()}) for p in payloads]


def _leaves(data_type) -> int:
    if isinstance(data_type, StructType):
        return sum(_leaves(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _leaves(data_type.elementType)
    return 1


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_depth(v) for v in value), default=0)
    return 0


def test_every_addition_of_an_evolution_is_one_alter_table_and_widenings_follow():
    from ingest.formats import LakeTable

    statements, widened = [], []
    table = SimpleNamespace(spark=SimpleNamespace(sql=statements.append), sql_name="t",
                            widen=lambda column, data_type: widened.append(column))
    changes = [SchemaChange("add", ("coupon",), StringType()),
               SchemaChange("add", ("customer", "tier"), StringType()),
               SchemaChange("add", ("items", "element", "color"), StringType()),
               SchemaChange("add", ("promo",), parse_type("struct<code: string, pct: bigint>")[0]),
               SchemaChange("widen", ("qty",), parse_type("bigint")[0], parse_type("int")[0])]
    LakeTable.evolve(table, changes)
    assert statements == ["ALTER TABLE t ADD COLUMNS (`coupon` string, `customer`.`tier` string, "
                          "`items`.`element`.`color` string, `promo` struct<`code`:string,`pct`:bigint>)"]
    assert widened == ["`qty`"]
    statements.clear()
    LakeTable.evolve(table, [])
    assert statements == []


def test_infer_timestamps_types_iso_strings_as_timestamps_and_dates_only_when_every_value_parses():
    rescued = [json.dumps({"at": "2026-11-20T10:15:00.123Z", "day": "2026-11-20", "when": "2026-11-20",
                           "mixed": "2026-11-20T10:00:00Z", "plain": "x", "gone": None, "deep": {"at": "2026-11-20"}}),
               json.dumps({"at": "2026-11-21 08:00:00+02:00", "day": "2026-11-21", "when": "2026-11-21T00:00:00Z",
                           "mixed": "yesterday", "gone": None, "deep": {"at": "2026-11-21"}})]
    typed = {c.path[0]: c.data_type.simpleString() for c in additions(rescued, DECLARED, timestamps=True)}
    assert typed == {"at": "timestamp", "day": "date", "when": "timestamp", "mixed": "string", "plain": "string",
                     "deep": "struct<at:date>"}  # `gone` (only null) waits for a value
    plain = {c.path[0]: c.data_type.simpleString() for c in additions(rescued, DECLARED)}
    assert plain["at"] == plain["day"] == plain["deep"].removeprefix("struct<at:").rstrip(">") == "string"
    later = additions([json.dumps({"gone": "2026-11-22"})], DECLARED, timestamps=True)
    assert [c.describe() for c in later] == ["add gone date"]
    assert infer("2026-02-30", timestamps=True).simpleString() == "string"  # not a date: a string


def _named(value):
    """The value without keys that are not column names (evolution leaves those rescued; `schema infer` names
    them with json_name)."""
    if isinstance(value, dict):
        return {k: _named(v) for k, v in value.items() if NAME.match(k)}
    if isinstance(value, list):
        return [_named(v) for v in value]
    return value


def test_schema_infer_and_evolution_give_the_same_type_for_the_same_values():
    from ingest.schema_tools import infer_schema

    payloads = [json.dumps(_named(json.loads(p))).encode() for _, _, p in heterogeneous(240, seed=3)]
    proposed = {f["name"]: parse_type(f["type"])[0] for f in infer_schema(payloads).fields}
    evolved = {c.path[0]: c.data_type for c in additions(_rescued(payloads), DECLARED, timestamps=True)}
    assert evolved and set(evolved) <= set(proposed)
    assert {name: t.simpleString() for name, t in evolved.items()} == \
           {name: proposed[name].simpleString() for name in evolved}
    assert evolved["discussion_comment"]["created_at"].dataType.simpleString() == "timestamp"
    assert evolved["dependabot_alert"]["due_on"].dataType.simpleString() == "date"


def test_the_events_corpus_is_heterogeneous_nested_and_deterministic():
    events = list(heterogeneous(329, seed=11))
    assert events == list(heterogeneous(329, seed=11)) and events != list(heterogeneous(329, seed=12))
    payloads = [json.loads(p) for _, _, p in events]
    assert len(EVENT_TYPES) >= 50 and {p["event_type"] for p in payloads} == set(EVENT_TYPES)
    assert all(dict(h)[EVENT_HEADER].decode() == p["event_type"] for (_, h, _), p in zip(events, payloads, strict=True))
    created = {type(p["installation"]["created_at"]) for p in payloads}
    assert created == {int, str}  # the same field, two JSON types across event types
    assert max(_depth(p) for p in payloads) >= 5
    assert any(isinstance(v, list) and v and isinstance(v[0], dict) for p in payloads for v in p[p["event_type"]]
               .values())  # arrays of objects
    text = b"".join(p for _, _, p in events).decode()
    assert all(key in text for key in ('"@version"', '"a-b"', '"größe"'))
    assert all(p["deprecated"] is None and p["repository"]["license"] is None for p in payloads)
    changes = additions(_rescued([p for _, _, p in events]), DECLARED)
    # a column per type (`repository` and `installation` are also envelope objects), action, sender
    assert len(changes) == len(EVENT_TYPES) + 2
    assert {"deprecated", "@version"}.isdisjoint(c.path[0] for c in changes)


def test_wide_events_add_exactly_n_nested_fields():
    declared = StructType([*DECLARED.fields, StructField("ctx", StructType([StructField("id", StringType())]))])
    for n in (10, 100, 500):
        rescued = [json.dumps({f"ctx.{k}": v for k, v in json.loads(p)["ctx"].items() if k != "id"})
                   for _, p in wide_events(n, 20, seed=1)]
        changes = additions(rescued, declared)
        assert len(changes) == n and all(c.path[0] == "ctx" and len(c.path) == 2 for c in changes)
