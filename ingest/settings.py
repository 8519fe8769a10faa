"""Endpoints and secrets: from the environment, or an env file — never from pipeline YAML.

Precedence: real environment variables, then the env file named by LAKELINE_ENV_FILE, then the local stack's
<state>/stack/stack.env written by `lakeline dev up`. With no S3 endpoint set, S3A and boto3 talk to real AWS.
Secrets are `SecretStr`: their repr, `describe()` and logs show `**********`; only the adapters that hand them to a
client call `get_secret_value()`.

This module is the only one that reads LAKELINE_* variables (tests/unit/test_settings_surface.py checks it): a
child process gets its environment from `child_env()`, and docs/configuration.md's table is rendered from the
fields' descriptions (`python -m ingest.settings_table`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from collections.abc import Mapping
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
    file. Built by `load_settings()`; every field's description is its row in docs/configuration.md."""

    model_config = SettingsConfigDict(frozen=True, env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True,
                                      validate_by_name=True)

    # -- where the settings come from, and where the local state and conf files are
    env_file: str | None = Field(None, description=(
        "An env file of KEY=VALUE lines read under the real environment; default: the local stack's "
        "`<state>/stack/stack.env` written by `lakeline dev up`."))
    state_dir: str | None = Field(None, description=(
        "The folder for ignored runtime state (the local stack, its stack.env); default: the repo's .lakeline/. "
        "Read by infra.paths."))
    conf_dir: str | None = Field(None, description=(
        "Where the Airflow DAG files and the SQL endpoint find pipelines/ (and the DAGs tables/); default: the "
        "repo's conf/."))
    # -- Kafka
    kafka_bootstrap_servers: str | None = Field(None, description="The Kafka brokers, host:port[,host:port].")
    kafka_options: Annotated[dict[str, SecretStr], NoDecode] = Field({}, description=(
        "Extra Kafka client properties (security.protocol, sasl.*, ssl.*), one variable each: "
        "`LAKELINE_KAFKA_OPT_SASL_MECHANISM` is sasl.mechanism. Every value is kept secret until handed to the "
        "client."))
    # Each client gets the typed security fields in its own property names (ingest.adapters.kafka_admin): the
    # JVM's (Spark's source) and librdkafka's (the Python side).
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = Field(
        None, description="Kafka security protocol (`lakeline dev up --kafka-security` writes the Kafka fields).")
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism.")
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password.")
    kafka_ssl_ca_location: str | None = Field(None, description=(
        "The PEM CA certificate(s) the broker's certificate is checked against; the file must exist at this path "
        "wherever a driver or an executor runs."))
    kafka_ssl_keystore_location: str | None = Field(None, description=(
        "For mTLS: a PKCS#12 file with this client's certificate and key (same path on every host)."))
    kafka_ssl_keystore_password: SecretStr | None = Field(None, description="The keystore's password.")
    # -- S3, Kinesis, AWS
    s3_endpoint: str | None = Field(None, description="An S3-compatible endpoint; unset: real AWS S3.")
    s3_path_style: bool = Field(True, description="Path-style S3 requests (bucket in the path, not the host).")
    kinesis_endpoint: str | None = Field(None, description="A Kinesis-compatible endpoint; unset: real AWS.")
    aws_region: str = Field("us-east-1", validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION",
                                                                       "aws_region"),
                            description="AWS region (AWS_DEFAULT_REGION is read too).")
    aws_access_key_id: str | None = Field(None, validation_alias=AliasChoices("AWS_ACCESS_KEY_ID",
                                                                              "aws_access_key_id"),
                                          description="Static AWS credentials; unset: the SDK's default chain.")
    aws_secret_access_key: SecretStr | None = Field(None, validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY",
                                                                                       "aws_secret_access_key"),
                                                    description="The static credentials' secret key.")
    aws_session_token: SecretStr | None = Field(None, validation_alias=AliasChoices("AWS_SESSION_TOKEN",
                                                                                   "aws_session_token"),
                                                description="A session token for temporary credentials.")
    # -- tables and catalogs
    warehouse: str | None = Field(None, description=(
        "The warehouse root (s3a://bucket/warehouse): tables, checkpoints and backups live under it."))
    iceberg_catalog_name: str = Field("lakeline", description="The Iceberg catalog's name in Spark SQL.")
    iceberg_catalog_uri: str | None = Field(None, description="The Iceberg catalog: a JDBC URI or a REST URL.")
    iceberg_catalog_credential: SecretStr | None = Field(None, description=(
        "A REST catalog's OAuth2 client credential `id:secret` (Polaris, Unity, a gateway)."))
    iceberg_catalog_token: SecretStr | None = Field(None, description="A REST catalog's bearer token.")
    # -- Spark
    spark_master: str = Field("local[2]", description="The Spark master: local[N], spark://host:port, yarn, ...")
    spark_driver_memory: str = Field("2g", description="The Spark driver's memory (spark.driver.memory).")
    spark_log_level: str = Field("WARN", description="The SparkContext's log level.")
    library_logs: Literal["quiet", "all"] = Field("quiet", description=(
        "quiet: the JVM's and SLF4J's start-up notices, S3A stream statistics and the stack traces of commit "
        "conflicts that were retried stay out of the output; all: everything the libraries print (debugging)."))
    spark_jars_dir: str | None = Field(None, description=(
        "The folder of connector jars; default: the ones `bash infra/setup.sh` resolved."))
    # Saves every executor fetching about 700 MB of jars from the driver.
    spark_jars_on_workers: bool = Field(False, description=(
        "The jars folder exists at the same path on every Spark worker (the local cluster, an image): executors "
        "put it on their classpath."))
    executor_env: str = Field("", description=(
        "The Python packages a driver on a cluster master ships to its executors: empty for the archive "
        "`bash infra/setup.sh` packed, a path to another archive, or off (executors then need them installed)."))
    spark_conf: Annotated[dict[str, str], NoDecode] = Field({}, description=(
        'Extra Spark properties over Lakeline\'s defaults, a JSON object: {"spark.sql.shuffle.partitions": "8"}.'))
    python: str = Field(default_factory=lambda: sys.executable, description=(
        "The Python interpreter of Spark's Python workers; default: the one running Lakeline."),
        json_schema_extra={"shown_default": "the running Python"})
    class_archive: str = Field("", description=(
        "The JVM class-data archive local drivers start from (`lakeline dev class-archive`): empty for the one "
        "made for these jars, a path to another, or off."))
    class_archive_dump: str | None = Field(None, description=(
        "Set by `lakeline dev class-archive` only: the driver writes the classes it loaded to this path."))
    maintenance_nice: int = Field(10, ge=0, le=19, description=(
        "The OS niceness maintenance commands (compact, retain, health) and their Spark driver run at, so a "
        "stream on the same host gets the CPU first; 0 leaves it alone."))
    bound_nice: int = Field(5, ge=0, le=19, description=(
        "The OS niceness of the files-bound command (`lakeline compact --bound-only`, the lakeline_bound DAG), when "
        "below maintenance_nice: ahead of a Spark compaction running beside it, which it must keep up with (the "
        "stream adds a file per partition per batch), and still behind the stream."))
    maintenance_cores: int = Field(1, ge=1, description=(
        "The cores a maintenance command's Spark uses: local[N] when the master is local, spark.cores.max on a "
        "cluster when set explicitly."))
    dag_compact_every: int = Field(60, ge=1, description=(
        "Minutes between runs of the compaction DAGs (each run's data interval is that period, ending at the run): "
        "a divisor of 60, or a whole number of hours dividing 24. Lower it to compress the schedule (a soak or a "
        "benchmark)."))
    dag_backup_every: int = Field(15, ge=1, description="Minutes between runs of the checkpoint backup DAGs.")
    dag_bound_every: int = Field(5, ge=1, description=(
        "Minutes between runs of the files-bound DAGs: the partitions over the table policy's "
        "max_files_per_partition rewritten without Spark (Delta through delta-rs, Iceberg through pyiceberg)."))
    task_launcher: Literal["local", "spark-submit"] = Field("local", description=(
        "How Airflow tasks start `lakeline`: local (python -m lakeline beside the worker) or spark-submit "
        "(against LAKELINE_SPARK_MASTER, client mode)."))
    spark_submit: str = Field("spark-submit", description="The spark-submit executable, for the spark-submit "
                                                          "launcher.")
    # -- driving a pipeline
    lease_seconds: float = Field(15.0, description=(
        "The pipeline lease on S3: a driver that has not renewed it for this long has lost it, and a standby on "
        "another host takes over."))
    host_id: str | None = Field(None, description=(
        "This host's name in leases; default: the hostname. Two state folders with different ids are two hosts."))
    lock_dir: str | None = Field(None, description=(
        "The folder of per-pipeline host locks; default: `<temp dir>/lakeline-locks`."))
    crash_at: str | None = Field(None, description=(
        "For tests and recovery drills only, never in production: `<point>@<batch id>` makes the driver SIGKILL "
        "itself there (points: before-schema-evolve, after-schema-evolve, after-dlq-commit, after-table-commit, "
        "after-route-commit: the first routed table's commit of a routed pipeline)."))
    # -- the SQL endpoint (`lakeline sql-endpoint`, `lakeline dev up --sql-endpoint`)
    sql_endpoint_host: str = Field("127.0.0.1", description=(
        "The address the SQL endpoint's two servers listen on; another than loopback needs authentication on both "
        "(docs/sql-endpoint.md)."))
    sql_endpoint_port: int = Field(10000, description="The SQL endpoint's HiveServer2 (JDBC/ODBC) port.")
    sql_endpoint_connect_port: int = Field(15002, description="The SQL endpoint's Spark Connect port.")
    sql_endpoint_token: SecretStr | None = Field(None, description=(
        "The pre-shared token Spark Connect clients must send (spark.connect.authenticate.token)."))
    sql_endpoint_refresh_seconds: float = Field(30.0, description=(
        "How often the SQL endpoint registers the tables that did not exist when it started."))
    # -- observability
    pushgateway_url: str | None = Field(None, description="A Pushgateway URL maintenance commands push figures to.")
    metrics_textfile_dir: str | None = Field(None, description=(
        "A folder for node_exporter's textfile collector, instead of a Pushgateway."))
    log_format: Literal["text", "json"] = Field("text", description=(
        "Log lines as text or one JSON object each (`lakeline --log-format` sets it for the command and what it "
        "starts, Spark's driver JVM too)."))
    # -- set-up (infra/setup.sh); read by infra, which imports no Lakeline code
    kafka_jars_dir: str | None = Field(None, description="Set-up: the local broker's jars folder. Read by infra.paths.")
    jvm_dir: str | None = Field(None, description="Set-up: the folder of JVM class archives. Read by infra.paths.")
    executor_env_dir: str | None = Field(None, description=(
        "Set-up: the folder of the packed executor packages. Read by infra.paths."))
    maven_settings: str | None = Field(None, description=(
        "Set-up: the Maven settings.xml jar resolution uses. Read by infra.resolve_jars."))

    @field_validator("warehouse")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") or None if value else None

    @field_validator("dag_compact_every")
    @classmethod
    def _cron_period(cls, value: int) -> int:
        compact_cron(value)
        return value

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


