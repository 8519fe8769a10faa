"""Endpoints and secrets: from the environment, or an env file — never from pipeline YAML.

Precedence: real environment variables, then the env file named by LAKELINE_ENV_FILE, then the local stack's
<state>/stack/stack.env written by `lakeline dev up`. With no S3 endpoint set, S3A and boto3 talk to real AWS.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ingest.errors import ConfigError

KAFKA_OPTION_PREFIX = "LAKELINE_KAFKA_OPT_"
# Kafka client properties that hold secrets: refused in YAML, masked whenever settings are shown.
_SECRET_OPTION = re.compile(r"(password|jaas|secret|token|\.key$|keystore|truststore\.certificates)")


class Settings(BaseModel):
    """Where things are, for one process. Built by `load_settings()`."""

    model_config = ConfigDict(frozen=True)

    kafka_bootstrap_servers: str | None = None
    # Extra Kafka client properties (security.protocol, sasl.*, ssl.*), e.g. LAKELINE_KAFKA_OPT_SASL_MECHANISM.
    kafka_options: dict[str, str] = {}
    s3_endpoint: str | None = None
    s3_path_style: bool = True
    kinesis_endpoint: str | None = None
    aws_region: str = "us-east-1"
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    warehouse: str | None = None
    iceberg_catalog_name: str = "lakeline"
    iceberg_catalog_uri: str | None = None
    spark_master: str = "local[2]"
    spark_jars_dir: str | None = None
    # Extra Spark properties, applied over Lakeline's defaults (LAKELINE_SPARK_CONF, a JSON object).
    spark_conf: dict[str, str] = {}
    python: str = sys.executable

    def require(self, field: str, env_var: str, purpose: str) -> str:
        value = getattr(self, field)
        if not value:
            raise ConfigError(f"{env_var} is not set; it is needed to {purpose}. Set it in the environment or an "
                              f"env file (LAKELINE_ENV_FILE), or run `lakeline dev up` for the local stack.")
        return value

    def describe(self) -> dict[str, str]:
        """A printable view with secrets masked."""
        out = {k: v for k, v in self.model_dump().items() if v not in (None, {}, "")}
        for key in ("aws_secret_access_key", "aws_session_token"):
            if key in out:
                out[key] = "****"
        out["kafka_options"] = {k: ("****" if is_secret_option(k) else v) for k, v in self.kafka_options.items()}
        return out


def is_secret_option(name: str) -> bool:
    """True for a Kafka client property that carries a secret (e.g. sasl.jaas.config, ssl.key.password)."""
    return bool(_SECRET_OPTION.search(name))


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments ignored; an unparsable line is an error naming it."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def _default_env_file() -> Path | None:
    from infra.paths import state_dir  # infra is a sibling package with no Spark/IO at import

    candidate = state_dir() / "stack" / "stack.env"
    return candidate if candidate.is_file() else None


def merged_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The env file's values overlaid by the real environment."""
    environ = dict(os.environ if environ is None else environ)
    named = environ.get("LAKELINE_ENV_FILE")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"LAKELINE_ENV_FILE={named}: no such file.")
        file_values = parse_env_file(path)
    else:
        default = _default_env_file()
        file_values = parse_env_file(default) if default else {}
    return {**file_values, **environ}


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = merged_environment(environ)
    kafka_options = {
        key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", "."): value
        for key, value in env.items() if key.startswith(KAFKA_OPTION_PREFIX)
    }
    spark_conf = _spark_conf(env.get("LAKELINE_SPARK_CONF") or "")
    path_style = env.get("LAKELINE_S3_PATH_STYLE", "true").lower()
    if path_style not in ("true", "false"):
        raise ConfigError(f"LAKELINE_S3_PATH_STYLE={path_style!r}: use true or false.")
    return Settings(
        kafka_bootstrap_servers=env.get("LAKELINE_KAFKA_BOOTSTRAP_SERVERS") or None,
        kafka_options=kafka_options,
        s3_endpoint=env.get("LAKELINE_S3_ENDPOINT") or None,
        s3_path_style=path_style == "true",
        kinesis_endpoint=env.get("LAKELINE_KINESIS_ENDPOINT") or None,
        aws_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
        warehouse=(env.get("LAKELINE_WAREHOUSE") or "").rstrip("/") or None,
        iceberg_catalog_name=env.get("LAKELINE_ICEBERG_CATALOG_NAME") or "lakeline",
        iceberg_catalog_uri=env.get("LAKELINE_ICEBERG_CATALOG_URI") or None,
        spark_master=env.get("LAKELINE_SPARK_MASTER") or "local[2]",
        spark_jars_dir=env.get("LAKELINE_SPARK_JARS_DIR") or None,
        spark_conf=spark_conf,
    )


def _spark_conf(text: str) -> dict[str, str]:
    """LAKELINE_SPARK_CONF: a JSON object of Spark properties, e.g. {"spark.sql.shuffle.partitions": "8"}."""
    import json

    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"LAKELINE_SPARK_CONF is not valid JSON ({exc.msg} at position {exc.pos}); use an object "
                          'such as {"spark.sql.shuffle.partitions": "8"}.') from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and k.startswith("spark.") for k in data):
        raise ConfigError('LAKELINE_SPARK_CONF must be a JSON object of Spark properties whose keys start with '
                          '"spark.", e.g. {"spark.sql.shuffle.partitions": "8"}.')
    return {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in data.items()}
