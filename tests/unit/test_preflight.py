"""A start checks before it takes or writes anything (ingest.preflight, called first by ingest.ownership.drive): a
missing Kinesis stream, an unreachable catalog or a YAML the existing table cannot take fail with the start's
error and leave no lock file, lease, table or checkpoint behind. Against tests/conftest.py's in-process moto
Kinesis server (about 1 s for the module) and local folders; no Spark, no broker. (The missing Kafka topic:
tests/integration/test_preflight.py, against the real broker.)"""

from __future__ import annotations

import uuid

import pytest

from infra.procs import free_port
from ingest.config import load_pipeline
from ingest.errors import ConfigError, LakelineError, StreamNotFound
from ingest.ownership import drive
from ingest.pipeline import Pipeline
from ingest.preflight import check_start
from ingest.settings import Settings
from tests.helpers import pipeline_dict, write_pipeline


@pytest.fixture
def local(tmp_path, monkeypatch, moto_kinesis):
    """Settings for a Kinesis pipeline on the moto server, tables and checkpoints under tmp_path/warehouse, the
    host locks under tmp_path/locks."""
    monkeypatch.setenv("LAKELINE_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "conf").mkdir()
    return Settings(warehouse=str(tmp_path / "warehouse"), kinesis_endpoint=moto_kinesis["endpoint"],
                    aws_region=moto_kinesis["region"], aws_access_key_id="testing",
                    aws_secret_access_key="testing", iceberg_catalog_uri=f"sqlite:///{tmp_path}/catalog.db")


def _kinesis_config(tmp_path, fmt: str, stream: str):
    data = pipeline_dict(fmt)
    data["source"] = {"kind": "kinesis", "stream": stream}
    return load_pipeline(write_pipeline(tmp_path / "conf", data))


def _new_stream(settings: Settings) -> str:
    from ingest.adapters.kinesis import KinesisClient, client_options

    name = f"s{uuid.uuid4().hex[:10]}"
    KinesisClient(client_options(settings)).call("create_stream", StreamName=name, ShardCount=1)
    return name


def _left_behind(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for folder in ("warehouse", "locks") if (tmp_path / folder).exists()
                  for p in (tmp_path / folder).rglob("*"))


def test_a_missing_kinesis_stream_fails_before_anything_is_taken_or_written(tmp_path, local):
    config = _kinesis_config(tmp_path, "delta", "no-such-stream")
    with pytest.raises(StreamNotFound, match="'no-such-stream' not found"), drive(Pipeline(config, local)):
        pytest.fail("drive() took the pipeline")
    assert _left_behind(tmp_path) == []


def test_an_unreachable_iceberg_catalog_fails_before_anything_is_taken_or_written(tmp_path, local):
    unreachable = local.model_copy(update={"iceberg_catalog_uri": f"http://127.0.0.1:{free_port()}"})
    config = _kinesis_config(tmp_path, "iceberg", _new_stream(local))
    with pytest.raises(LakelineError, match="Iceberg catalog at http://127.0.0.1:.* did not answer"), \
            drive(Pipeline(config, unreachable)):
        pytest.fail("drive() took the pipeline")
    assert _left_behind(tmp_path) == []


def test_an_unreachable_s3_fails_before_anything_is_taken_or_written(tmp_path, local):
    nowhere = local.model_copy(update={"warehouse": "s3a://bucket/warehouse",
                                       "s3_endpoint": f"http://127.0.0.1:{free_port()}"})
    config = _kinesis_config(tmp_path, "delta", _new_stream(local))
    with pytest.raises(LakelineError, match="S3 at http://127.0.0.1:.* did not answer"):
        check_start(config, nowhere)


def _delta_table(location: str, columns: dict[str, str]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    types = {"string": pa.string(), "double": pa.float64(), "bigint": pa.int64(), "int": pa.int32()}
    write_deltalake(location, pa.table({name: pa.array([], types[kind]) for name, kind in columns.items()}))


def test_an_existing_table_the_yaml_cannot_change_fails_before_anything_is_taken(tmp_path, local):
    config = _kinesis_config(tmp_path, "delta", _new_stream(local))
    _delta_table(config.delta_location(local), {"event_id": "string", "amount": "string"})  # declared: double
    with pytest.raises(ConfigError, match="(?s)its schema cannot be applied to delta:.*amount: the table has string"):
        check_start(config, local)


def test_an_existing_table_the_yaml_widens_or_extends_passes(tmp_path, local):
    config = _kinesis_config(tmp_path, "delta", _new_stream(local))
    _delta_table(config.delta_location(local), {"event_id": "string", "amount": "double", "items": "int",
                                                "extra": "bigint"})
    check_start(config, local)


def test_an_existing_iceberg_table_of_the_declared_schema_passes(tmp_path, local):
    """The Spark-free read of an Iceberg table's schema gives the types the declared schema is stored as."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from ingest.formats import format_for
    from ingest.formats.iceberg import iceberg_catalog
    from ingest.preflight import existing_table_schema, spark_struct
    from ingest.transforms import table_schema

    config = _kinesis_config(tmp_path, "iceberg", _new_stream(local))
    declared = format_for("iceberg").stored(table_schema(config))
    catalog = iceberg_catalog(local)
    catalog.create_namespace(config.sink.namespace)
    catalog.create_table(f"{config.sink.namespace}.{config.sink.table}", to_arrow_schema(declared),
                         location=f"file://{tmp_path}/warehouse-iceberg")
    read = existing_table_schema(config, local)
    assert isinstance(read, StructType)
    assert [(f.name, f.dataType) for f in read.fields] == [(f.name, f.dataType) for f in declared.fields]
    assert spark_struct(catalog.load_table(f"{config.sink.namespace}.{config.sink.table}").schema()) == read
    check_start(config, local)
