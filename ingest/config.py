"""Typed pipeline configuration, loaded from YAML under conf/ and validated with pydantic.

The YAML says *what* (source topics, schema, sink table, trigger); *where* (endpoints, buckets, secrets) comes
from ingest.settings. Every error names the file, the key and the fix.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from pyspark.sql.types import (ArrayType, DataType, MapType, StructField, StructType, TimestampNTZType,
                               TimestampType)

from ingest.errors import ConfigError
from ingest.partitioning import PartitionField, Transform, check_fields, resolve
from ingest.settings import Settings, is_secret_option
from ingest.yaml_loading import load_yaml_mapping
from ingest.types import JSON_NAME, REQUIRED, TIME_FORMAT, TIME_FORMATS, contains, parse_type, table_type

# The one name rule: pipelines, tables and columns start with a letter and use letters, digits and _ (a name
# becomes a column, a DAG id or part of a path).
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_TRIGGER = re.compile(r"^(available-now|processing-time=(\d+)(ms|s|m))$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchemaField(_Strict):
    name: str
    # A Spark SQL DDL type, nested to any depth: string, int, long, double, decimal(12,2), timestamp, json,
    # struct<id:string NOT NULL,tier:string>, array<struct<sku:string,qty:int>>, map<string,string>, ...
    # (ingest/types.py; conf/README.md lists them all).
    type: str
    required: bool = False
    # The JSON key, when it is not a valid column name (e.g. "@timestamp", "event-id").
    json_name: str | None = None
    # How the timestamps in this field are written: ISO 8601 strings (an integer is read as epoch seconds), or
    # epoch seconds / milliseconds / microseconds as JSON numbers.
    format: Literal[TIME_FORMATS] = "iso"

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"field name {value!r} must start with a letter and use letters, digits and _; "
                             f"a JSON key that is not such a name goes in json_name (name: {_suggest(value)!r}, "
                             f"json_name: {value!r})")
        return value

    @field_validator("type")
    @classmethod
    def _valid_type(cls, value: str) -> str:
        parse_type(value)  # TypeSyntaxError (a ValueError) names the position and what was expected
        return value

    @model_validator(mode="after")
    def _format_needs_a_timestamp(self) -> "SchemaField":
        if self.format != "iso" and not contains(self.data_type, (TimestampType, TimestampNTZType)):
            raise ValueError(f"format {self.format!r} is for timestamps, and {self.name!r} ({self.type}) holds none")
        return self

    @property
    def data_type(self) -> DataType:
        """The Spark type of the table column (`ingest.types.table_type`: nested fields nullable, marks stripped)."""
        return table_type(parse_type(self.type)[0])

    def struct_field(self) -> StructField:
        """The field as the record decoder reads it: its type plus the marks (JSON key, required, time format,
        json text) in the field metadata."""
        data_type, metadata = parse_type(self.type)
        if self.json_name is not None:
            metadata[JSON_NAME] = self.json_name
        if self.required:
            metadata[REQUIRED] = True
        if self.format != "iso":
            metadata[TIME_FORMAT] = self.format
        return StructField(self.name, data_type, True, metadata)


def _suggest(key: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_") or "field"
    return name if name[0].isalpha() else f"f_{name}"


class RecordSchema(_Strict):
    fields: Annotated[list[SchemaField], Field(min_length=1)]
    # Records whose raw payload is larger than this go to the dead-letter table as 'oversize'.
    max_record_bytes: Annotated[int, Field(gt=0)] = 1_048_576
    # What to do with fields the schema does not declare: `rescue` keeps them in the _rescued_data JSON column;
    # `add` adds them to the table as nullable columns typed from the values, while the stream runs; `fail` stops the
    # stream before it writes the batch, naming the field, its first offset and the fix.
    evolution: Literal["rescue", "add", "fail"] = "rescue"
    # Add mode: a new field whose string values all parse as ISO-8601 timestamps (dates) becomes a timestamp (date).
    infer_timestamps: bool = False
    # What to do with a value that does not fit its field's type (in rescue and add modes): `rescue` lands the record
    # with that field null and the original value in _rescued_data under the field's path; `dead_letter` sends the
    # record to the dead-letter table (type_mismatch, or schema_violation for a column add mode added). A `required`
    # field (or a nested NOT NULL one) is never nulled: its record is always a type_mismatch dead letter.
    on_type_conflict: Literal["rescue", "dead_letter"] = "rescue"

    @model_validator(mode="after")
    def _conflicts_rescued_only_beside_rescued_fields(self) -> "RecordSchema":
        explicit = "on_type_conflict" in self.model_fields_set
        if self.evolution == "fail" and self.on_type_conflict == "rescue" and explicit:
            raise ValueError("on_type_conflict: rescue needs evolution rescue or add (evolution: fail sends a value "
                             "that does not fit its type to the dead letters); remove on_type_conflict")
        return self

    @property
    def rescues_conflicts(self) -> bool:
        """Whether a value that does not fit its (nullable) field is rescued rather than dead-lettered."""
        return self.evolution != "fail" and self.on_type_conflict == "rescue"

    @model_validator(mode="after")
    def _unique_names(self) -> "RecordSchema":
        seen: set[str] = set()
        keys: set[str] = set()
        for item in self.fields:
            if item.name.lower() in seen:
                raise ValueError(f"field {item.name!r} is declared twice")
            seen.add(item.name.lower())
            key = item.json_name or item.name
            if key in keys:
                raise ValueError(f"JSON key {key!r} is read by two fields")
            keys.add(key)
        return self

    def field(self, name: str) -> SchemaField | None:
        return next((f for f in self.fields if f.name == name), None)

    def struct(self) -> StructType:
        """The declared fields as columns (all nullable: the decoder enforces required and NOT NULL)."""
        return StructType([StructField(f.name, f.data_type, True) for f in self.fields])


class _SourceMetadata(_Strict):
    # Land the record key (Kafka key, Kinesis partition key) in the main table as `_key`: false, string (UTF-8;
    # `true` means string) or binary.
    include_key: Literal[False, True, "string", "binary"] = False

    @property
    def key_type(self) -> str | None:
        """None (no `_key` column), "string" or "binary"."""
        return None if self.include_key is False else "string" if self.include_key is True else self.include_key


class KafkaSource(_SourceMetadata):
    kind: Literal["kafka"]
    topics: list[str] | None = None
    topic_pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(gt=0)] | None = None
    # Non-secret consumer properties (e.g. fetch.max.bytes), over Lakeline's defaults (KAFKA_SOURCE_DEFAULTS in
    # ingest/sources/streams.py: fetch.max.wait.ms, max.poll.records, max.partition.fetch.bytes). Security settings
    # come from LAKELINE_KAFKA_OPT_*.
    options: dict[str, str] = {}
    # Land the record headers in the main table as `_headers` (map<string,binary>; a repeated name keeps its last
    # value; null when a record has none).
    include_headers: bool = False

    @model_validator(mode="after")
    def _one_subscription(self) -> "KafkaSource":
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("set exactly one of 'topics' (a list) or 'topic_pattern' (a regex)")
        for key in self.options:
            if is_secret_option(key):
                env = "LAKELINE_KAFKA_OPT_" + key.upper().replace(".", "_")
                raise ValueError(f"option {key!r} is a secret and must not be in YAML; set {env} in the environment")
        return self


class KinesisSource(_SourceMetadata):
    kind: Literal["kinesis"]
    stream: str
    starting_position: Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"] = "TRIM_HORIZON"
    # For AT_TIMESTAMP: an ISO 8601 time with a zone, e.g. 2026-11-22T00:00:00Z.
    starting_timestamp: datetime | None = None
    max_records_per_batch: Annotated[int, Field(gt=0)] = 100_000

    @property
    def include_headers(self) -> bool:
        return False  # Kinesis records have no headers

    @model_validator(mode="after")
    def _timestamp_when_needed(self) -> "KinesisSource":
        if (self.starting_position == "AT_TIMESTAMP") != (self.starting_timestamp is not None):
            raise ValueError("set starting_timestamp exactly when starting_position is AT_TIMESTAMP")
        if self.starting_timestamp is not None and self.starting_timestamp.tzinfo is None:
            raise ValueError("starting_timestamp needs a zone, e.g. 2026-11-22T00:00:00Z")
        return self

    @property
    def reader_starting_position(self) -> str:
        if self.starting_timestamp is not None:
            return f"AT_TIMESTAMP:{self.starting_timestamp.timestamp()}"
        return self.starting_position


class PartitionBy(_Strict):
    # A field of schema.fields, dotted for a field inside structs (customer.tier).
    source: str
    # identity, year, month, day, hour, bucket(N) or truncate(W) (ingest/partitioning.py).
    transform: str
    # The partition's name (Delta's generated column, Iceberg's partition field). Default: source_transform, e.g.
    # occurred_at_day, customer_id_bucket; identity on a top-level field keeps the field's name.
    column: str | None = None

    @field_validator("transform")
    @classmethod
    def _valid_transform(cls, value: str) -> str:
        return str(Transform.parse(value))

    @field_validator("column")
    @classmethod
    def _valid_column(cls, value: str | None) -> str | None:
        if value is not None and not NAME.match(value):
            raise ValueError(f"{value!r} must start with a letter and use letters, digits and _")
        return value


def _partition_list(value):
    """`sink.partition` is a list of fields; the single mapping of earlier releases is a one-field list with that
    form's defaults (column event_date, transform day)."""
    if isinstance(value, dict):
        return [{"column": "event_date", "transform": "day", **value}]
    return value


