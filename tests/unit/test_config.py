from pathlib import Path

import pytest
import yaml

from ingest.config import load_pipeline, parse_trigger
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
        d["schema"] = {**d["schema"], "fields": d["schema"]["fields"] + [{"name": "x", "type": "float"}]}
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