# Fields the command line fixed for this process and the processes it starts (`lakeline --log-format`).
_SET_FOR_THIS_PROCESS: dict[str, Any] = {}


def set_for_this_process(**fields: Any) -> None:
    """Fix settings fields over the environment for the rest of this process, and for the children started with
    `child_env()`."""
    _check_fields(fields)
    _SET_FOR_THIS_PROCESS.update(fields)


def log_format_from_environment() -> str | None:
    """LAKELINE_LOG_FORMAT as this process was started with it, unchecked: the command line reads it before it
    loads (and checks) the other settings, so that its own errors are logged as asked."""
    return os.environ.get("LAKELINE_LOG_FORMAT")


def child_env(**overrides: Any) -> dict[str, str]:
    """The environment for a child process (a `lakeline` command, spark-submit): this process's, with the fields
    set for this process and `overrides` (field names; None removes the variable) as LAKELINE_* variables."""
    _check_fields(overrides)
    env = dict(os.environ)
    for field, value in {**_SET_FOR_THIS_PROCESS, **overrides}.items():
        if value is None:
            env.pop(variable_name(field), None)
        else:
            env[variable_name(field)] = _rendered(value)
    return env


def load_settings() -> Settings:
    """Settings from the process environment over the env file; a bad value is a ConfigError naming the variable."""
    path = env_file()
    file_values = parse_env_file(path) if path else {}  # strict: a malformed line is named, not skipped
    merged = {**file_values, **os.environ}
    kafka_options = {key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", "."): value
                     for key, value in merged.items() if key.startswith(KAFKA_OPTION_PREFIX) and value}
    try:
        return Settings(_env_file=path, kafka_options=kafka_options, **_SET_FOR_THIS_PROCESS)
    except ValidationError as exc:
        raise ConfigError("; ".join(_explain(error) for error in exc.errors())) from None


