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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, IntegerType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

from ingest.config import PipelineConfig, RecordSchema
from ingest.kinesis_offsets import pad_sequence
from ingest.types import EVOLVED, JSON_TEXT, REQUIRED, table_type
from ingest.spark import lakeline_class

# Dead-letter reasons, in the order they are checked (the first that applies is recorded).
OVERSIZE = "oversize"
INVALID_UTF8 = "invalid_utf8"
MALFORMED_JSON = "malformed_json"
MISSING_REQUIRED = "missing_required_field"
# type_mismatch: a value that does not fit a required field (any field, under schema.on_type_conflict: dead_letter);
# schema_violation: the same for a column add mode added, under on_type_conflict: dead_letter.
TYPE_MISMATCH = "type_mismatch"
SCHEMA_VIOLATION = "schema_violation"
DEAD_LETTER_REASONS = (OVERSIZE, INVALID_UTF8, MALFORMED_JSON, MISSING_REQUIRED, TYPE_MISMATCH, SCHEMA_VIOLATION)

COORDINATE_FIELDS = [
    StructField("_topic", StringType(), False),
    StructField("_kafka_partition", IntegerType(), False),
    StructField("_offset", LongType(), False),
    StructField("_kafka_timestamp", TimestampType(), True),
]
# Kinesis: sequence numbers (up to ~56 digits) do not fit a long; they are stored zero-padded to a fixed width
# (ingest.kinesis_offsets.SEQ_WIDTH) so string order is numeric order, in SQL too.
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


# `_headers` (source.include_headers): a Kafka record's headers by name.
HEADERS_TYPE = MapType(StringType(), BinaryType(), True)


def record_struct(schema: RecordSchema) -> StructType:
    """The declared fields as the table's columns (all nullable: the decoder enforces required and NOT NULL)."""
    return schema.struct()


def table_schema(config: PipelineConfig) -> StructType:
    """Columns the pipeline writes to the main table: declared fields, rescued data, key and headers when
    included, source coordinates, ingest time. (Partition columns are the table format's: Iceberg's are hidden,
    Delta's are generated from these.)"""
    fields = list(record_struct(config.record_schema).fields)
    fields.append(StructField("_rescued_data", StringType(), True))
    if config.source.key_type is not None:
        fields.append(StructField("_key", StringType() if config.source.key_type == "string" else BinaryType(), True))
    if config.source.include_headers:
        fields.append(StructField("_headers", HEADERS_TYPE, True))
    fields += [
        *coordinates_for(config).fields,
        StructField("_ingested_at", TimestampType(), False),
    ]
    return StructType(fields)


def raw_fields(config: PipelineConfig) -> list[StructField]:
    """The raw-record shape decode takes: coordinates, `_key`, `_headers` (when the source includes them), `_raw`."""
    headers = [StructField("_headers", HEADERS_TYPE, True)] if config.source.include_headers else []
    return [*coordinates_for(config).fields, StructField("_key", BinaryType(), True), *headers,
            StructField("_raw", BinaryType(), True)]


