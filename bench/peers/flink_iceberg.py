"""Peer (c): Apache Flink, PyFlink's Table API on a local mini-cluster, reading the topic of JSON order events into an
Iceberg table with the Flink Iceberg sink: one Iceberg commit per completed Flink checkpoint, so the checkpoint
interval is the commit cadence (`--checkpoint-interval-ms`, default 1000: set for latency).

    .lakeline/flink-venv/bin/python bench/peers/flink_iceberg.py --topic T --table bench.orders_flink \
        --env-file .lakeline/stack/stack.env

Runs in its own environment (`bash infra/flink.sh` installs PyFlink and the jars), so it imports nothing of
Lakeline's. The same embedded catalog as Lakeline (Iceberg's JdbcCatalog on the SQLite file pyiceberg's SqlCatalog
uses, schema V1, the same catalog name) and the same S3 (Iceberg's S3FileIO, path-style, at the stack's endpoint),
from the environment or `--env-file` (the environment wins). The table is created if missing, hidden-partitioned
by days(event_time) (Flink's DDL has identity partitions only, so through Iceberg's Java API in the gateway JVM).
Prints READY once the job runs; runs until SIGTERM or SIGINT, then cancels the job (exit 0); exit 3 if the job
fails. `--checkpoint-dir` keeps Flink's checkpoints and restores the newest at start (recovery); without it a
restart reads the topic again from the start.

Jars (`--jars-dir`, default .lakeline/jars/flink) go on the gateway JVM's system classpath (HADOOP_CLASSPATH), so
DriverManager sees the SQLite driver and Iceberg the Hadoop classes.
"""


from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLUMNS = [  # (name, Flink type in the table, Iceberg type)
    ("event_id", "STRING", "string"),
    ("event_time", "TIMESTAMP_LTZ(6)", "timestamptz"),
    ("customer_id", "STRING", "string"),
    ("order_id", "STRING", "string"),
    ("status", "STRING", "string"),
    ("amount", "DOUBLE", "double"),
    ("currency", "STRING", "string"),
    ("items", "INT", "int"),
    ("country", "STRING", "string"),
]
LOG4J = """rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FileAppender
appender.file.name = FileAppender
appender.file.type = FILE
appender.file.append = false
appender.file.fileName = ${sys:log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
logger.codecpool.name = org.apache.hadoop.io.compress.CodecPool
logger.codecpool.level = WARN
logger.kafka.name = org.apache.flink.kafka.shaded.org.apache.kafka
logger.kafka.level = WARN
"""
def load_env_file(path: str) -> None:
    for line in Path(path).read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            os.environ.setdefault(key.strip(), value.strip())


def jdbc_uri(uri: str) -> str:
    """pyiceberg's SQLAlchemy URI (sqlite:////abs/path.db) -> Iceberg JdbcCatalog's (jdbc:sqlite:/abs/path.db)."""
    if uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + uri[len("sqlite:///"):]
    if uri.startswith("jdbc:"):
        return uri
    sys.exit(f"LAKELINE_ICEBERG_CATALOG_URI={uri!r}: expected sqlite:////abs/path.db or a jdbc: URI")


def catalog_properties(warehouse: str) -> dict[str, str]:
    env = os.environ
    props = {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": jdbc_uri(env["LAKELINE_ICEBERG_CATALOG_URI"]),
        "jdbc.schema-version": "V1",  # pyiceberg's SqlCatalog schema; Java would create V0
        "warehouse": warehouse,
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",  # accepts s3a:// locations
        "client.region": env.get("AWS_REGION", "us-east-1"),
        "cache-enabled": "false",
    }
    if env.get("LAKELINE_S3_ENDPOINT"):
        props["s3.endpoint"] = env["LAKELINE_S3_ENDPOINT"]
        props["s3.path-style-access"] = "true"
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        props["s3.access-key-id"] = env["AWS_ACCESS_KEY_ID"]
        props["s3.secret-access-key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            props["s3.session-token"] = env["AWS_SESSION_TOKEN"]
    return props


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def with_clause(props: dict[str, str]) -> str:
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())


