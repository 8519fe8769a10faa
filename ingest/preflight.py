"""What a pipeline start checks before it takes anything or writes anything: the source exists and answers (Kafka
topics, the Kinesis stream), the table store answers (the Iceberg catalog; S3 for Delta), and an existing main
table can take the schema the YAML declares. Without Spark, in a second or two, so a typo fails at once and leaves
nothing behind: no lock, lease, table, checkpoint or lineage file.

Each check raises the error the later step would have raised (same class, same text) where there is one."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.adapters.kinesis import KinesisClient, client_options
from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.compatibility import changes_refusal
from ingest.errors import ConfigError, LakelineError
from ingest.formats import format_for
from ingest.formats.delta import delta_rs_uri, delta_storage_options
from ingest.formats.iceberg import iceberg_catalog

# Imported inside the functions that need them: pyspark's types (and ingest.evolution and ingest.transforms,
# which load pyspark), deltalake, pyiceberg and botocore are heavy, and a start that fails its first check should
# not pay for them.

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

    from ingest.config import PipelineConfig
    from ingest.settings import Settings


def check_start(config: "PipelineConfig", settings: "Settings") -> None:
    """Raise the first thing that would make this start fail; return when the start may take the pipeline."""
    check_source(config, settings)
    existing = existing_table_schema(config, settings)
    if existing is not None:
        check_declared_schema(config, existing, table_display_name(config, settings))


def check_table(config: "PipelineConfig", settings: "Settings") -> dict:
    """`lakeline check-config`'s look at the existing main table: the changes a start would make to it, or the
    start's refusal (ConfigError, ReaderLockedOut). A table whose store is not configured or does not answer is
    reported as not checked (the start checks it again)."""
    try:
        display_name = table_display_name(config, settings)
    except ConfigError as exc:
        return {"checked": False, "note": f"not checked: {exc}"}
    try:
        existing = existing_table_schema(config, settings)
    except LakelineError as exc:
        if isinstance(exc, ConfigError):
            raise
        return {"table": display_name, "checked": False, "note": f"not checked: {exc}"}
    if existing is None:
        return {"table": display_name, "checked": True, "exists": False,
                "note": "no table yet (or one only Spark reads): the start creates or checks it"}
    changes = check_declared_schema(config, existing, display_name)
    return {"table": display_name, "checked": True, "exists": True, "changes": changes}


def check_source(config: "PipelineConfig", settings: "Settings") -> None:
    """Kafka: the topics exist (ConfigError naming them); Kinesis: the stream exists (StreamNotFound)."""
    src = config.source
    if src.kind == "kinesis":
        KinesisClient(client_options(settings)).call("describe_stream_summary", StreamName=src.stream)
        return
    KafkaAdmin(settings).resolve_topics(src.topics, src.topic_pattern)


def check_declared_schema(config: "PipelineConfig", existing: "StructType", display_name: str) -> list[str]:
    """The YAML's columns can be brought onto the table (added or widened); a narrowing or an incompatible type is
    refused (ConfigError naming the column), and so is a widening that would turn on a table feature locking a
    supported reader out without `sink.allow_features` (ReaderLockedOut): the refusals a start makes after
    opening the table. Returns the changes a start would make."""
    from ingest.evolution import plan_changes
    from ingest.transforms import table_schema

    declared = format_for(config.sink.format).stored(table_schema(config))
    changes, refusals = plan_changes(existing, declared)
    if refusals:
        raise schema_refused(config, display_name, refusals)
    locked_out = changes_refusal(config, display_name, changes)
    if locked_out is not None:
        raise locked_out
    return [change.describe() for change in changes]


def schema_refused(config: "PipelineConfig", display_name: str, refusals: list[str]) -> ConfigError:
    return ConfigError(f"pipeline {config.pipeline}: its schema cannot be applied to {display_name} (nothing was "
                       "written):\n  - " + "\n  - ".join(refusals))


def table_display_name(config: "PipelineConfig", settings: "Settings") -> str:
    return f"{config.sink.format}:{format_for(config.sink.format).ref(config, settings)}"


def existing_table_schema(config: "PipelineConfig", settings: "Settings",
                          table: str | None = None) -> "StructType | None":
    """The main table's (or the pipeline's table `table`) schema in Spark's types, None when there is no table yet
    (or it cannot be read without Spark, e.g. a JDBC catalog: the start then checks it after opening the table, as
    it always has). Raises LakelineError when the catalog or S3 does not answer."""
    ref = format_for(config.sink.format).ref(config, settings, table)
    if config.sink.format == "iceberg":
        return _iceberg_schema(ref, settings)
    return _delta_schema(ref, settings)


def _iceberg_schema(identifier: str, settings: "Settings") -> "StructType | None":
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    uri = settings.iceberg_catalog_uri or ""
    if not uri or uri.startswith("jdbc:"):
        return None  # pyiceberg cannot open it; Spark's catalog is the one that reads it
    name = identifier.split(".", 1)[1]
    try:
        catalog = iceberg_catalog(settings)
        exists = catalog.table_exists(name)
    except Exception as exc:  # noqa: BLE001 - a connection error of whichever client the catalog uses
        raise LakelineError(f"the Iceberg catalog at {_without_secrets(uri)} did not answer ({exc}); is it running "
                            "and LAKELINE_ICEBERG_CATALOG_URI right?") from exc
    if not exists:
        return None
    try:
        return spark_struct(catalog.load_table(name).schema())
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    except Exception:  # noqa: BLE001 - its metadata unreadable without Spark, or a type Spark has no name for
        return None  # the start compares after opening the table, as it always has


def _delta_schema(location: str, settings: "Settings") -> "StructType | None":
    if location.startswith(("s3a://", "s3://", "s3n://")):
        _check_bucket_answers(location, settings)
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError
    from pyspark.sql.types import StructType

    try:
        table = DeltaTable(delta_rs_uri(location), storage_options=delta_storage_options(settings))
        # A Delta log holds the schema as Spark's own JSON.
        return StructType.fromJson(json.loads(table.schema().to_json()))
    except TableNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - e.g. a create a kill interrupted, which the start clears; S3 answered above
        return None  # the start compares after opening the table, as it always has


def _check_bucket_answers(location: str, settings: "Settings") -> None:
    """S3 answers for the table's bucket. Only an unreachable endpoint or a missing bucket fails: a policy may
    allow writing objects and still refuse HeadBucket."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _ = split_s3_uri(location)
    where = settings.s3_endpoint or "AWS S3"
    client = s3_client(settings, Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=10))
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket"):
            raise ConfigError(f"S3 bucket {bucket!r} of the table {location} does not exist at {where}; create it "
                              "or fix sink.location / LAKELINE_WAREHOUSE") from exc
    except BotoCoreError as exc:
        raise LakelineError(f"S3 at {where} did not answer ({exc}); is it running and LAKELINE_S3_ENDPOINT "
                            "right?") from exc


