"""The pure decode/shape functions on small in-memory frames (the session's one SparkSession, tests/conftest.py:
Spark-only with the resolved jars when no integration test runs, for Lakeline's record decoder; no broker,
S3 or tables)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from ingest.config import PipelineConfig
from ingest.transforms import (dead_letter_rows, decode, fixed_timestamp, is_new,
                               not_yet_committed, table_rows, table_schema)
from tests.helpers import pipeline_dict


@pytest.fixture
def config() -> PipelineConfig:
    return PipelineConfig.model_validate(pipeline_dict("delta", name="unit"))


@pytest.fixture
def strict() -> PipelineConfig:
    """Every value that does not fit its field makes the record a dead letter (schema.on_type_conflict)."""
    spec = pipeline_dict("delta", name="unit_strict")
    spec["schema"] = {**spec["schema"], "on_type_conflict": "dead_letter"}
    return PipelineConfig.model_validate(spec)


GOOD = {"event_id": "e1", "event_time": "2026-11-20T10:15:00.250Z", "customer_id": "c1", "order_id": "o1",
        "status": "paid", "amount": 12.5, "currency": "EUR", "items": 2, "country": "DE"}


def _frame(spark, payloads):
    rows = [("orders", 0, i, datetime(2026, 11, 20), b"k", p) for i, p in enumerate(payloads)]
    return spark.createDataFrame(rows, "_topic string, _kafka_partition int, _offset long, "
                                       "_kafka_timestamp timestamp, _key binary, _raw binary")


def _errors(spark, config, payloads):
    decoded = decode(_frame(spark, payloads), config.record_schema)
    return [(r["_error"], r["_error_detail"]) for r in decoded.orderBy("_offset").collect()]


def test_good_record_is_typed(spark, config):
    from pyspark.sql import functions as F

    decoded = decode(_frame(spark, [json.dumps(GOOD).encode()]), config.record_schema)
    row = table_rows(decoded, config, F.lit(datetime(2026, 11, 21)).cast("timestamp")).first()
    assert row["amount"] == 12.5 and row["items"] == 2
    assert row["event_time"] == datetime(2026, 11, 20, 10, 15, 0, 250000)
    assert "event_date" not in row.asDict()  # the partition is the table format's (hidden / generated)
    assert row["_rescued_data"] is None
    assert (row["_topic"], row["_kafka_partition"], row["_offset"]) == ("orders", 0, 0)
    assert table_rows(decoded, config, F.current_timestamp()).schema.fieldNames() == \
        table_schema(config).fieldNames()


def _generated_code(frame) -> list[str]:
    plans = frame._jdf.queryExecution().debug().codegenToSeq()  # noqa: SLF001 - (subtree, code, stats) per stage
    return [plans.apply(i)._2() for i in range(plans.size())]


def test_fixed_timestamp_gives_its_value_without_changing_the_generated_code(spark, config):
    """The batch's `_ingested_at`: a value per batch, the same generated code for every batch (a literal's
    value is written into the code, so each batch would compile anew)."""
    from pyspark.sql import functions as F

    first, second = datetime(2026, 11, 24, 5, 0, 0, 123456, tzinfo=UTC), datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
    decoded = decode(_frame(spark, [json.dumps(GOOD).encode()]), config.record_schema)
    rows = [table_rows(decoded, config, fixed_timestamp(spark, at)) for at in (first, second)]
    assert [frame.first()["_ingested_at"] for frame in rows] == [first.replace(tzinfo=None),
                                                                 second.replace(tzinfo=None)]
    assert rows[0].schema["_ingested_at"] == table_schema(config)["_ingested_at"]  # a NOT NULL timestamp
    assert _generated_code(rows[0]) and _generated_code(rows[0]) == _generated_code(rows[1])
    literals = [table_rows(decoded, config, F.lit(at).cast("timestamp")) for at in (first, second)]
    assert _generated_code(literals[0]) != _generated_code(literals[1])  # what fixed_timestamp avoids


def test_every_failure_kind_gets_a_reason(spark, strict):
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
    errors = _errors(spark, strict, payloads)
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
    # the original JSON values, not strings holding JSON
    assert json.loads(row["_rescued_data"]) == {"coupon": "SAVE5", "meta": {"a": 1}}


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


# Strict JSON: each payload, the reason it must get (None: a good record) and a part of the detail.
STRICT_CASES = [
    (json.dumps(GOOD).encode(), None, None),
    (json.dumps({k: v for k, v in GOOD.items() if k not in ("status", "items")}).encode(), None, None),
    (json.dumps({**GOOD, "status": None}).encode(), None, None),                 # optional explicit null
    (json.dumps({**GOOD, "order_id": None}).encode(), "missing_required_field", "missing: order_id"),
    (json.dumps({**GOOD, "status": 5}).encode(), None, None),                    # a number as its text
    (json.dumps({**GOOD, "status": {"a": [1, 2]}}).encode(), "type_mismatch", 'status (raw: {"status":{"a": [1, 2]}})'),
    (json.dumps({**GOOD, "status": ["paid"]}).encode(), "type_mismatch", "status"),
    (json.dumps({**GOOD, "amount": True}).encode(), "type_mismatch", "amount"),
    (json.dumps({**GOOD, "amount": "12.5"}).encode(), "type_mismatch", "amount"),  # a string is not a double
    (json.dumps({**GOOD, "items": 2 ** 40}).encode(), "type_mismatch", "items (raw: {\"items\":1099511627776})"),
    (json.dumps({**GOOD, "items": 2.0}).encode(), "type_mismatch", "items"),       # never rounded to an int
    (b'{"event_id":"e","event_time":"2026-11-20T10:15:00Z","customer_id":"c","order_id":"o","amount":1e309}',
     "type_mismatch", "amount (raw: {\"amount\":1e309})"),                       # never infinity
    (b'{"event_id":"e","event_time":"2026-11-20T10:15:00Z","customer_id":"c","order_id":"o","amount":1e-400}',
     "type_mismatch", "amount"),                                                  # never silently zero
    (json.dumps({**GOOD, "event_time": "yesterday"}).encode(), "type_mismatch", "event_time"),
    (json.dumps({**GOOD, "Amount": 3.0}).encode(), None, None),                   # another key: rescued
    (json.dumps({**GOOD, "amount": "x", "items": "y"}).encode(), "type_mismatch", "wrong type for: amount, items"),
    (json.dumps(GOOD).encode()[:-1] + b',"amount":99.0}', "malformed_json", "repeated key: amount"),
    (json.dumps(GOOD).encode()[:-1] + b',"x":1,"x":2}', "malformed_json", "repeated key: x"),
    (json.dumps(GOOD).encode() + b" trailing", "malformed_json", "invalid JSON"),
    (json.dumps(GOOD).encode() + b"{}", "malformed_json", "trailing content"),
    (json.dumps(GOOD).encode() + b"}", "malformed_json", "invalid JSON"),
    (json.dumps(GOOD).encode() + b"  \n", None, None),                            # whitespace after is fine
    (b"{}", "missing_required_field", "missing: event_id, event_time, customer_id, order_id, amount"),
    (b"null", "malformed_json", "not a JSON object"),
    (b'"text"', "malformed_json", "not a JSON object"),
    (b"[1, 2, 3]", "malformed_json", "not a JSON object"),
    (b"", "malformed_json", "empty payload"),
    (b"{bad", "malformed_json", "invalid JSON"),
    (json.dumps(GOOD).encode().replace(b"12.5", b"NaN"), "malformed_json", "invalid JSON"),
    (json.dumps(GOOD).encode().replace(b'"items": 2', b'"items": 02'), "malformed_json", "invalid JSON"),
    (b"\xff\xfe" + json.dumps(GOOD).encode(), "invalid_utf8", "not valid UTF-8"),
    (json.dumps(GOOD).encode("utf-16-le"), "invalid_utf8", "NUL bytes"),            # never auto-detected
    (json.dumps({**GOOD, "pad": "x" * 5000}).encode(), "oversize", "limit is 4096"),
    (json.dumps(GOOD).encode().replace(b'"event_id"', b'"event\\u005fid"'), None, None),  # escaped key
    (json.dumps({"event_id": "\u00e9\u4e2d", **{k: v for k, v in GOOD.items() if k != "event_id"}}).encode(),
     None, None),
]


def test_strict_json_cases_get_their_reason_and_detail(spark, strict):
    config = strict
    frame = _frame(spark, [payload for payload, _, _ in STRICT_CASES] + [None])
    got = decode(frame, config.record_schema).orderBy("_offset").collect()
    for (payload, reason, detail), row in zip(STRICT_CASES, got[:-1], strict=True):
        assert row["_error"] == reason, (payload, row["_error_detail"])
        if detail is not None:
            assert detail in row["_error_detail"], (payload, row["_error_detail"])
        if reason is None:
            assert row["event_id"] is not None and row["_error_detail"] is None, payload
        else:
            assert all(row[f.name] is None for f in config.record_schema.fields), payload
    assert (got[-1]["_error"], got[-1]["_error_detail"]) == ("malformed_json", "null payload")
    assert got[4]["status"] == "5"
    assert json.loads(got[14]["_rescued_data"]) == {"Amount": 3.0}


def _config_with(fields: list[dict], **schema) -> PipelineConfig:
    spec = pipeline_dict("delta", name="unit_types")
    spec["schema"] = {"fields": fields, "max_record_bytes": 4096, **schema}
    spec["sink"].pop("partition", None)
    return PipelineConfig.model_validate(spec)


MISMATCH = "type_mismatch"


class MISMATCH_OR:  # noqa: N801 - reads as a value in the table below
    """Either outcome is acceptable (a representation detail, e.g. float rounding or unpadded base64)."""

    def __init__(self, value):
        self.value = value


# Each type with JSON values and what the column gets (MISMATCH: the value does not fit: the field is null and the
# value rescued, or under on_type_conflict: dead_letter the record is a type_mismatch dead letter).
TYPE_CASES = {
    "string": [('"x"', "x"), ('""', ""), ('"\\u00e9\\ud83d\\ude00"', "\u00e9\U0001F600"), ("5", "5"), ("1.50", "1.50"),
               ("true", "true"), ('{"a": 1}', MISMATCH), ("[1]", MISMATCH)],
    "tinyint": [("127", 127), ("128", MISMATCH), ("-128", -128), ("1.0", MISMATCH)],
    "smallint": [("32767", 32767), ("-32769", MISMATCH)],
    "int": [("0", 0), ("-0", 0), ("2147483647", 2147483647), ("2147483648", MISMATCH), ("-2147483649", MISMATCH),
            ("1.0", MISMATCH), ("1e2", MISMATCH), ('"5"', MISMATCH), ("true", MISMATCH)],
    "long": [("9223372036854775807", 9223372036854775807), ("9223372036854775808", MISMATCH), ("1.5", MISMATCH)],
    "float": [("1.5", 1.5), ("3", 3.0), ("3.4e38", MISMATCH_OR(pytest.approx(3.4e38, rel=1e-7))),
              ("1e39", MISMATCH), ("1e-46", MISMATCH),
              ("0.0", 0.0), ('"1.5"', MISMATCH)],
    "double": [("0.1", 0.1), ("-0.0", -0.0), ("3", 3.0), ("1e308", 1e308), ("1e309", MISMATCH),
               ("4.9e-324", 5e-324), ("1e-400", MISMATCH), ('"NaN"', MISMATCH), ("true", MISMATCH)],
    "decimal(12,2)": [("12.5", Decimal("12.50")), ('"12.50"', Decimal("12.50")), ("12.345", MISMATCH),
                      ("12.340", Decimal("12.34")), ("9999999999.99", Decimal("9999999999.99")),
                      ("10000000000", MISMATCH), ('"abc"', MISMATCH), ("1e2", Decimal("100.00")),
                      ("1e300000000", MISMATCH), ("1e-300000000", MISMATCH), ("0e5", Decimal("0.00")),
                      ('"' + "1" * 200 + '"', MISMATCH)],  # refused without expanding the exponent
    "boolean": [("true", True), ("false", False), ('"true"', MISMATCH), ("1", MISMATCH)],
    "binary": [('"aGVsbG8="', b"hello"), ('"aGVsbG8"', MISMATCH_OR(b"hello")), ('"not base64!"', MISMATCH),
               ("5", MISMATCH)],
    "date": [('"2026-11-20"', date(2026, 11, 20)), ('"2026-13-01"', MISMATCH), ("20000", MISMATCH)],
    "timestamp": [('"2026-11-20T10:15:00.250Z"', datetime(2026, 11, 20, 10, 15, 0, 250000)),
                  ('"2026-11-20T10:15:00+05:30"', datetime(2026, 11, 20, 4, 45)),
                  ('"2026-11-20 10:15:00"', datetime(2026, 11, 20, 10, 15)),  # no zone: the session's (UTC)
                  ("1700000000", datetime(2023, 11, 14, 22, 13, 20)), ("1.5", MISMATCH), ('"yesterday"', MISMATCH)],
    "timestamp_ntz": [('"2026-11-20T10:15:00"', datetime(2026, 11, 20, 10, 15)), ('"x"', MISMATCH)],
    "json": [('{"a": [1, 2.50]}', '{"a": [1, 2.50]}'), ('"s"', '"s"'), ("3", "3"), ("[]", "[]")],
}


@pytest.mark.parametrize("on_conflict", ["rescue", "dead_letter"])
@pytest.mark.parametrize("type_name", list(TYPE_CASES))
def test_every_type_takes_exactly_the_values_that_fit(spark, type_name, on_conflict):
    config = _config_with([{"name": "id", "type": "int", "required": True}, {"name": "v", "type": type_name}],
                          on_type_conflict=on_conflict)
    cases = TYPE_CASES[type_name]
    payloads = [f'{{"id": {i}, "v": {literal}}}'.encode() for i, (literal, _) in enumerate(cases)]
    rows = decode(_frame(spark, payloads), config.record_schema).orderBy("_offset").collect()
    for (literal, want), row in zip(cases, rows, strict=True):
        rescued = row["_error"] is None and row["v"] is None and row["_rescued_data"] == f'{{"v":{literal}}}' \
            and row["_conflicts"] == ["v"]
        refused = row["_error"] == MISMATCH and f'"v":{literal}' in (row["_error_detail"] or "")
        if isinstance(want, MISMATCH_OR):
            assert (rescued if on_conflict == "rescue" else refused) or row["v"] == want.value, (literal, row)
        elif want == MISMATCH:
            assert rescued if on_conflict == "rescue" else refused, (literal, row)
        else:
            assert row["_error"] is None, (literal, row["_error_detail"])
            got = bytes(row["v"]) if isinstance(row["v"], bytearray) else row["v"]
            assert got == want and type(got) is type(want), (literal, got)


NESTED = [
    {"name": "event_id", "type": "string", "required": True},
    {"name": "ts", "type": "timestamp", "json_name": "@timestamp", "required": True},
    {"name": "paid_at", "type": "timestamp", "format": "epoch_millis"},
    {"name": "customer", "type": "struct<id:string NOT NULL, tier:string, address:struct<city:string, zip:string>>"},
    {"name": "items", "type": "array<struct<sku:string NOT NULL, qty:int, price:decimal(10,2)>>"},
    {"name": "attrs", "type": "map<string,int>"},
    {"name": "payload", "type": "json"},
]
ORDER = {"event_id": "e1", "@timestamp": "2026-11-20T10:15:00Z", "paid_at": 1763633700123,
         "customer": {"id": "c1", "tier": "gold", "address": {"city": "Berlin", "zip": "10115"}, "since": 2020},
         "items": [{"sku": "a", "qty": 2, "price": "3.50"}, {"sku": "b", "qty": 1, "price": 10, "color": "red"}],
         "attrs": {"x": 1}, "payload": {"kind": "web", "n": [1, 2]}, "campaign": "fall"}


def test_nested_records_are_typed_to_any_depth_with_undeclared_fields_rescued_by_path(spark):
    config = _config_with(NESTED)
    row = decode(_frame(spark, [json.dumps(ORDER).encode()]), config.record_schema).first()
    assert row["_error"] is None, row["_error_detail"]
    assert row["ts"] == datetime(2026, 11, 20, 10, 15) and row["paid_at"] == datetime(2025, 11, 20, 10, 15, 0, 123000)
    assert row["customer"]["address"]["city"] == "Berlin" and row["customer"]["tier"] == "gold"
    assert [(i["sku"], i["qty"], i["price"]) for i in row["items"]] == [("a", 2, Decimal("3.50")),
                                                                       ("b", 1, Decimal("10.00"))]
    assert row["attrs"] == {"x": 1} and json.loads(row["payload"]) == {"kind": "web", "n": [1, 2]}
    assert json.loads(row["_rescued_data"]) == {"customer.since": 2020, "items[1].color": "red", "campaign": "fall"}
    # a key holding path characters is one quoted step, never read as a path
    odd = decode(_frame(spark, [json.dumps({**ORDER, "a.b": 1, "c[0]": 2}).encode()]), config.record_schema).first()
    assert json.loads(odd["_rescued_data"])["`a.b`"] == 1 and json.loads(odd["_rescued_data"])["`c[0]`"] == 2


@pytest.mark.parametrize("change,reason,detail", [
    ({"customer": {"tier": "gold"}}, "missing_required_field", "missing: customer.id"),
    ({"customer": None}, None, None),                                    # the struct is optional; its id only in it
    ({"items": [{"sku": "a"}, {"qty": 1}]}, "missing_required_field", "missing: items[1].sku"),
    ({"items": [{"sku": "a", "qty": 2.5}]}, "type_mismatch", 'items[0].qty (raw: {"items[0].qty":2.5})'),
    ({"items": {"sku": "a"}}, "type_mismatch", "wrong type for: items"),
    ({"attrs": {"x": "1"}}, "type_mismatch", "attrs.x"),
    ({"customer": {"id": "c", "address": "Berlin"}}, "type_mismatch", "customer.address"),
    ({"paid_at": "2026-11-20T10:15:00Z"}, "type_mismatch", "paid_at"),  # epoch_millis: a number, not a string
    ({"paid_at": 1763633700123.0005}, "type_mismatch", "paid_at"),      # below a microsecond: never rounded
    ({"@timestamp": None}, "missing_required_field", "missing: ts"),
])
def test_nested_failures_name_the_path(spark, change, reason, detail):
    config = _config_with(NESTED, on_type_conflict="dead_letter")
    row = decode(_frame(spark, [json.dumps({**ORDER, **change}).encode()]), config.record_schema).first()
    assert row["_error"] == reason, row["_error_detail"]
    if detail:
        assert detail in row["_error_detail"]


def test_a_huge_exponent_is_refused_without_being_expanded(spark):
    config = _config_with(NESTED)
    payload = json.dumps({**ORDER, "paid_at": 123}).replace('"paid_at": 123', '"paid_at": 1e300000000')
    row = decode(_frame(spark, [payload.encode()]), config.record_schema).first()
    assert row["_error"] is None and row["paid_at"] is None
    assert row["_rescued_data"].startswith('{"paid_at":1e300000000,')


@pytest.mark.parametrize("change,field,path,value", [
    ({"items": [{"sku": "a", "qty": 2.5}]}, "items[].qty", "items[0].qty", 2.5),
    ({"items": {"sku": "a"}}, "items", "items", {"sku": "a"}),
    ({"attrs": {"x": "1", "y": 2}}, "attrs[]", "attrs.x", "1"),
    ({"customer": {"id": "c", "address": "Berlin"}}, "customer.address", "customer.address", "Berlin"),
    ({"paid_at": "2026-11-20T10:15:00Z"}, "paid_at", "paid_at", "2026-11-20T10:15:00Z"),
])
def test_a_value_that_does_not_fit_is_rescued_under_its_path_and_the_record_lands(spark, change, field, path, value):
    config = _config_with(NESTED)
    row = decode(_frame(spark, [json.dumps({**ORDER, **change}).encode()]), config.record_schema).first()
    assert row["_error"] is None, row["_error_detail"]
    rescued = json.loads(row["_rescued_data"])
    assert rescued[path] == value and row["_conflicts"] == [field] and row["_undeclared"] is True
    assert row["event_id"] == "e1" and row["ts"] == datetime(2026, 11, 20, 10, 15)
    if path == "items[0].qty":
        assert row["items"][0]["sku"] == "a" and row["items"][0]["qty"] is None
    if path == "attrs.x":
        assert row["attrs"] == {"x": None, "y": 2}
    if path == "customer.address":
        assert row["customer"]["id"] == "c" and row["customer"]["address"] is None


@pytest.mark.parametrize("change,detail", [
    ({"@timestamp": "yesterday"}, "ts"),                         # required
    ({"customer": {"id": ["c"]}}, "customer.id"),                # NOT NULL inside a struct
    ({"items": [{"sku": {"a": 1}, "qty": 1}]}, "items[0].sku"),  # NOT NULL inside an array's struct
])
def test_a_value_that_does_not_fit_a_required_field_is_still_a_dead_letter(spark, change, detail):
    config = _config_with(NESTED)
    row = decode(_frame(spark, [json.dumps({**ORDER, **change}).encode()]), config.record_schema).first()
    assert row["_error"] == "type_mismatch" and detail in row["_error_detail"] and row["_rescued_data"] is None


def test_fail_mode_never_rescues_a_conflict(spark):
    config = _config_with(NESTED, evolution="fail")
    row = decode(_frame(spark, [json.dumps({**ORDER, "paid_at": "x"}).encode()]), config.record_schema).first()
    assert row["_error"] == "type_mismatch" and "paid_at" in row["_error_detail"]


def test_conflict_fields_name_what_the_decoder_may_rescue():
    from ingest.transforms import conflict_fields, decoder_struct

    config = _config_with(NESTED)
    assert conflict_fields(decoder_struct(config.record_schema)) == [
        "paid_at", "customer", "customer.tier", "customer.address", "customer.address.city", "customer.address.zip",
        "items", "items[]", "items[].qty", "items[].price", "attrs", "attrs[]"]


def test_timestamps_without_a_zone_are_read_in_the_session_time_zone(spark):
    from pyspark.sql import functions as F

    config = _config_with([{"name": "t", "type": "timestamp", "required": True}])
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        rows = decode(_frame(spark, [b'{"t": "2026-11-20 10:15:00"}', b'{"t": "2026-11-20T10:15:00Z"}']),
                      config.record_schema).orderBy("_offset").select(F.unix_seconds("t").alias("s")).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert [r["s"] for r in rows] == [1795198500, 1795169700]  # 10:15 in LA is 18:15 UTC


def test_source_metadata_lands_as_key_and_headers_on_both_sources(spark):
    """Kafka: the key and the headers (a repeated name keeps its last value); Kinesis: the partition key."""
    from pyspark.sql import functions as F

    from ingest.transforms import kafka_coordinates, kinesis_coordinates

    kafka = spark.createDataFrame(
        [("orders", 0, 7, datetime(2026, 11, 20), b"k1", json.dumps(GOOD).encode(),
          [("trace", b"t1"), ("trace", b"t2"), ("src", b"web")])],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>")
    spec = pipeline_dict("delta", name="meta")
    spec["source"].update(include_key="string", include_headers=True)
    config = PipelineConfig.model_validate(spec)
    row = table_rows(decode(kafka_coordinates(kafka), config.record_schema), config, F.current_timestamp()).first()
    assert row["_key"] == "k1" and {k: bytes(v) for k, v in row["_headers"].items()} == {"trace": b"t2",
                                                                                         "src": b"web"}
    kinesis = spark.createDataFrame(
        [("orders", "shardId-0", "0" * 55 + "1", datetime(2026, 11, 20), "customer-9", json.dumps(GOOD).encode())],
        "stream string, shard_id string, sequence_number string, approximate_arrival_timestamp timestamp, "
        "partition_key string, data binary")
    spec = pipeline_dict("delta", name="meta_kinesis")
    spec["source"] = {"kind": "kinesis", "stream": "orders", "include_key": "binary"}
    config = PipelineConfig.model_validate(spec)
    row = table_rows(decode(kinesis_coordinates(kinesis), config.record_schema), config, F.current_timestamp()).first()
    assert bytes(row["_key"]) == b"customer-9" and "_headers" not in row.asDict()
