"""Pure DataFrame -> DataFrame functions: decode raw source records against the declared schema, classify
failures, and shape rows for the table and the dead-letter table. No IO here; tests use small in-memory frames.

Input frames have the source's coordinate columns renamed to the common shape (see `kafka_coordinates`):
`_topic, _kafka_partition, _offset, _kafka_timestamp, _key, _raw`. (Not `_partition`: Iceberg reserves that name
for a metadata column.)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (BinaryType, BooleanType, DataType, DateType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType, TimestampType)

from ingest.config import PipelineConfig, RecordSchema
from ingest.spark import lakeline_class

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
# Kinesis: sequence numbers (up to ~56 digits) do not fit a long; they are stored zero-padded to a fixed width
# (ingest.sources.kinesis_offsets.SEQ_WIDTH) so string order is numeric order, in SQL too.
KINESIS_COORDINATE_FIELDS = [
    StructField("_stream", StringType(), False),
    StructField("_shard", StringType(), False),
    StructField("_sequence", StringType(), False),
    StructField("_arrival_timestamp", TimestampType(), True),
]


@dataclass(frozen=True)
class Coordinates:
    """Where a record came from, source-neutral: (source, partition) -> position. Kafka: (topic, partition) ->
    offset (long). Kinesis: (stream, shard) -> sequence number (zero-padded string). Commit records hold, per
    (source, partition), the next position as a Python int (for Kinesis: last sequence number + 1)."""
    fields: tuple[StructField, ...]
    source: str
    partition: str
    position: str

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def numeric(self) -> bool:
        return self.position == "_offset"

    def literal(self, position: int) -> Column:
        if self.numeric:
            return F.lit(int(position)).cast("long")
        from ingest.sources.kinesis_offsets import pad_sequence

        return F.lit(pad_sequence(position))


KAFKA = Coordinates(tuple(COORDINATE_FIELDS), "_topic", "_kafka_partition", "_offset")
KINESIS = Coordinates(tuple(KINESIS_COORDINATE_FIELDS), "_stream", "_shard", "_sequence")


def coordinates_for(config: PipelineConfig) -> Coordinates:
    return KINESIS if config.source.kind == "kinesis" else KAFKA


def dead_letter_schema(coords: Coordinates = KAFKA) -> StructType:
    return StructType([
        *coords.fields,
        StructField("_key", BinaryType(), True),
        StructField("_raw", BinaryType(), True),
        StructField("_error", StringType(), False),
        StructField("_error_detail", StringType(), True),
        StructField("_ingested_at", TimestampType(), False),
    ])


DEAD_LETTER_SCHEMA = dead_letter_schema(KAFKA)


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
        *coordinates_for(config).fields,
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


def kinesis_coordinates(kinesis_df: DataFrame) -> DataFrame:
    """The lakeline-kinesis source's columns -> the common raw-record shape (Kinesis coordinate names)."""
    return kinesis_df.select(
        F.col("stream").alias("_stream"),
        F.col("shard_id").alias("_shard"),
        F.col("sequence_number").alias("_sequence"),
        F.col("approximate_arrival_timestamp").alias("_arrival_timestamp"),
        F.col("partition_key").cast("binary").alias("_key"),
        F.col("data").alias("_raw"),
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


# Lakeline's JVM decoder for plainly clean records (infra/logstore/io/lakeline/spark/CleanRecordDecoder.java,
# built into the Lakeline jar by infra/setup.sh).
CLEAN_RECORD_DECODER = "io.lakeline.spark.CleanRecordDecoder"


def clean_record_decoder(spark: SparkSession, schema: RecordSchema) -> Column:
    """`_raw` through Lakeline's one-pass JVM decoder: the typed struct for a plainly clean record (exactly what
    `from_json` into `record_struct(schema)` gives), null for every other record. Registered once per session
    and schema."""
    spec = json.dumps({"fields": [{"name": f.name, "type": f.type, "required": f.required} for f in schema.fields],
                       "max_bytes": schema.max_record_bytes,
                       "time_zone": spark.conf.get("spark.sql.session.timeZone")}, sort_keys=True)
    name = "lakeline_clean_record_" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    if not spark.catalog.functionExists(name):
        decoder = lakeline_class(spark, CLEAN_RECORD_DECODER, lambda cls: cls(spec))  # a Java UDF with its config
        return_type = spark._jsparkSession.parseDataType(record_struct(schema).json())  # noqa: SLF001
        spark._jsparkSession.udf().register(name, decoder, return_type)  # noqa: SLF001
    return F.call_function(name, F.col("_raw"))


FIXED_INSTANT = "io.lakeline.spark.FixedInstant"


def fixed_timestamp(spark: SparkSession, at: datetime) -> Column:
    """`at` as a non-null timestamp column (the batch's `_ingested_at`) whose generated code does not depend on the
    value. `F.lit(at)` would put the value into Spark's generated code as a number: every micro-batch would then
    compile new classes and run its per-row loops interpreted until the JIT compiled them again (at 20,000 msg/s
    that cost a fifth to a third of the median latency, bench/results/tuning-2026-11-24.md). Lakeline's `FixedInstant`
    function carries the value as an object instead."""
    iso = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return Column(lakeline_class(spark, FIXED_INSTANT, lambda cls: cls.column(iso)))


def decode(raw: DataFrame, schema: RecordSchema) -> DataFrame:
    """Parse `_raw` as JSON against `schema`. Adds the typed fields, `_rescued_data` (undeclared fields as JSON),
    and `_error` / `_error_detail` (null for good records). Never drops a record.

    A plainly clean record (keys exactly declared fields, each present one typed non-null, each absent one
    optional) is decoded in one JSON pass by `clean_record_decoder`: the common case. Every other record takes the
    exact path, Spark's own functions: a parse into the declared struct (the typed values) and one into a string
    map, which tells a missing field from a null, names the mismatched fields and keeps the undeclared ones.
    Costs per record: bench/results/tuning-2026-11-24.md."""
    text = F.col("_raw").cast("string")
    fast = raw.select("*", clean_record_decoder(raw.sparkSession, schema).alias("__fast"))
    exact = F.col("__fast").isNull()
    # Three plan stages, the fewest that evaluate each parse once per record: the fast decoder, then the exact
    # path's two parses (only for the records the fast decoder left), then everything derived from them. Each
    # stage copies the rows, and the stages holding JSON functions run outside whole-stage code generation.
    parsed = fast.select("*", F.when(exact, F.from_json(text, "map<string,string>")).alias("__map"),
                         F.when(exact, F.from_json(text, record_struct(schema))).alias("__typed"),
                         F.length(F.col("_raw")).alias("__size"), F.is_valid_utf8(text).alias("__utf8"))
    typed, size = F.col("__typed"), F.col("__size")
    present = {f.name: F.col("__map").getItem(f.name).isNotNull() for f in schema.fields}
    missing = F.when(exact, _names_where([(f.name, ~present[f.name]) for f in schema.fields if f.required]))
    mismatched = F.when(exact, _names_where([(f.name, present[f.name] & typed.getField(f.name).isNull())
                                             for f in schema.fields]))
    reason, detail = _first_error([
        (F.col("_raw").isNull(), MALFORMED_JSON, F.lit("null payload")),
        (size > schema.max_record_bytes, OVERSIZE,
         F.format_string("payload is %d bytes; limit is %d", size, F.lit(schema.max_record_bytes))),
        (~F.col("__utf8"), INVALID_UTF8, F.lit("payload is not valid UTF-8")),
        (exact & F.col("__map").isNull(), MALFORMED_JSON, F.lit("not a JSON object")),
        (missing.isNotNull(), MISSING_REQUIRED, F.concat(F.lit("missing: "), missing)),
        (mismatched.isNotNull(), TYPE_MISMATCH,
         F.concat(F.lit("wrong type for: "), mismatched, F.lit(" (raw: "),
                  F.to_json(F.map_filter("__map", lambda k, v: F.array_contains(
                      F.split(mismatched, ", "), k))), F.lit(")"))),
    ])
    declared = F.array(*[F.lit(f.name) for f in schema.fields])
    extra = F.map_filter("__map", lambda k, v: ~F.array_contains(declared, k))
    rescued = F.when(exact & (F.size(extra) > 0), F.to_json(extra))
    fields = [F.coalesce(F.col("__fast").getField(f.name), typed.getField(f.name)).alias(f.name)
              for f in schema.fields]
    return parsed.select(*raw.columns, *fields, rescued.alias("_rescued_data"), reason.alias("_error"),
                         detail.alias("_error_detail"))


def table_rows(decoded: DataFrame, config: PipelineConfig, ingested_at: Column) -> DataFrame:
    """Good records shaped as the main table's rows."""
    good = decoded.filter(F.col("_error").isNull())
    part = config.sink.partition
    columns = [F.col(f.name) for f in config.record_schema.fields]
    if part is not None:
        source = F.col(part.source)
        columns.append((F.to_date(source) if part.transform == "day" else source).alias(part.column))
    columns += [F.col("_rescued_data"), *[F.col(c) for c in coordinates_for(config).names],
                ingested_at.alias("_ingested_at")]
    return good.select(*columns)


def dead_letter_rows(decoded: DataFrame, ingested_at: Column, coords: Coordinates = KAFKA) -> DataFrame:
    """Failed records with raw bytes, reason and coordinates."""
    bad = decoded.filter(F.col("_error").isNotNull())
    return bad.select(*coords.names, "_key", "_raw", "_error", "_error_detail", ingested_at.alias("_ingested_at"))


def is_new(high_water: dict[tuple[str, int | str], int], coords: Coordinates = KAFKA) -> Column:
    """True for records at or past the table's recorded next position for their (source, partition)."""
    if not high_water:
        return F.lit(True)
    pairs = [item for (topic, part), offset in high_water.items()
             for item in (F.lit(f"{topic}:{part}"), coords.literal(offset))]
    key = F.concat_ws(":", F.col(coords.source), F.col(coords.partition).cast("string"))
    # Unknown partition: everything is new (-1 for offsets, "" for padded sequence numbers).
    lowest = F.lit(-1).cast("long") if coords.numeric else F.lit("")
    floor = F.coalesce(F.try_element_at(F.create_map(*pairs), key), lowest)
    return F.col(coords.position) >= floor


def not_yet_committed(frame: DataFrame, high_water: dict[tuple[str, int | str], int],
                      coords: Coordinates = KAFKA) -> DataFrame:
    """Keep records the table does not hold yet: a replayed or re-planned range never writes a record twice."""
    return frame.filter(is_new(high_water, coords))