class RouteOverride(_Strict):
    # More declared fields for this routed table (added to schema.fields; a field of the same name replaces it).
    fields: list[SchemaField] = []
    # This table's partitioning instead of sink.partition (the same form).
    partition: Annotated[list[PartitionBy], BeforeValidator(_partition_list)] | None = None


_ROUTE_BY = re.compile(r"^(header:[^\s]+|key|field:[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*)$")
_ROUTE_TABLE = re.compile(r"^[A-Za-z0-9_]*\{value\}[A-Za-z0-9_]*$")


class Route(_Strict):
    """Fan-out: each record goes to a table named after its route value (ingest.routing)."""

    # header:<name> (needs source.include_headers), key, or field:<declared field, dotted inside structs>.
    by: str
    # The table name, with {value} for the normalised route value, e.g. gh_{value}.
    table: str
    # At most this many routed tables; a value past them goes where `overflow` says.
    max_tables: Annotated[int, Field(gt=0, le=1000)] = 100
    # default: the pipeline's sink.table; dead_letter: the dead-letter table (reason route_overflow).
    overflow: Literal["default", "dead_letter"] = "default"
    # Per routed table (by its name, e.g. gh_push): more declared fields, its own partitioning.
    overrides: dict[str, RouteOverride] = {}

    @field_validator("by")
    @classmethod
    def _valid_by(cls, value: str) -> str:
        if not _ROUTE_BY.match(value):
            raise ValueError(f"{value!r} must be header:<name>, key, or field:<field> (dotted inside structs), "
                             "e.g. header:X-GitHub-Event")
        return value

    @field_validator("table")
    @classmethod
    def _valid_table(cls, value: str) -> str:
        if not _ROUTE_TABLE.match(value) or value.count("{value}") != 1:
            raise ValueError(f"{value!r} must hold {{value}} once and otherwise letters, digits and _, "
                             "e.g. gh_{value}")
        return value

    @field_validator("overrides")
    @classmethod
    def _valid_override_names(cls, value: dict) -> dict:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"{name!r} is not a table name (letters, digits and _, starting with a letter)")
        return value

    @property
    def kind(self) -> str:
        """header, key or field."""
        return self.by.split(":", 1)[0]

    @property
    def argument(self) -> str:
        """The header's name or the field's dotted path ("" for key)."""
        return self.by.split(":", 1)[1] if ":" in self.by else ""


