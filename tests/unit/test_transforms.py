"""The pure decode/shape functions on small in-memory frames (the session's one SparkSession, tests/conftest.py:
Spark-only with the resolved jars when no integration test runs, for Lakeline's clean-record decoder; no broker,
S3 or tables)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ingest.config import PipelineConfig
from ingest.transforms import (clean_record_decoder, dead_letter_rows, decode, fixed_timestamp, is_new,
                               not_yet_committed, table_rows, table_schema)
from tests.helpers import pipeline_dict


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


# Payloads at the edges of the fast path (Lakeline's clean-record decoder, one JSON pass) and the exact path (Spark's
# typed and map parses). `decode` must classify and shape every one exactly like the reference below.
EDGE_PAYLOADS = [
    json.dumps(GOOD).encode(),
    json.dumps({k: v for k, v in GOOD.items() if k not in ("status", "items")}).encode(),  # optional absent
    json.dumps({**GOOD, "status": None}).encode(),                     # optional explicit null
    json.dumps({**GOOD, "order_id": None}).encode(),                   # required explicit null
    json.dumps({**GOOD, "status": 5}).encode(),                        # number into a string field
    json.dumps({**GOOD, "status": {"a": [1, 2]}}).encode(),            # object into a string field
    json.dumps({**GOOD, "amount": True}).encode(),                     # boolean for double
    json.dumps({**GOOD, "items": 2 ** 40}).encode(),                   # too big for int
    json.dumps({**GOOD, "event_time": "yesterday"}).encode(),          # bad timestamp
    json.dumps({**GOOD, "Amount": 3.0}).encode(),                      # key differs only in case: undeclared
    json.dumps({**GOOD, "coupon": None}).encode(),                     # undeclared, null
    json.dumps({**GOOD, "coupon": "X", "meta": {"a": 1}}).encode(),    # undeclared, rescued
    json.dumps(GOOD).encode()[:-1] + b',"amount":99.0}',               # duplicate key
    json.dumps(GOOD).encode() + b" trailing",                          # trailing garbage
    json.dumps(GOOD).encode() + b"{}",                                 # two objects
    b"{}", b"null", b'"text"', b"123", b"", b"   ", b"[1, 2, 3]", b"{bad",
    json.dumps({"event_id": "\u00e9\u4e2d", **{k: v for k, v in GOOD.items() if k != "event_id"}}).encode(),
    b"\xff\xfe" + json.dumps(GOOD).encode(),
    json.dumps({**GOOD, "pad": "x" * 5000}).encode(),
    json.dumps(GOOD).encode().replace(b'"event_id"', b'"event\\u005fid"'),  # escaped key name
    json.dumps({k: v for k, v in GOOD.items() if k != "status"} | {"x": {"status": "nested"}}).encode(),
]


def _decode_reference(raw, schema):
    """The two-parse decode (map + typed struct for every record, Spark's functions only): the oracle."""
    from pyspark.sql import functions as F

    from ingest.transforms import (INVALID_UTF8, MALFORMED_JSON, MISSING_REQUIRED, OVERSIZE, TYPE_MISMATCH,
                                   _first_error, _names_where, record_struct)

    text = F.col("_raw").cast("string")
    parsed = raw.select("*", F.from_json(text, "map<string,string>").alias("__map"),
                        F.from_json(text, record_struct(schema)).alias("__typed"),
                        F.length(F.col("_raw")).alias("__size"), F.is_valid_utf8(text).alias("__utf8"))
    present = {f.name: F.col("__map").getItem(f.name).isNotNull() for f in schema.fields}
    checked = parsed.select(
        "*",
        _names_where([(f.name, ~present[f.name]) for f in schema.fields if f.required]).alias("__missing"),
        _names_where([(f.name, present[f.name] & F.col("__typed").getField(f.name).isNull())
                      for f in schema.fields]).alias("__mismatched"),
    )
    size, missing, mismatched = F.col("__size"), F.col("__missing"), F.col("__mismatched")
    reason, detail = _first_error([
        (F.col("_raw").isNull(), MALFORMED_JSON, F.lit("null payload")),
        (size > schema.max_record_bytes, OVERSIZE,
         F.format_string("payload is %d bytes; limit is %d", size, F.lit(schema.max_record_bytes))),
        (~F.col("__utf8"), INVALID_UTF8, F.lit("payload is not valid UTF-8")),
        (F.col("__map").isNull(), MALFORMED_JSON, F.lit("not a JSON object")),
        (missing.isNotNull(), MISSING_REQUIRED, F.concat(F.lit("missing: "), missing)),
        (mismatched.isNotNull(), TYPE_MISMATCH,
         F.concat(F.lit("wrong type for: "), mismatched, F.lit(" (raw: "),
                  F.to_json(F.map_filter("__map", lambda k, v: F.array_contains(
                      F.split(mismatched, ", "), k))), F.lit(")"))),
    ])
    declared = F.array(*[F.lit(f.name) for f in schema.fields])
    extra = F.map_filter("__map", lambda k, v: ~F.array_contains(declared, k))
    rescued = F.when(F.size(extra) > 0, F.to_json(extra))
    fields = [F.col("__typed").getField(f.name).alias(f.name) for f in schema.fields]
    return checked.select(*raw.columns, *fields, rescued.alias("_rescued_data"), reason.alias("_error"),
                          detail.alias("_error_detail"))


def test_decode_matches_the_two_parse_reference_on_edge_payloads(spark, config):
    frame = _frame(spark, EDGE_PAYLOADS + [None])
    got = decode(frame, config.record_schema).orderBy("_offset").collect()
    want = _decode_reference(frame, config.record_schema).orderBy("_offset").collect()
    assert len(got) == len(EDGE_PAYLOADS) + 1
    for payload, g, w in zip(EDGE_PAYLOADS + [None], got, want, strict=True):
        assert g.asDict() == w.asDict(), payload
    # The corpus reaches every outcome, so the comparison covers each branch of the fast path.
    assert {r["_error"] for r in got} == {None, "malformed_json", "missing_required_field", "type_mismatch",
                                          "invalid_utf8", "oversize"}
    assert any(r["_rescued_data"] for r in got)

    # The clean ones took the fast path: the plain record, optional fields absent, non-ASCII text, an escaped key.
    fast = frame.select("_offset", clean_record_decoder(spark, config.record_schema).isNotNull().alias("fast"))
    assert sorted(r["_offset"] for r in fast.collect() if r["fast"]) == [0, 1, 23, 26]


# Every declared type, each value written in the ways JSON allows and Spark reads (or refuses) differently. The
# clean-record decoder must give exactly what from_json gives, or leave the record to the exact path.
TYPE_CASES = {
    "s": ['"x"', '""', '"\\u00e9\\u4e2d"', '"\\u0000 tab\\t"', '"\\ud83d\\ude00"', '"\\ud800 lone"', "5", "true",
          '{"a": 1}', "[1]", "null"],
    "i": ["0", "-0", "7", "2147483647", "2147483648", "-2147483648", "-2147483649", "1.0", "1e2", '"5"', "true",
          "12345678901234567890", "null"],
    "l": ["0", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1.5", '"7"', "null"],
    "d": ["0", "-0.0", "1.5", "3", "0.1", "1e308", "1e309", "4.9e-324", "1e-400", "12345678901234567890123",
          '"NaN"', '"Infinity"', "NaN", '"1.5"', "true", "null"],
    "b": ["true", "false", '"true"', "1", "null"],
    "t": ['"2026-11-20T10:15:00.250Z"', '"2026-11-20 10:15:00"', '"2026-11-20"', '"2026-11-20T10:15:00+05:30"',
          '"2026-11-20T10:15:00.123456789Z"', '" 2026-11-20T10:15:00Z "', '"2026-11-20T10:15"', '"20261120"',
          '"2026"', '"1969-12-31T23:59:59.999999Z"', '"0001-01-01T00:00:00Z"', '"2026-11-20T10:15:00 UTC"',
          '"2026-11-20T10:15:00[Europe/Paris]"', '"yesterday"', '""', "1700000000", "-1", "99999999999999",
          "1.5", '"1700000000"', "null"],
    "dt": ['"2026-11-20"', '"2026-11-20T10:00:00"', '"2026-11"', '"2026"', '"+12026-01-01"', '"2026-13-01"',
           '"0001-01-01"', '"1582-10-10"', '" 2026-11-20 "', '"20000"', '""', "20000", "null"],
}
TYPES = {"s": "string", "i": "int", "l": "long", "d": "double", "b": "boolean", "t": "timestamp", "dt": "date"}


def _exactly(frame):
    """Values as the JVM holds them (Python cannot show year 1 or compare NaN): timestamps as epoch micros, dates as
    epoch days, doubles as their exact string."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, DoubleType, TimestampType

    def plain(field):
        column = F.col(field.name)
        if isinstance(field.dataType, TimestampType):
            return F.unix_micros(column).alias(field.name)
        if isinstance(field.dataType, DateType):
            return F.unix_date(column).alias(field.name)
        if isinstance(field.dataType, DoubleType):
            return F.format_string("%.17g", column).alias(field.name)
        return column

    return frame.select(*[plain(f) for f in frame.schema.fields])


def _typed_config() -> PipelineConfig:
    spec = pipeline_dict("delta", name="unit_types")
    spec["schema"] = {"fields": [{"name": n, "type": t, "required": n == "s"} for n, t in TYPES.items()],
                      "max_record_bytes": 4096}
    spec["sink"].pop("partition", None)
    return PipelineConfig.model_validate(spec)


@pytest.fixture(params=["UTC", "America/Los_Angeles"])
def session_zone(request, spark):
    """Timestamps without an offset are read in the session time zone, by both paths."""
    spark.conf.set("spark.sql.session.timeZone", request.param)
    yield request.param
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_clean_record_decoder_agrees_with_from_json_on_every_type(spark, session_zone):
    config = _typed_config()
    base = {n: cases[0] for n, cases in TYPE_CASES.items()}
    records = [base] + [{**base, name: value} for name, cases in TYPE_CASES.items() for value in cases[1:]]
    records += [{n: v for n, v in base.items() if n != name} for name in TYPES]  # each field absent
    payloads = [("{" + ", ".join(f'"{n}": {v}' for n, v in r.items()) + "}").encode() for r in records]
    frame = _frame(spark, payloads)
    got = _exactly(decode(frame, config.record_schema)).orderBy("_offset").collect()
    want = _exactly(_decode_reference(frame, config.record_schema)).orderBy("_offset").collect()
    for payload, g, w in zip(payloads, got, want, strict=True):
        assert g.asDict() == w.asDict(), payload
    fast = frame.select(clean_record_decoder(spark, config.record_schema).isNotNull().alias("fast")).collect()
    taken = sum(r["fast"] for r in fast)
    # Both paths are exercised: most values are read in one pass, the rest are left to Spark.
    assert 40 <= taken <= len(payloads) - 25, taken
    assert sum(r["_error"] is None for r in got) > taken  # some records are clean only by Spark's lenient reading