def kafka_coordinates(kafka_df: DataFrame) -> DataFrame:
    """Spark's Kafka source columns -> the common raw-record shape (headers as a map, when the source reads them)."""
    headers = [F.map_from_entries(F.col("headers")).alias("_headers")] if "headers" in kafka_df.columns else []
    return kafka_df.select(
        F.col("topic").alias("_topic"),
        F.col("partition").cast("int").alias("_kafka_partition"),
        F.col("offset").cast("long").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_key"),
        *headers,
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


# Lakeline's record decoder (jvm/src/main/java/io/lakeline/spark/RecordDecoder.java, built into the Lakeline jar by
# infra/setup.sh): one strict JSON pass per record that types, checks and classifies it.
RECORD_DECODER = "io.lakeline.spark.RecordDecoder"


def decoder_struct(schema: RecordSchema, evolved: StructType | None = None) -> StructType:
    """The record type the decoder reads: the declared fields with their marks (ingest.types), plus, in add mode,
    the fields schema evolution added to the table (`evolved`: the table's record columns), marked so that a value
    that does not fit them is a schema_violation."""
    marked = StructType([f.struct_field() for f in schema.fields])
    return marked if evolved is None else _graft(marked, evolved)


def _graft(declared: DataType, table: DataType) -> DataType:
    if isinstance(declared, StructType) and isinstance(table, StructType):
        names = {f.name.lower() for f in declared.fields}
        held = {f.name.lower(): f for f in table.fields}
        fields = [StructField(f.name, _graft(f.dataType, held[f.name.lower()].dataType) if f.name.lower() in held
                              else f.dataType, f.nullable, f.metadata) for f in declared.fields]
        fields += [StructField(f.name, f.dataType, True, {EVOLVED: True}) for f in table.fields
                   if f.name.lower() not in names]
        return StructType(fields)
    if isinstance(declared, ArrayType) and isinstance(table, ArrayType):
        return ArrayType(_graft(declared.elementType, table.elementType), declared.containsNull)
    if isinstance(declared, MapType) and isinstance(table, MapType):
        return MapType(declared.keyType, _graft(declared.valueType, table.valueType), declared.valueContainsNull)
    return declared


def record_columns(config: PipelineConfig, table: StructType) -> StructType:
    """The table's record columns: what it holds besides the columns the pipeline adds (partition, rescued data,
    key, headers, coordinates, ingest time). In add mode these are the declared fields plus the evolved ones."""
    added = set(pipeline_columns(config)) - {f.name for f in config.record_schema.fields}
    return StructType([f for f in table.fields if f.name not in added])


def pipeline_columns(config: PipelineConfig) -> list[str]:
    """Names schema evolution never takes for a record field: the columns the pipeline writes and the partition
    names (a Delta generated column, an Iceberg partition field)."""
    return [*table_schema(config).fieldNames(), *(p.column for p in config.partitioning if not p.is_source_column)]


def decoded_type(marked: StructType) -> StructType:
    """What the record decoder returns per record: the typed record (null for a bad one), the rescued values as one
    JSON object (undeclared fields, and values that did not fit their field when conflicts are rescued), the
    dead-letter reason and detail (null for a good one), the fields whose value was rescued as a conflict (sorted,
    `[]` for any array index or map key; null when none) and whether an undeclared field was rescued."""
    return StructType([StructField("record", table_type(marked), True),
                       StructField("rescued", StringType(), True),
                       StructField("error", StringType(), True),
                       StructField("detail", StringType(), True),
                       StructField("conflicts", ArrayType(StringType(), False), True),
                       StructField("undeclared", BooleanType(), True)])


def conflict_fields(marked: StructType, under: str = "") -> list[str]:
    """The paths (as the decoder names them in `conflicts`: `customer.tier`, `items[].qty`, `attrs[]`) of every field
    whose value the decoder may rescue as a conflict: all but required and NOT NULL fields and `json` ones."""
    paths: list[str] = []
    for f in marked.fields:
        path = f"{under}.{f.name}" if under else f.name
        required = f.metadata.get(REQUIRED, False) if not under else not f.nullable
        if not required and not f.metadata.get(JSON_TEXT, False):
            paths.append(path)
        paths += _conflict_fields_in(f.dataType, path) if not f.metadata.get(JSON_TEXT, False) else []
    return paths


def _conflict_fields_in(data_type: DataType, path: str) -> list[str]:
    if isinstance(data_type, StructType):
        return conflict_fields(data_type, path)
    if isinstance(data_type, ArrayType | MapType):
        inner = data_type.elementType if isinstance(data_type, ArrayType) else data_type.valueType
        return [f"{path}[]", *_conflict_fields_in(inner, f"{path}[]")]
    return []


def record_decoder(spark: SparkSession, schema: RecordSchema, evolved: StructType | None = None) -> Column:
    """`_raw` through Lakeline's record decoder (a Java UDF registered once per session and record type)."""
    marked = decoder_struct(schema, evolved)
    spec = json.dumps({"schema": json.loads(marked.json()), "max_bytes": schema.max_record_bytes,
                       "time_zone": spark.conf.get("spark.sql.session.timeZone"),
                       "on_conflict": "rescue" if schema.rescues_conflicts else "dead_letter"}, sort_keys=True)
    name = "lakeline_decode_" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    if not spark.catalog.functionExists(name):
        decoder = lakeline_class(spark, RECORD_DECODER, lambda cls: cls(spec))  # a Java UDF with its config
        return_type = spark._jsparkSession.parseDataType(decoded_type(marked).json())  # noqa: SLF001
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


def decode(raw: DataFrame, schema: RecordSchema, evolved: StructType | None = None) -> DataFrame:
    """Parse `_raw` as JSON against `schema`, in one strict pass per record (`record_decoder`). Adds the typed fields,
    `_rescued_data` (undeclared fields, top level and nested, and under schema.on_type_conflict: rescue the values
    that do not fit their field, as one JSON object of their original values keyed by path), `_error` /
    `_error_detail` (null for good records), `_conflicts` (the fields whose value was rescued) and `_undeclared`
    (whether an undeclared field was rescued). Never drops a record.

    Reasons, the first that applies: malformed_json (null, not one JSON object, trailing content, a repeated key),
    oversize, invalid_utf8, missing_required_field (names every such field), type_mismatch (names every field whose
    value does not fit its type without loss and could not be rescued, with the raw values), schema_violation
    (add mode, conflicts not rescued: a value that does not fit a column schema evolution added). `evolved`: the
    table's record columns, in add mode. Costs per record: bench/results/."""
    decoded = F.col("__decoded")
    # Two stages: the decoder once per record, then the columns taken from its result (Spark does not collapse a
    # projection that would call the UDF once per column).
    staged = raw.select("*", record_decoder(raw.sparkSession, schema, evolved).alias("__decoded"))
    names = decoder_struct(schema, evolved).fieldNames()
    fields = [decoded.getField("record").getField(name).alias(name) for name in names]
    return staged.select(*raw.columns, *fields, decoded.getField("rescued").alias("_rescued_data"),
                         decoded.getField("error").alias("_error"), decoded.getField("detail").alias("_error_detail"),
                         decoded.getField("conflicts").alias("_conflicts"),
                         decoded.getField("undeclared").alias("_undeclared"))


def table_rows(decoded: DataFrame, config: PipelineConfig, ingested_at: Column,
               evolved: StructType | None = None) -> DataFrame:
    """Good records shaped as the main table's rows (with the columns schema evolution added, given `evolved`)."""
    good = decoded.filter(F.col("_error").isNull())
    columns = [F.col(name) for name in decoder_struct(config.record_schema, evolved).fieldNames()]
    columns.append(F.col("_rescued_data"))
    if config.source.key_type is not None:
        columns.append(F.col("_key").cast(config.source.key_type).alias("_key"))
    if config.source.include_headers:
        columns.append(F.col("_headers"))
    columns += [*[F.col(c) for c in coordinates_for(config).names],
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