class Sink(_Strict):
    format: Literal["delta", "iceberg"]
    table: str
    # Iceberg namespace in the shared catalog; ignored for Delta.
    namespace: str = "lakeline"
    # Delta only: explicit table location. Default: <LAKELINE_WAREHOUSE>/delta/<table>.
    location: str | None = None
    partition: Annotated[list[PartitionBy], BeforeValidator(_partition_list)] = []
    dead_letter_table: str | None = None
    # Delta table features Lakeline may turn on although they lock a supported reader out (docs/readers.md).
    # typeWidening: a declared widening is applied; delta-rs, DuckDB, pandas and polars then cannot open the table.
    allow_features: list[Literal["typeWidening"]] = []
    # Fan-out to many tables by a header, the key or a field (conf/README.md, ingest/routing.py); sink.table is
    # then the default table.
    route: Route | None = None

    @model_validator(mode="after")
    def _features_of_the_format(self) -> "Sink":
        if self.allow_features and self.format != "delta":
            raise ValueError("allow_features: lists Delta table features; an Iceberg table widens (type promotion) "
                             "without locking a reader out, so remove the key")
        return self

    @field_validator("table", "namespace", "dead_letter_table")
    @classmethod
    def _valid_identifier(cls, value: str | None) -> str | None:
        if value is not None and not NAME.match(value):
            raise ValueError(f"{value!r} must start with a letter and use letters, digits and _")
        return value

    @property
    def dead_letters(self) -> str:
        return self.dead_letter_table or f"{self.table}_dead_letters"