def ensure_table(jvm, catalog_name: str, props: dict[str, str], namespace: str, table: str) -> bool:
    """Create namespace and table (days(event_time)) through Iceberg's Java API if missing. True if created."""
    iceberg = jvm.org.apache.iceberg
    java_props = jvm.java.util.HashMap()
    for key, value in props.items():
        java_props.put(key, value)
    catalog = iceberg.CatalogUtil.buildIcebergCatalog(catalog_name, java_props,
                                                      jvm.org.apache.hadoop.conf.Configuration())
    try:
        # (Namespace.of / TableIdentifier.of are varargs, which py4j does not map from str: parse instead)
        identifier = iceberg.catalog.TableIdentifier.parse(f"{namespace}.{table}")
        ns = identifier.namespace()
        if not catalog.namespaceExists(ns):  # one peer at a time: nothing creates it meanwhile
            catalog.createNamespace(ns)
        if catalog.tableExists(identifier):
            return False
        types = iceberg.types.Types
        iceberg_type = {"string": types.StringType.get(), "timestamptz": types.TimestampType.withZone(),
                        "double": types.DoubleType.get(), "int": types.IntegerType.get()}
        fields = jvm.java.util.ArrayList()
        for field_id, (name, _, kind) in enumerate(COLUMNS, start=1):
            fields.add(types.NestedField.optional(field_id, name, iceberg_type[kind]))
        schema = iceberg.Schema(fields)
        spec = iceberg.PartitionSpec.builderFor(schema).day("event_time").build()
        catalog.createTable(identifier, schema, spec)
        return True
    finally:
        catalog.close()


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="namespace.table (or catalog.namespace.table) in the catalog")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=1000,
                        help="Flink checkpoint interval = Iceberg commit cadence (default 1000)")
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--group-id", help="Kafka consumer group (default flink-<table>); offsets are committed "
                                           "on checkpoints, for monitoring only: Flink restores from its state")
    parser.add_argument("--startup-mode", default="earliest-offset",
                        choices=["earliest-offset", "latest-offset", "group-offsets"])
    parser.add_argument("--ignore-parse-errors", action="store_true",
                        help="bad JSON -> null fields instead of failing the job (like plain Spark's from_json)")
    parser.add_argument("--restart-attempts", type=int, default=3,
                        help="task restarts (1 s apart) before the job fails; Flink's default with checkpointing "
                             "is to restart forever, so a poison record would loop")
    parser.add_argument("--checkpoint-dir", help="file:///... or s3://...: durable checkpoints (retained on "
                                                 "cancel); the newest one under it is restored at start")
    parser.add_argument("--warehouse", help="the catalog's warehouse (default LAKELINE_WAREHOUSE)")
    parser.add_argument("--jars-dir", default=os.environ.get("LAKELINE_FLINK_JARS_DIR",
                                                                str(REPO / ".lakeline" / "jars" / "flink")))
    parser.add_argument("--env-file", help="a stack.env to read the stack's endpoints from (env wins)")
    args = parser.parse_args(argv)

    if args.env_file:
        load_env_file(args.env_file)
    for name in ("LAKELINE_KAFKA_BOOTSTRAP_SERVERS", "LAKELINE_ICEBERG_CATALOG_URI"):
        if not os.environ.get(name):
            sys.exit(f"{name} is not set: start the stack (lakeline dev up) and pass --env-file or the env")
    args.warehouse = args.warehouse or os.environ.get("LAKELINE_WAREHOUSE")
    if not args.warehouse:
        sys.exit("LAKELINE_WAREHOUSE (or --warehouse) is not set")
    jars = sorted(Path(args.jars_dir).glob("*.jar"))
    if not any("iceberg-flink-runtime" in j.name for j in jars):
        sys.exit(f"no Flink/Iceberg jars in {args.jars_dir}: run `bash infra/flink.sh` first")
    catalog_name = os.environ.get("LAKELINE_ICEBERG_CATALOG_NAME", "lakeline")
    parts = args.table.split(".")
    if len(parts) == 3:
        parts = parts[1:]
    if len(parts) != 2:
        sys.exit(f"--table {args.table!r}: expected namespace.table")
    namespace, table = parts

    # The gateway JVM (which runs the mini-cluster) is launched by pyflink with HADOOP_CLASSPATH on its classpath.
    os.environ["HADOOP_CLASSPATH"] = os.path.join(os.path.abspath(args.jars_dir), "*")
    # The AWS SDK in iceberg-aws-bundle 1.11.0 (2.44) adds CRC checksums to every PUT by default; send them only when
    # an operation requires one, like the SDK 2.29 behind Lakeline's S3A (moto 5.2.5 accepted both in a trial).
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")
    # The JVM's log goes to a file (FLINK_LOG_DIR/flink-*-python-*.log); pyflink's default log4j-cli.properties
    # also sends org.apache.hadoop INFO (a line per Parquet file) to the console: use a file-only config.
    log_dir = Path(os.environ.setdefault("FLINK_LOG_DIR", str(REPO / ".lakeline" / "flink-logs")))
    log_dir.mkdir(parents=True, exist_ok=True)
    if "LOG4J_PROPERTIES" not in os.environ:
        log4j = log_dir / "log4j-flink-peer.properties"
        log4j.write_text(LOG4J)
        os.environ["LOG4J_PROPERTIES"] = str(log4j)

    from py4j.protocol import Py4JError
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment

    config = Configuration()
    config.set_string("parallelism.default", str(args.parallelism))
    config.set_string("execution.checkpointing.interval", f"{args.checkpoint_interval_ms} ms")
    config.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set_string("table.local-time-zone", "UTC")
    config.set_string("restart-strategy.type", "fixed-delay")
    config.set_string("restart-strategy.fixed-delay.attempts", str(args.restart_attempts))
    config.set_string("restart-strategy.fixed-delay.delay", "1 s")
    config.set_string("pipeline.name", f"flink-iceberg-{namespace}.{table}")
    if args.checkpoint_dir:
        config.set_string("execution.checkpointing.storage", "filesystem")
        config.set_string("execution.checkpointing.dir", args.checkpoint_dir)
        config.set_string("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION")
        local = args.checkpoint_dir.removeprefix("file://")
        if os.path.isdir(local):
            done = sorted(Path(local).glob("*/chk-*/_metadata"), key=lambda p: p.stat().st_mtime)
            if done:
                config.set_string("execution.state-recovery.path", str(done[-1].parent))
                print(f"restoring from {done[-1].parent}", flush=True)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build())

    props = catalog_properties(args.warehouse)
    created = ensure_table(get_gateway().jvm, catalog_name, props, namespace, table)
    print(f"table {catalog_name}.{namespace}.{table}: {'created' if created else 'exists'}", flush=True)
    t_env.execute_sql(f"CREATE CATALOG `{catalog_name}` WITH ({with_clause({'type': 'iceberg', **props})})")

    # event_time: bench.load and `lakeline produce` write ISO-8601 with a literal Z, which is what Flink's JSON
    # format parses as TIMESTAMP_LTZ (an offset such as +00:00 fails the job).
    source_columns = ", ".join(f"`{n}` {t}" for n, t, _ in COLUMNS)
    source = {
        "connector": "kafka",
        "topic": args.topic,
        "properties.bootstrap.servers": os.environ["LAKELINE_KAFKA_BOOTSTRAP_SERVERS"],
        "properties.group.id": args.group_id or f"flink-{namespace}-{table}",
        "scan.startup.mode": args.startup_mode,
        "format": "json",
        "json.timestamp-format.standard": "ISO-8601",
        "json.fail-on-missing-field": "false",
        "json.ignore-parse-errors": str(args.ignore_parse_errors).lower(),
    }
    for key, value in os.environ.items():  # Lakeline's LAKELINE_KAFKA_OPT_* pass-through (security settings)
        if key.startswith("LAKELINE_KAFKA_OPT_"):
            source["properties." + key[len("LAKELINE_KAFKA_OPT_"):].lower().replace("_", ".")] = value
    t_env.execute_sql(f"CREATE TEMPORARY TABLE kafka_orders ({source_columns}) WITH ({with_clause(source)})")
    select = ", ".join(f"`{n}`" for n, _, _ in COLUMNS)
    result = t_env.execute_sql(
        f"INSERT INTO `{catalog_name}`.`{namespace}`.`{table}` SELECT {select} FROM kafka_orders")
    job = result.get_job_client()
    submitted = time.monotonic()

    def status() -> str:
        return job.get_job_status().result().name  # a pyflink JobStatus enum

    while status() not in ("RUNNING", "FAILED", "CANCELED", "FINISHED"):
        time.sleep(0.1)
    if status() != "RUNNING":
        print(f"job {job.get_job_id()} is {status()}", file=sys.stderr, flush=True)
        return 2
    print(f"job {job.get_job_id()} running: submitted after {submitted - started:.1f} s, running after "
          f"{time.monotonic() - started:.1f} s", flush=True)
    print("READY", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        try:
            now = status()
        except Py4JError:  # the per-job mini-cluster shuts down as soon as the job has ended
            now = "ENDED"
        if now in ("FAILED", "CANCELED", "FINISHED", "ENDED"):
            print(f"job {job.get_job_id()} is {now}: see the JVM log in {log_dir} (the root cause is the first "
                  f"'Caused by' after the job's failure)", file=sys.stderr, flush=True)
            return 3
    try:
        job.cancel().result()
    except Py4JError:  # a SIGTERM to the process group has already stopped the JVM: nothing left to cancel
        print("the Flink JVM had already stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