def _without_secrets(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}" if sep else uri


def spark_struct(schema) -> "StructType":
    """A pyiceberg schema (or struct type) in Spark's types, as Iceberg's Spark catalog reads it."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, spark_type(f.field_type), not f.required) for f in schema.fields])


def spark_type(iceberg_type) -> "DataType":
    from pyiceberg import types as it
    from pyspark.sql import types as st

    match iceberg_type:
        case it.StructType():
            return spark_struct(iceberg_type)
        case it.ListType():
            return st.ArrayType(spark_type(iceberg_type.element_type), not iceberg_type.element_required)
        case it.MapType():
            return st.MapType(spark_type(iceberg_type.key_type), spark_type(iceberg_type.value_type),
                              not iceberg_type.value_required)
        case it.DecimalType():
            return st.DecimalType(iceberg_type.precision, iceberg_type.scale)
    simple = {it.BooleanType: st.BooleanType, it.IntegerType: st.IntegerType, it.LongType: st.LongType,
              it.FloatType: st.FloatType, it.DoubleType: st.DoubleType, it.DateType: st.DateType,
              it.TimestamptzType: st.TimestampType, it.TimestampType: st.TimestampNTZType,
              it.StringType: st.StringType, it.UUIDType: st.StringType, it.BinaryType: st.BinaryType,
              it.FixedType: st.BinaryType}
    for iceberg_class, spark_class in simple.items():
        if isinstance(iceberg_type, iceberg_class):
            return spark_class()
    raise LookupError(f"no Spark type for Iceberg's {iceberg_type}")
