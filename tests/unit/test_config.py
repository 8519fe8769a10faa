from pathlib import Path

import pytest
import yaml

from ingest.config import analyst_names, load_pipeline, parse_trigger
from ingest.errors import ConfigError
from ingest.settings import load_settings, parse_env_file
from tests.helpers import pipeline_dict, write_pipeline

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((REPO / "conf" / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_pipelines_are_valid(path):
    config = load_pipeline(path)
    assert config.pipeline == path.stem


def _error_for(tmp_path, mutate) -> str:
    data = pipeline_dict("delta", name="bad_pipe")
    mutate(data)
    path = write_pipeline(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    message = str(info.value)
    assert str(path) in message, "the error must name the file"
    return message


def test_unknown_key_is_named(tmp_path):
    message = _error_for(tmp_path, lambda d: d["sink"].update(fromat="delta"))
    assert "sink.fromat" in message and "unknown key" in message


def test_bad_format_lists_choices(tmp_path):
    message = _error_for(tmp_path, lambda d: d["sink"].update(format="parquet"))
    assert "sink.format" in message and "'delta'" in message and "'iceberg'" in message


def test_missing_required_key(tmp_path):
    message = _error_for(tmp_path, lambda d: d.pop("sink"))
    assert "sink: required key is missing" in message


def test_bad_trigger_explains_the_form(tmp_path):
    message = _error_for(tmp_path, lambda d: d.update(trigger="every 5 seconds"))
    assert "trigger" in message and "processing-time=<N>ms|s|m" in message


def test_secret_in_yaml_is_refused_with_env_var_fix(tmp_path):
    message = _error_for(tmp_path, lambda d: d["source"].update(options={"sasl.jaas.config": "x"}))
    assert "LAKELINE_KAFKA_OPT_SASL_JAAS_CONFIG" in message


def test_topics_and_pattern_are_exclusive(tmp_path):
    message = _error_for(tmp_path, lambda d: d["source"].update(topic_pattern="orders.*"))
    assert "exactly one of 'topics'" in message


def test_partition_source_must_be_a_declared_timestamp(tmp_path):
    message = _error_for(tmp_path, lambda d: d["sink"].update(partition={"column": "d", "source": "amount"}))
    assert "needs a timestamp or date field" in message and "amount" in message


def test_wrong_field_type_and_several_errors_at_once(tmp_path):
    def mutate(d):
        d["schema"] = {**d["schema"], "fields": d["schema"]["fields"] + [{"name": "x", "type": "varchar(10)"}]}
        d["source"]["max_offsets_per_trigger"] = 0
    message = _error_for(tmp_path, mutate)
    assert "schema.fields.9.type" in message
    assert "source.max_offsets_per_trigger" in message


def test_invalid_yaml_reports_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("pipeline: x\nsource: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML at line \d+"):
        load_pipeline(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such pipeline file"):
        load_pipeline(tmp_path / "nope.yaml")


def test_trigger_parsing():
    assert parse_trigger("available-now") == ("available-now", None)
    assert parse_trigger("processing-time=500ms") == ("processing-time", 0.5)
    assert parse_trigger("processing-time=2m") == ("processing-time", 120)


def test_settings_env_overlays_env_file(tmp_path, monkeypatch):
    env_file = tmp_path / "x.env"
    env_file.write_text("# local\nLAKELINE_S3_ENDPOINT=http://file:1\nexport LAKELINE_WAREHOUSE=s3a://b/w/\n"
                        "AWS_SECRET_ACCESS_KEY=from-file\nAWS_ACCESS_KEY_ID=key-id\nLAKELINE_SPARK_MASTER=local[3]\n")
    for name, value in {"LAKELINE_ENV_FILE": str(env_file), "LAKELINE_S3_ENDPOINT": "http://env:2",
                        "LAKELINE_KAFKA_OPT_SASL_MECHANISM": "PLAIN",
                        "LAKELINE_KAFKA_OPT_SASL_PASSWORD": "hunter2"}.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.s3_endpoint == "http://env:2"
    assert settings.warehouse == "s3a://b/w" and settings.spark_master == "local[3]"
    assert settings.kafka_client_properties() == {"sasl.mechanism": "PLAIN", "sasl.password": "hunter2"}
    assert settings.aws_credentials() == {"access_key_id": "key-id", "secret_access_key": "from-file"}
    for shown in (str(settings.describe()), repr(settings), str(settings)):
        assert "hunter2" not in shown and "from-file" not in shown
    assert settings.describe()["kafka_options"] == {"sasl.mechanism": "PLAIN", "sasl.password": "**********"}


@pytest.mark.parametrize("name,value,words", [("LAKELINE_S3_PATH_STYLE", "maybe", "LAKELINE_S3_PATH_STYLE='maybe'"),
                                              ("LAKELINE_SPARK_CONF", "[1]", "LAKELINE_SPARK_CONF must be")])
def test_a_bad_environment_value_names_the_variable(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert words in str(raised.value)


def test_a_bad_env_file_line_stops_the_load(tmp_path, monkeypatch):
    env_file = tmp_path / "x.env"
    env_file.write_text("LAKELINE_WAREHOUSE=s3a://b/w\nnot a pair\n")
    monkeypatch.setenv("LAKELINE_ENV_FILE", str(env_file))
    with pytest.raises(ConfigError, match=r"x.env:2: expected KEY=VALUE"):
        load_settings()


def test_env_file_bad_line_is_named(tmp_path):
    env_file = tmp_path / "x.env"
    env_file.write_text("GOOD=1\nthis is not a pair\n")
    with pytest.raises(ConfigError, match=r"x.env:2: expected KEY=VALUE"):
        parse_env_file(env_file)


def test_missing_warehouse_names_the_variable(tmp_path):
    config = load_pipeline(write_pipeline(tmp_path, pipeline_dict("delta", name="p")))
    settings = load_settings()
    with pytest.raises(ConfigError, match="LAKELINE_WAREHOUSE is not set"):
        config.delta_location(settings)


def test_shipped_yaml_holds_no_endpoints_or_secrets():
    for path in (REPO / "conf").rglob("*.yaml"):
        text = path.read_text().lower()
        for word in ("127.0.0.1", "localhost", "secret_access_key", "password", "s3a://", "s3://"):
            assert word not in text, f"{path} contains {word!r}"
        assert yaml.safe_load(text)


@pytest.mark.parametrize("path", sorted((REPO / "conf" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_are_valid(path):
    assert load_pipeline(path).pipeline


@pytest.mark.parametrize("field,words", [
    ({"name": "x", "type": "struct<a:string"}, ["schema.fields.0.type", "expected ',' or '>'", "position 15"]),
    ({"name": "x", "type": "decimal(40,2)"}, ["schema.fields.0.type", "1 <= precision <= 38"]),
    ({"name": "x", "type": "varchar"}, ["schema.fields.0.type", "expected a type", "'varchar'"]),
    ({"name": "x", "type": "map<int,string>"}, ["map keys must be string"]),
    ({"name": "x", "type": "variant"}, ["variant is not supported", "use `json`"]),
    ({"name": "@timestamp", "type": "timestamp"}, ["json_name: '@timestamp'", "name: 'timestamp'"]),
    ({"name": "x", "type": "string", "format": "epoch_millis"}, ["is for timestamps"]),
    ({"name": "x", "type": "string", "format": "epoch_nanos"}, ["schema.fields.0.format", "epoch_millis"]),
])
def test_a_bad_field_type_names_the_key_and_the_fix(tmp_path, field, words):
    message = _error_for(tmp_path, lambda d: d.update(schema={**d["schema"], "fields": [field]}))
    for word in words:
        assert word in message, message


def test_nested_types_parse_into_spark_types_with_the_decoder_marks():
    from pyspark.sql.types import DecimalType, StructType

    from ingest.config import SchemaField
    from ingest.types import JSON_NAME, JSON_TEXT, REQUIRED, TIME_FORMAT, to_ddl

    field = SchemaField(name="order", type="struct<id: string NOT NULL, total: decimal(12,2), "
                                            "items: array<struct<`sku-id`: string, qty: int>>, meta: json>")
    assert isinstance(field.data_type, StructType) and field.data_type["total"].dataType == DecimalType(12, 2)
    # the table column: NOT NULL is the decoder's to enforce, the marks are stripped
    assert field.data_type["id"].nullable and field.data_type["meta"].metadata == {}
    declared = field.struct_field().dataType
    assert not declared["id"].nullable and declared["meta"].metadata == {JSON_TEXT: True}
    assert to_ddl(declared) == ("struct<`id`:string NOT NULL,`total`:decimal(12,2),"
                                "`items`:array<struct<`sku-id`:string,`qty`:int>>,`meta`:string>")
    marked = SchemaField(name="ts", type="timestamp", json_name="@timestamp", required=True,
                         format="epoch_millis").struct_field()
    assert marked.metadata == {JSON_NAME: "@timestamp", REQUIRED: True, TIME_FORMAT: "epoch_millis"}
    for alias, name in (("integer", "int"), ("bigint", "bigint"), ("short", "smallint"), ("real", "float")):
        assert SchemaField(name="x", type=alias).data_type.simpleString() == name


def test_source_metadata_columns_are_off_by_default_and_typed_when_on():
    from ingest.config import PipelineConfig
    from ingest.transforms import table_schema

    plain = PipelineConfig.model_validate(pipeline_dict("delta", name="p"))
    assert "_key" not in table_schema(plain).fieldNames() and "_headers" not in table_schema(plain).fieldNames()
    data = pipeline_dict("delta", name="p")
    data["source"].update(include_key="binary", include_headers=True)
    schema = table_schema(PipelineConfig.model_validate(data))
    assert schema["_key"].dataType.simpleString() == "binary"
    assert schema["_headers"].dataType.simpleString() == "map<string,binary>"
    data["source"]["include_key"] = True
    assert table_schema(PipelineConfig.model_validate(data))["_key"].dataType.simpleString() == "string"


def test_kinesis_has_no_headers_to_include(tmp_path):
    def kinesis(data):
        data["source"] = {"kind": "kinesis", "stream": "s", "include_headers": True}

    message = _error_for(tmp_path, kinesis)
    assert "source.include_headers" in message


def test_analyst_names_are_the_table_names_unless_two_pipelines_share_one(tmp_path):
    def config(pipeline, table, fmt="delta"):
        data = pipeline_dict(fmt)
        data["pipeline"], data["sink"]["table"] = pipeline, table
        return load_pipeline(write_pipeline(tmp_path, data))

    names = analyst_names([config("orders_delta", "orders"), config("orders_iceberg", "orders", "iceberg"),
                           config("clicks_in", "clicks")])
    assert {name: (c.pipeline, table) for name, (c, table) in names.items()} == {
        "orders_delta": ("orders_delta", "orders"),
        "orders_delta_dead_letters": ("orders_delta", "orders_dead_letters"),
        "orders_iceberg": ("orders_iceberg", "orders"),
        "orders_iceberg_dead_letters": ("orders_iceberg", "orders_dead_letters"),
        "clicks": ("clicks_in", "clicks"),
        "clicks_dead_letters": ("clicks_in", "clicks_dead_letters"),
    }
    with pytest.raises(ConfigError, match="both give a table the analyst name 'orders_delta'"):
        analyst_names([config("orders_delta", "orders"), config("orders_iceberg", "orders"),
                       config("p3", "orders_delta")])


def test_type_conflicts_are_rescued_unless_told_or_in_fail_mode(tmp_path):
    def schema(**keys) -> "object":
        data = pipeline_dict("delta", name="conflicts")
        data["schema"] = {**data["schema"], **keys}
        return load_pipeline(write_pipeline(tmp_path, data)).record_schema

    assert schema().on_type_conflict == "rescue" and schema().rescues_conflicts
    assert schema(evolution="add").rescues_conflicts
    assert not schema(on_type_conflict="dead_letter").rescues_conflicts
    assert not schema(evolution="fail").rescues_conflicts  # fail mode keeps every conflict a dead letter
    message = _error_for(tmp_path, lambda d: d.update(schema={**d["schema"], "evolution": "fail",
                                                             "on_type_conflict": "rescue"}))
    assert "schema: on_type_conflict: rescue needs evolution rescue or add" in message
    message = _error_for(tmp_path, lambda d: d.update(schema={**d["schema"], "on_type_conflict": "drop"}))
    assert "schema.on_type_conflict" in message and "'dead_letter'" in message