class Checkpoint(_Strict):
    # Default: <LAKELINE_WAREHOUSE>/_checkpoints/<pipeline>.
    location: str | None = None
    # Default: <LAKELINE_WAREHOUSE>/_checkpoint_backups/<pipeline>.
    backup_location: str | None = None
    keep_backups: Annotated[int, Field(ge=1)] = 5


class Freshness(_Strict):
    # Breached when records are waiting in the source and the newest commit is older than this...
    max_staleness: str = "15m"
    # ...or when more than this many records are waiting (unset: no lag limit).
    max_lag_records: Annotated[int, Field(gt=0)] | None = None

    @field_validator("max_staleness")
    @classmethod
    def _valid_duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class PipelineConfig(_Strict):
    pipeline: str
    source: Annotated[KafkaSource | KinesisSource, Field(discriminator="kind")]
    record_schema: RecordSchema = Field(alias="schema")
    sink: Sink
    checkpoint: Checkpoint = Checkpoint()
    trigger: str = "processing-time=5s"
    freshness: Freshness = Freshness()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("pipeline")
    @classmethod
    def _valid_pipeline(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r} must start with a letter and use letters, digits and _")
        return value

    @field_validator("trigger")
    @classmethod
    def _valid_trigger(cls, value: str) -> str:
        parse_trigger(value)
        return value

    @model_validator(mode="after")
    def _partition_fields_valid(self) -> "PipelineConfig":
        declared = {f.name.lower() for f in self.record_schema.fields}
        fields = []
        for index, entry in enumerate(self.sink.partition):
            try:
                field = resolve(entry.source, entry.transform, entry.column, self.record_schema.struct())
            except ValueError as exc:
                raise ValueError(f"sink.partition[{index}] ({entry.source} {entry.transform}): {exc}") from None
            if field.column.lower() in declared and not field.is_source_column:
                raise ValueError(f"sink.partition[{index}].column {field.column!r} is also a field in "
                                 "schema.fields; name the partition something else")
            fields.append(field)
        try:
            check_fields(fields)
        except ValueError as exc:
            raise ValueError(f"sink.partition: {exc}") from None
        return self

    @model_validator(mode="after")
    def _route_valid(self) -> "PipelineConfig":
        route = self.sink.route
        if route is None:
            return self
        if route.kind == "header" and not self.source.include_headers:
            raise ValueError(f"sink.route.by: {route.by} reads a record header: set source.include_headers: true "
                             "(a Kafka source; Kinesis records have no headers)")
        if route.kind == "field":
            kind = _path_type(self.record_schema.struct(), route.argument.split("."))
            if kind is None:
                raise ValueError(f"sink.route.by: {route.argument!r} is not a field of schema.fields (dotted "
                                 "inside structs)")
            if isinstance(kind, (StructType, ArrayType, MapType)):
                raise ValueError(f"sink.route.by: {route.argument!r} is a {kind.simpleString()}; route by a "
                                 "field holding one value (a string, a number or a boolean)")
        for name, override in route.overrides.items():
            data = self.model_dump(by_alias=True, exclude_unset=False)
            sink = {**data["sink"], "table": name, "route": None}
            if override.partition is not None:
                sink["partition"] = [p.model_dump() for p in override.partition]
            schema = dict(data["schema"])
            extra = {f.name.lower() for f in override.fields}
            schema["fields"] = [f for f in schema["fields"] if f["name"].lower() not in extra] + [
                f.model_dump() for f in override.fields]
            try:
                PipelineConfig.model_validate({**data, "schema": schema, "sink": sink})
            except ValidationError as exc:
                first = exc.errors()[0]
                raise ValueError(f"sink.route.overrides.{name}: {_location(first['loc'])}: {_hint(first)}") from None
        return self

    @property
    def partitioning(self) -> list[PartitionField]:
        """The table's partition fields, resolved against the declared schema (empty: unpartitioned)."""
        struct = self.record_schema.struct()
        return [resolve(e.source, e.transform, e.column, struct) for e in self.sink.partition]

    # Resolved locations (need the environment's warehouse).
    def delta_location(self, settings: Settings, table: str | None = None) -> str:
        if table is None and self.sink.location:
            return self.sink.location.rstrip("/")
        warehouse = settings.require("warehouse", "LAKELINE_WAREHOUSE", "locate Delta tables")
        return f"{warehouse}/delta/{table or self.sink.table}"

    def iceberg_identifier(self, settings: Settings, table: str | None = None) -> str:
        return f"{settings.iceberg_catalog_name}.{self.sink.namespace}.{table or self.sink.table}"

    def backup_location(self, settings: Settings) -> str:
        if self.checkpoint.backup_location:
            return self.checkpoint.backup_location.rstrip("/")
        warehouse = settings.require("warehouse", "LAKELINE_WAREHOUSE", "locate checkpoint backups")
        return f"{warehouse}/_checkpoint_backups/{self.pipeline}"

    def checkpoint_location(self, settings: Settings) -> str:
        if self.checkpoint.location:
            return self.checkpoint.location.rstrip("/")
        warehouse = settings.require("warehouse", "LAKELINE_WAREHOUSE", "locate the checkpoint")
        return f"{warehouse}/_checkpoints/{self.pipeline}"