def settings_from(environ: Mapping[str, str]) -> Settings:
    """Settings from exactly `environ` (no env file, nothing of this process's environment): what a process started
    with that environment would see, e.g. the launcher an Airflow task is configured with."""
    values: dict[str, Any] = {}
    kafka_options = {}
    for key, value in environ.items():
        if not value:
            continue
        if key.startswith(KAFKA_OPTION_PREFIX):
            kafka_options[key[len(KAFKA_OPTION_PREFIX):].lower().replace("_", ".")] = value
        elif key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX):].lower() in Settings.model_fields:
            values[key[len(ENV_PREFIX):].lower()] = value
    for field, info in Settings.model_fields.items():
        if isinstance(info.validation_alias, AliasChoices):
            named = [environ[str(name)] for name in info.validation_alias.choices if environ.get(str(name))]
            if named:
                values[field] = named[0]
    try:
        return _GivenValuesOnly(**values, kafka_options=kafka_options)
    except ValidationError as exc:
        raise ConfigError("; ".join(_explain(error) for error in exc.errors())) from None


class _GivenValuesOnly(Settings):
    """Settings validated from the values given, without reading any environment or env file."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **other_sources):
        return (init_settings,)


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(Settings.model_fields))
    if unknown:
        raise TypeError(f"not Settings fields: {', '.join(unknown)}")


def _rendered(value: Any) -> str:
    """A field's value as its environment variable holds it."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def variable_name(field: str) -> str:
    """The environment variable a Settings field is read from (LAKELINE_<FIELD>, or its AWS_* name)."""
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"{ENV_PREFIX}{field.upper()}"


def _explain(error: dict) -> str:
    field = str(error["loc"][0]) if error.get("loc") else ""
    if field not in Settings.model_fields:
        return error["msg"]
    variable = variable_name(field)
    annotation = str(Settings.model_fields[field].annotation)
    shown = "" if "SecretStr" in annotation else f"={error.get('input')!r}"
    return f"{variable}{shown}: {error['msg']}"


def compact_cron(minutes: int) -> str:
    """The cron of a compaction run every `minutes`, aligned to the hour or the day (60 -> "0 * * * *")."""
    if minutes < 60 and 60 % minutes == 0:
        return f"*/{minutes} * * * *"
    if minutes % 60 == 0 and 1440 % minutes == 0:
        return {60: "0 * * * *", 1440: "0 0 * * *"}.get(minutes, f"0 */{minutes // 60} * * *")
    raise ValueError(f"{minutes} minutes is not a divisor of 60 nor a whole number of hours dividing 24 "
                     "(e.g. 1, 5, 15, 60, 360)")


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
