"""Endpoints and secrets: from the environment, or an env file — never from pipeline YAML.

Precedence: real environment variables, then the env file named by LAKELINE_ENV_FILE, then the local stack's
<state>/stack/stack.env written by `lakeline dev up`. With no S3 endpoint set, S3A and boto3 talk to real AWS.
Secrets are `SecretStr`: their repr, `describe()` and logs show `**********`; only the adapters that hand them to a
client call `get_secret_value()`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ingest.errors import ConfigError

ENV_PREFIX = "LAKELINE_"
KAFKA_OPTION_PREFIX = "LAKELINE_KAFKA_OPT_"
# Kafka client properties that hold secrets: refused in YAML, masked whenever settings are shown.
_SECRET_OPTION = re.compile(r"(password|jaas|secret|token|\.key$|keystore|truststore\.certificates)")
MASK = "**********"


class Settings(BaseSettings):
    """Where things are, for one process: LAKELINE_<FIELD> (and the AWS_* names) from the environment and the env
    file. Built by `load_settings()`."""

    model_config = SettingsConfigDict(frozen=True, env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True,
                                      validate_by_name=True)

    kafka_bootstrap_servers: str | None = None
    # Extra Kafka client properties (security.protocol, sasl.*, ssl.*), from LAKELINE_KAFKA_OPT_<NAME>, e.g.
    # LAKELINE_KAFKA_OPT_SASL_MECHANISM; every value is kept secret until it is handed to the client.
    kafka_options: Annotated[dict[str, SecretStr], NoDecode] = {}
    # Kafka security, typed (`lakeline dev up --kafka-security` writes these). Each client gets them in its own
    # property names (ingest.adapters.kafka_admin): the JVM's (Spark's source) and librdkafka's (the Python side).
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = None
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    # The PEM CA certificate(s) the broker's certificate is checked against; for mTLS, a PKCS#12 file with this
    # client's certificate and key. The files must exist at these paths wherever a driver or an executor runs.
    kafka_ssl_ca_location: str | None = None
    kafka_ssl_keystore_location: str | None = None
    kafka_ssl_keystore_password: SecretStr | None = None
    s3_endpoint: str | None = None
    s3_path_style: bool = True
    kinesis_endpoint: str | None = None
    aws_region: str = Field("us-east-1", validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION",
                                                                       "aws_region"))
    aws_access_key_id: str | None = Field(None, validation_alias=AliasChoices("AWS_ACCESS_KEY_ID",
                                                                              "aws_access_key_id"))
    aws_secret_access_key: SecretStr | None = Field(None, validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY",
                                                                                       "aws_secret_access_key"))
    aws_session_token: SecretStr | None = Field(None, validation_alias=AliasChoices("AWS_SESSION_TOKEN",
                                                                                   "aws_session_token"))
    warehouse: str | None = None
    iceberg_catalog_name: str = "lakeline"
    iceberg_catalog_uri: str | None = None
    # A REST catalog's authentication (Polaris, Unity, a gateway): an OAuth2 client credential `id:secret`, or a
    # bearer token. Both secrets; only the Spark and pyiceberg catalog clients see them.
    iceberg_catalog_credential: SecretStr | None = None
    iceberg_catalog_token: SecretStr | None = None
    spark_master: str = "local[2]"
    spark_jars_dir: str | None = None
    # The jars folder exists at the same path on every Spark worker (the local stack's cluster, a container image):
    # executors put it on their classpath instead of each fetching about 700 MB of jars from the driver.
    spark_jars_on_workers: bool = False
    # The Python packages a driver on a cluster master ships to its executors (infra.executor_env): "" the one
    # `bash infra/setup.sh` packed, a path to another archive, or "off" (executors then need them installed).
    executor_env: str = ""
    # Extra Spark properties, applied over Lakeline's defaults (LAKELINE_SPARK_CONF, a JSON object).
    spark_conf: Annotated[dict[str, str], NoDecode] = {}
    python: str = sys.executable
    # The pipeline lease on S3 (ingest.lease): a driver that has not renewed it for this long has lost it, and a
    # standby on another host takes over.
    lease_seconds: float = 15.0
    # Where maintenance commands report their figures (ingest.metrics.push_maintenance): a Pushgateway URL, or
    # a folder for node_exporter's textfile collector. Neither: no push.
    pushgateway_url: str | None = None
    metrics_textfile_dir: str | None = None
    # `lakeline --log-format json` sets it for the command and the processes it starts (Spark's driver JVM too).
    log_format: Literal["text", "json"] = "text"

    @field_validator("warehouse")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") or None if value else None

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_conf_json(cls, value: Any) -> Any:
        return _spark_conf(value) if isinstance(value, str) else value

    def require(self, field: str, env_var: str, purpose: str) -> str:
        value = getattr(self, field)
        if not value:
            raise ConfigError(f"{env_var} is not set; it is needed to {purpose}. Set it in the environment or an "
                              f"env file (LAKELINE_ENV_FILE), or run `lakeline dev up` for the local stack.")
        return value

    def rest_catalog_auth(self) -> dict[str, str]:
        """The REST catalog's authentication properties that are set (`credential`, `token`), revealed for a
        catalog client (the same property names in Spark's Iceberg catalog and pyiceberg)."""
        return {name: secret.get_secret_value() for name, secret in
                (("credential", self.iceberg_catalog_credential), ("token", self.iceberg_catalog_token)) if secret}

    def aws_credentials(self) -> dict[str, str]:
        """The static AWS credentials that are set (access_key_id, secret_access_key, session_token), revealed
        for a client; empty means the SDK's default chain."""
        out = {}
        for key, value in (("access_key_id", self.aws_access_key_id),
                           ("secret_access_key", self.aws_secret_access_key),
                           ("session_token", self.aws_session_token)):
            if value:
                out[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return out

    def kafka_client_properties(self) -> dict[str, str]:
        """The extra Kafka client properties, revealed for the client."""
        return {name: value.get_secret_value() for name, value in self.kafka_options.items()}

    def describe(self) -> dict[str, Any]:
        """A printable view with secrets masked."""
        out = {k: v for k, v in self.model_dump(mode="json").items() if v not in (None, {}, "")}
        for key in ("pushgateway_url", "iceberg_catalog_uri"):  # a URL may carry user:password@
            if key in out:
                out[key] = mask_url(out[key])
        out["kafka_options"] = {name: MASK if is_secret_option(name) else value
                                for name, value in self.kafka_client_properties().items()}
        return out


def mask_url(url: str) -> str:
    """`url` with the password of a `user:password@` part masked, for printing."""
    return re.sub(r"(//[^/:@]+):[^/@]*@", rf"\1:{MASK}@", url)


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


def env_file() -> Path | None:
    """The env file in force: LAKELINE_ENV_FILE, else the local stack's, else none."""
    named = os.environ.get("LAKELINE_ENV_FILE")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"LAKELINE_ENV_FILE={named}: no such file.")
        return path
    from infra.paths import state_dir  # infra is a sibling package with no Spark/IO at import

    candidate = state_dir() / "stack" / "stack.env"
    return candidate if candidate.is_file() else None


def load_settings() -> Settings:
    """Settings from the process environment over the env file; a bad value is a ConfigError naming the variable."""
    path = env_file()
    file_values = parse_env_file(path) if path else {}  # strict: a malformed line is named, not skipped
    merged = {**file_values, **os.environ}
    kafka_options = {key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", "."): value
                     for key, value in merged.items() if key.startswith(KAFKA_OPTION_PREFIX) and value}
    try:
        return Settings(_env_file=path, kafka_options=kafka_options)
    except ValidationError as exc:
        raise ConfigError("; ".join(_explain(error) for error in exc.errors())) from None


def _variable(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"{ENV_PREFIX}{field.upper()}"


def _explain(error: dict) -> str:
    field = str(error["loc"][0]) if error.get("loc") else ""
    if field not in Settings.model_fields:
        return error["msg"]
    variable = _variable(field)
    annotation = str(Settings.model_fields[field].annotation)
    shown = "" if "SecretStr" in annotation else f"={error.get('input')!r}"
    return f"{variable}{shown}: {error['msg']}"


def _spark_conf(text: str) -> dict[str, str]:
    """LAKELINE_SPARK_CONF: a JSON object of Spark properties, e.g. {"spark.sql.shuffle.partitions": "8"}."""
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
