"""`lakeline schema diff` and `schema infer`: what the YAML declares against the table, and a proposed `schema:`
block from a sample of the source's records."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.types import (ArrayType, DataType, MapType, StringType, StructType)

from ingest.compatibility import changes_refusal
from ingest.config import NAME
from ingest.evolution import infer, merge, plan_changes
from ingest.kinesis_offsets import TRIM_HORIZON
from ingest.types import to_ddl

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.config import PipelineConfig
    from ingest.settings import Settings



@dataclass
class SchemaDiff:
    pipeline: str
    table: str
    exists: bool
    changes: list[str] = field(default_factory=list)     # what the next start applies
    refusals: list[str] = field(default_factory=list)    # what the next start refuses
    table_only: list[str] = field(default_factory=list)  # record columns the YAML does not declare

    def to_json(self) -> dict:
        return self.__dict__.copy()


def diff(spark: "SparkSession", config: "PipelineConfig", settings: "Settings") -> SchemaDiff:
    """The declared schema against the main table: what a start would add or widen, what it would refuse, and the
    columns only the table has (added by add mode, or dropped from the YAML)."""
    from ingest.formats import format_for, tables_for
    from ingest.transforms import record_columns, table_schema

    from pyspark.errors import AnalysisException

    main, _ = tables_for(spark, config, settings)
    result = SchemaDiff(config.pipeline, main.display_name, exists=True)
    try:
        held = main.table_schema()
    except AnalysisException as exc:
        if exc.getCondition() not in ("PATH_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND", "DELTA_TABLE_NOT_FOUND"):
            raise
        result.exists = False  # the first start creates it
        result.changes = [f"create with {f.name} {f.dataType.simpleString()}" for f in table_schema(config)]
        result.changes += [f"partition by {p.column} = {p.transform}({p.source})" for p in config.partitioning]
        return result
    declared = format_for(config.sink.format).stored(table_schema(config))
    changes, refusals = plan_changes(held, declared)
    locked_out = changes_refusal(config, main.display_name, changes)
    if locked_out is not None:
        refusals.append(str(locked_out))
        changes = [c for c in changes if c.kind != "widen"]
    result.changes, result.refusals = [c.describe() for c in changes], refusals
    names = {f.name.lower() for f in config.record_schema.fields}
    result.table_only = [f"{f.name} {f.dataType.simpleString()}" for f in record_columns(config, held).fields
                         if f.name.lower() not in names]
    return result


# ---- infer ---------------------------------------------------------------------------------------------------
def infer_value(value) -> DataType | None:
    """The type evolution gives `value` with `schema.infer_timestamps` (ingest.evolution.infer, the one typing of
    JSON values), nested keys that are not column names kept (the proposal names them)."""
    return infer(value, timestamps=True, any_name=True)


@dataclass
class Inferred:
    sampled: int
    not_json: int
    fields: list[dict]

    def yaml(self) -> str:
        import yaml

        return yaml.safe_dump({"schema": {"fields": self.fields}}, sort_keys=False, width=120)


def infer_schema(records: list[bytes]) -> Inferred:
    """A proposed `schema.fields` list from sample payloads: types merged over every record (bigint and double give
    double; a real conflict keeps the first seen, noted), `required` for fields present and non-null in every record,
    `json_name` for keys that are not column names."""
    types: dict[str, DataType | None] = {}
    present: dict[str, int] = {}
    objects = 0
    for raw in records:
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(value, dict):
            continue
        objects += 1
        for key, item in value.items():
            types[key] = merge(types.get(key), infer_value(item))
            if item is not None:
                present[key] = present.get(key, 0) + 1
    fields = []
    for key, data_type in types.items():
        spec: dict = {"name": key if NAME.match(key) else _column_name(key)}
        if spec["name"] != key:
            spec["json_name"] = key
        ddl = to_ddl(data_type or StringType())
        spec["type"] = ddl.replace("`", "") if _plain(data_type) else ddl
        if present.get(key, 0) == objects:
            spec["required"] = True
        fields.append(spec)
    return Inferred(len(records), len(records) - objects, fields)


def _plain(data_type: DataType | None) -> bool:
    """Whether every nested name is a plain identifier (then the DDL reads better without backticks)."""
    if isinstance(data_type, StructType):
        return all(NAME.match(f.name) and _plain(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _plain(data_type.elementType)
    if isinstance(data_type, MapType):
        return _plain(data_type.valueType)
    return True


def _column_name(key: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_") or "field"
    return name if name[0].isalpha() else f"f_{name}"


def sample(config: "PipelineConfig", settings: "Settings", count: int, timeout: float = 30.0) -> list[bytes]:
    """Up to `count` payloads from the start of the source (Kafka: every partition from its earliest offset;
    Kinesis: every shard from TRIM_HORIZON)."""
    if config.source.kind == "kinesis":
        return _kinesis_sample(config, settings, count)
    return _kafka_sample(config, settings, count, timeout)


def _kafka_sample(config, settings, count: int, timeout: float) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from ingest.adapters.kafka_admin import KafkaAdmin, librdkafka_config

    admin = KafkaAdmin(settings)
    topics = admin.resolve_topics(config.source.topics, config.source.topic_pattern)
    marks = {(t, p): wm for t in topics for p, wm in admin.watermarks(t).items()}
    available = sum(high - low for low, high in marks.values())
    consumer = Consumer({**librdkafka_config(settings), "group.id": f"lakeline-schema-infer-{config.pipeline}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in marks])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < min(count, available) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=min(500, count - len(out)), timeout=1.0):
                if message.error() is None and message.value() is not None:
                    out.append(message.value())
        return out
    finally:
        consumer.close()


def _kinesis_sample(config, settings, count: int) -> list[bytes]:
    from ingest.adapters.kinesis import KinesisClient, client_options

    client = KinesisClient(client_options(settings))
    out: list[bytes] = []
    for shard in client.list_shards(config.source.stream):
        for records, _ended, _caught_up in client.pages(config.source.stream, shard.shard_id, TRIM_HORIZON):
            out += [r["Data"] for r in records]
            if len(out) >= count:
                return out[:count]
    return out
