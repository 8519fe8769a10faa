"""Pure DataFrame -> DataFrame functions: decode raw source records against the declared schema, classify
failures, and shape rows for the table and the dead-letter table. No IO here; tests use small in-memory frames.

Input frames have the source's coordinate columns renamed to the common shape (see `kafka_coordinates`):
`_topic, _kafka_partition, _offset, _kafka_timestamp, _key, _raw`. (Not `_partition`: Iceberg reserves that name
for a metadata column.)
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BinaryType, BooleanType, DataType, DateType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType, TimestampType)

from ingest.config import PipelineConfig, RecordSchema

SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(), "int": IntegerType(), "long": LongType(), "double": DoubleType(),
    "boolean": BooleanType(), "timestamp": TimestampType(), "date": DateType(),
}

# Dead-letter reasons, in the order they are checked (the first that applies is recorded).
OVERSIZE = "oversize"
INVALID_UTF8 = "invalid_utf8"
MALFORMED_JSON = "malformed_json"
MISSING_REQUIRED = "missing_required_field"
TYPE_MISMATCH = "type_mismatch"

COORDINATE_FIELDS = [
    StructField("_topic", StringType(), False),
    StructField("_kafka_partition", IntegerType(), False),
    StructField("_offset", LongType(), False),
    StructField("_kafka_timestamp", TimestampType(), True),
]
COORDINATES = [f.name for f in COORDINATE_FIELDS]
DEAD_LETTER_SCHEMA = StructType([
    *COORDINATE_FIELDS,
    StructField("_key", BinaryType(), True),
    StructField("_raw", BinaryType(), True),
    StructField("_error", StringType(), False),
    StructField("_error_detail", StringType(), True),
    StructField("_ingested_at", TimestampType(), False),
])


def record_struct(schema: RecordSchema) -> StructType:
    return StructType([StructField(f.name, SPARK_TYPES[f.type], True) for f in schema.fields])


def table_schema(config: PipelineConfig) -> StructType:
    """Columns of the main table: declared fields, partition column, rescued data, source coordinates."""
    fields = list(record_struct(config.record_schema).fields)
    if config.sink.partition is not None:
        part = config.sink.partition
        source_type = SPARK_TYPES[config.record_schema.field(part.source).type]
        fields.append(StructField(part.column, DateType() if part.transform == "day" else source_type, True))
    fields += [
        StructField("_rescued_data", StringType(), True),
        *COORDINATE_FIELDS,
        StructField("_ingested_at", TimestampType(), False),
    ]
    return StructType(fields)


def kafka_coordinates(kafka_df: DataFrame) -> DataFrame:
    """Spark's Kafka source columns -> the common raw-record shape."""
    return kafka_df.select(
        F.col("topic").alias("_topic"),
        F.col("partition").cast("int").alias("_kafka_partition"),
        F.col("offset").cast("long").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_key"),
        F.col("value").alias("_raw"),
    )


def _first_error(checks: list[tuple[Column, str, Column | None]]) -> tuple[Column, Column]:
    """(reason, detail) of the first check that holds, else nulls."""
    reason = reduce(lambda acc, c: acc.when(c[0], F.lit(c[1])), checks[1:],
                    F.when(checks[0][0], F.lit(checks[0][1])))
    detail = reduce(lambda acc, c: acc.when(c[0], c[2] if c[2] is not None else F.lit(None)), checks[1:],
                    F.when(checks[0][0], checks[0][2] if checks[0][2] is not None else F.lit(None)))
    return reason, detail


def _names_where(conditions: list[tuple[str, Column]]) -> Column:
    """'a, b' for the field names whose condition holds (null if none)."""
    if not conditions:
        return F.lit(None).cast("string")
    names = F.array_compact(F.array(*[F.when(cond, F.lit(name)) for name, cond in conditions]))
    return F.when(F.size(names) > 0, F.array_join(names, ", "))


def decode(raw: DataFrame, schema: RecordSchema) -> DataFrame:
    """Parse `_raw` as JSON against `schema`. Adds the typed fields, `_rescued_data` (undeclared fields as JSON),
    and `_error` / `_error_detail` (null for good records). Never drops a record."""
    text = F.col("_raw").cast("string")
    # Built in stages, each referring to the previous stage's columns: one big nested expression would be
    # re-optimised by Catalyst for every action of every micro-batch.
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


def table_rows(decoded: DataFrame, config: PipelineConfig, ingested_at: Column) -> DataFrame:
    """Good records shaped as the main table's rows."""
    good = decoded.filter(F.col("_error").isNull())
    part = config.sink.partition
    columns = [F.col(f.name) for f in config.record_schema.fields]
    if part is not None:
        source = F.col(part.source)
        columns.append((F.to_date(source) if part.transform == "day" else source).alias(part.column))
    columns += [F.col("_rescued_data"), *[F.col(c) for c in COORDINATES], ingested_at.alias("_ingested_at")]
    return good.select(*columns)


def dead_letter_rows(decoded: DataFrame, ingested_at: Column) -> DataFrame:
    """Failed records with raw bytes, reason and coordinates."""
    bad = decoded.filter(F.col("_error").isNotNull())
    return bad.select(*COORDINATES, "_key", "_raw", "_error", "_error_detail", ingested_at.alias("_ingested_at"))


def is_new(high_water: dict[tuple[str, int], int]) -> Column:
    """True for records at or past the table's recorded next offset for their (topic, partition)."""
    if not high_water:
        return F.lit(True)
    pairs = [item for (topic, part), offset in high_water.items()
             for item in (F.lit(f"{topic}:{part}"), F.lit(offset).cast("long"))]
    key = F.concat_ws(":", F.col("_topic"), F.col("_kafka_partition").cast("string"))
    floor = F.coalesce(F.try_element_at(F.create_map(*pairs), key), F.lit(-1).cast("long"))
    return F.col("_offset") >= floor


def not_yet_committed(frame: DataFrame, high_water: dict[tuple[str, int], int]) -> DataFrame:
    """Keep records the table does not hold yet: a replayed or re-planned range never writes a record twice."""
    return frame.filter(is_new(high_water))