def _path_type(struct: StructType, path: list[str]) -> DataType | None:
    """The type at a dotted path inside `struct` (None: no such field)."""
    field = next((f for f in struct.fields if f.name == path[0]), None)
    if field is None:
        return None
    if len(path) == 1:
        return field.dataType
    return _path_type(field.dataType, path[1:]) if isinstance(field.dataType, StructType) else None


_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")


def parse_duration(value: str) -> timedelta:
    """'90s', '15m', '6h', '7d' -> a timedelta. A ValueError, which pydantic reports under the key being read."""
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration; use e.g. 30m, 24h or 7d")
    return timedelta(seconds=int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)])


def parse_trigger(value: str) -> tuple[str, float | None]:
    """'available-now' -> ('available-now', None); 'processing-time=5s' -> ('processing-time', 5.0)."""
    match = _TRIGGER.match(value.strip())
    if not match:
        raise ValueError(f"trigger {value!r} must be 'available-now' or 'processing-time=<N>ms|s|m' "
                         f"(e.g. processing-time=5s)")
    if match.group(1) == "available-now":
        return "available-now", None
    amount, unit = int(match.group(2)), match.group(3)
    return "processing-time", amount / 1000 if unit == "ms" else amount * (60 if unit == "m" else 1)


def validation_problems(path, exc: ValidationError) -> list[str]:
    """One `file: key: fix` line per pydantic error (shared by every YAML file Lakeline validates)."""
    return [f"{path}: {_location(err['loc'])}: {_hint(err)}" for err in exc.errors()]


def _location(loc: tuple) -> str:
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in ("kafka", "kinesis"))]
    return ".".join(parts) or "(top level)"


def _hint(error: dict) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key (typo?) — remove it or check the spelling against conf/README.md"
    if kind == "missing":
        return "required key is missing — add it"
    if kind == "union_tag_invalid":
        return "source.kind must be 'kafka' or 'kinesis'"
    msg = error["msg"]
    return msg.removeprefix("Value error, ")


def load_pipeline(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML. Raises ConfigError listing every problem as `file: key: fix`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such pipeline file (pipelines live in conf/pipelines/).")
    data = load_yaml_mapping(path, "pipeline, source, schema, sink, ...")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(path, exc)
        raise ConfigError("invalid pipeline config:\n  " + "\n  ".join(problems)) from None


def analyst_names(configs: "list[PipelineConfig]", routes: "dict[str, list[str]] | None" = None,
                  ) -> dict[str, tuple["PipelineConfig", str]]:
    """The readable name each table of these pipelines gets in an analyst's session (`lakeline query`, the SQL
    endpoint, the notebook API) -> (pipeline, its table name). A main table goes by its `sink.table` and its
    dead-letter table by `sink.dead_letters`, unless two pipelines share that name (the same topic into Delta and
    Iceberg): then both go by the pipeline's name (`orders_delta`, `orders_delta_dead_letters`). `routes`: per
    pipeline, its routed tables (ingest.formats.routed_names), each by its own name, or `<pipeline>_<table>` when
    two pipelines make the same one."""
    routes = routes or {}
    wanted = [(config, table, table) for config in configs
              for table in (config.sink.table, config.sink.dead_letters, *routes.get(config.pipeline, []))]
    taken: dict[str, int] = {}
    for _, _, name in wanted:
        taken[name] = taken.get(name, 0) + 1
    names: dict[str, tuple[PipelineConfig, str]] = {}
    for config, table, name in wanted:
        if taken[name] > 1:
            name = (config.pipeline if table == config.sink.table else f"{config.pipeline}_dead_letters"
                    if table == config.sink.dead_letters else f"{config.pipeline}_{table}")
        if name in names:
            raise ConfigError(f"pipelines {names[name][0].pipeline} and {config.pipeline} both give a table the "
                              f"analyst name {name!r}; rename one pipeline or its sink.table")
        names[name] = (config, table)
    return names
