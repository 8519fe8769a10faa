"""The SQL endpoint for BI tools: one Spark application serving Spark's Thrift server (the HiveServer2 protocol:
JDBC/ODBC, beeline, DBeaver, Superset, Tableau) and Spark Connect, over both formats' catalogs (the session
`ingest.spark` builds), with the pipelines' tables by their analyst names (`ingest.config.analyst_names`).

Each name is a view in the session catalog (in memory, shared by every client session): `SELECT * FROM` the Delta
table's path or the Iceberg table's identifier, re-resolved at each query (so a query sees the table's newest
commit and schema). A table that does not exist yet (before its pipeline's first run) is registered by the
refresh loop once it does. Docs: docs/sql-endpoint.md.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.config import analyst_names
from ingest.errors import ConfigError
from ingest.formats import format_for
from ingest.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.config import PipelineConfig

log = logging.getLogger(__name__)

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
BEELINE = "org.apache.hive.beeline.BeeLine"
APP_NAME = "lakeline-sql-endpoint"
# HiveServer2's authentication modes that check nobody: fine on loopback, refused on any other address.
OPEN_AUTHENTICATION = ("NONE", "NOSASL")
_AUTH_KEY = "spark.hadoop.hive.server2.authentication"


@dataclass(frozen=True)
class Registration:
    """One analyst name and the statement that registers it."""
    name: str
    pipeline: str
    source: str  # how Spark SQL names the table: delta.`path` or the Iceberg identifier
    sql: str


@dataclass
class Registered:
    """Where the registration stands: the names clients can query, and the ones whose table does not exist yet."""
    names: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # name -> why (the first line of Spark's error)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def registrations(configs: "list[PipelineConfig]", settings: Settings) -> list[Registration]:
    """The views that name these pipelines' tables (main and dead letters), in name order. WITH SCHEMA EVOLUTION:
    a column the table gains later shows in the view too."""
    found = []
    from ingest.formats import routed_names

    routes = {c.pipeline: routed_names(c, settings) for c in configs if c.sink.route is not None}
    for name, (config, table) in sorted(analyst_names(configs, routes).items()):
        fmt = format_for(config.sink.format)
        source = fmt.spark_sql_name(fmt.ref(config, settings, table))
        found.append(Registration(name, config.pipeline, source,
                                  f"CREATE VIEW IF NOT EXISTS {_quoted(name)} WITH SCHEMA EVOLUTION AS "
                                  f"SELECT * FROM {source}"))
    return found


def is_loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


def check_exposure(settings: Settings) -> None:
    """Refuse to serve an address other hosts reach without authentication on both protocols: HiveServer2's
    `hive.server2.authentication` (LDAP, KERBEROS, CUSTOM; through LAKELINE_SPARK_CONF) and Spark Connect's
    pre-shared token (LAKELINE_SQL_ENDPOINT_TOKEN)."""
    if is_loopback(settings.sql_endpoint_host):
        return
    missing = []
    if settings.spark_conf.get(_AUTH_KEY, "NONE").upper() in OPEN_AUTHENTICATION:
        missing.append(f"LAKELINE_SPARK_CONF {_AUTH_KEY}=LDAP|KERBEROS|CUSTOM (HiveServer2)")
    if settings.sql_endpoint_token is None:
        missing.append("LAKELINE_SQL_ENDPOINT_TOKEN (Spark Connect)")
    if missing:
        raise ConfigError(f"LAKELINE_SQL_ENDPOINT_HOST={settings.sql_endpoint_host} would serve the tables to other "
                          f"hosts without authentication: set {' and '.join(missing)}, or serve 127.0.0.1 only "
                          f"(docs/sql-endpoint.md#authentication)")


def endpoint_conf(settings: Settings) -> dict[str, str]:
    """The Spark settings that make a Lakeline session the endpoint (over `ingest.spark.spark_conf`'s): the Connect
    plugin beside the operator's plugins, both servers' address and ports, HiveServer2's binary transport and (unless
    the operator chose one) no authentication, which `check_exposure` allows on loopback only."""
    plugins = [p for p in settings.spark_conf.get("spark.plugins", "").split(",") if p]
    conf = {
        "spark.plugins": ",".join(dict.fromkeys([*plugins, CONNECT_PLUGIN])),
        "spark.connect.grpc.binding.address": settings.sql_endpoint_host,
        "spark.connect.grpc.binding.port": str(settings.sql_endpoint_connect_port),
        "spark.hadoop.hive.server2.thrift.bind.host": settings.sql_endpoint_host,
        "spark.hadoop.hive.server2.thrift.port": str(settings.sql_endpoint_port),
        "spark.hadoop.hive.server2.transport.mode": "binary",
        _AUTH_KEY: settings.spark_conf.get(_AUTH_KEY, "NONE"),
        # Each JDBC connection gets its own session (its own SET and temporary views); the views are shared.
        "spark.sql.hive.thriftServer.singleSession": "false",
    }
    if settings.sql_endpoint_token is not None:
        conf["spark.connect.authenticate.token"] = settings.sql_endpoint_token.get_secret_value()
    return conf


def server_conf(settings: Settings) -> dict[str, str]:
    """The endpoint application's whole Spark configuration (testable without a JVM)."""
    from ingest.spark import spark_conf

    return spark_conf(settings, APP_NAME, extra=endpoint_conf(settings))


def register(spark: "SparkSession", wanted: list[Registration], done: Registered) -> Registered:
    """Create the views not created yet; a table that does not exist yet stays waiting (with Spark's reason)."""
    from pyspark.errors import AnalysisException

    for item in wanted:
        if item.name in done.names:
            continue
        try:
            spark.sql(item.sql)
        except AnalysisException as exc:  # the table is not there yet (or not readable): try again later
            reason = str(exc).strip().splitlines()[0][:300]
            if done.waiting.get(item.name) != reason:
                log.info(f"sql endpoint: {item.name} ({item.source}) is not there yet: {reason}")
            done.waiting[item.name] = reason
            continue
        done.waiting.pop(item.name, None)
        done.names.append(item.name)
        log.info(f"sql endpoint: {item.name} -> {item.source}")
    return done


@dataclass(frozen=True)
class Ready:
    """What `serve` reports once both servers answer."""
    jdbc_url: str
    connect_url: str
    names: list[str]
    waiting: dict[str, str]
    seconds_to_ready: float
    driver_pid: int

    def to_json(self) -> dict:
        return {"jdbc_url": self.jdbc_url, "connect_url": self.connect_url, "tables": self.names,
                "waiting": self.waiting, "seconds_to_ready": round(self.seconds_to_ready, 1),
                "driver_pid": self.driver_pid}


def client_host(settings: Settings) -> str:
    """The address a client on this host uses (a wildcard bind is reached on loopback)."""
    host = settings.sql_endpoint_host
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def jdbc_url(settings: Settings) -> str:
    return f"jdbc:hive2://{client_host(settings)}:{settings.sql_endpoint_port}/default"


def connect_url(settings: Settings) -> str:
    return f"sc://{client_host(settings)}:{settings.sql_endpoint_connect_port}"


def serve(configs: "list[PipelineConfig]", settings: Settings, stop: threading.Event,
          on_ready: Callable[[Ready], None]) -> None:
    """Run the endpoint until `stop` is set: start the session (Spark Connect starts with it), register the
    tables, start the Thrift server, then register tables that appear every `sql_endpoint_refresh_seconds`."""
    check_exposure(settings)
    wanted = registrations(configs, settings)
    started = time.monotonic()
    from ingest.spark import build_spark, pass_jvm_sigterm_to_driver

    spark = build_spark(settings, APP_NAME, extra=endpoint_conf(settings))
    pass_jvm_sigterm_to_driver(spark)  # a SIGTERM to the process group stops the servers, then the JVM
    server = None
    try:
        done = register(spark, wanted, Registered())
        jvm = spark.sparkContext._jvm  # noqa: SLF001 - py4j
        thrift = getattr(jvm, THRIFT_SERVER)
        # exitOnError false: a server that cannot start raises here instead of exiting the JVM under Python.
        server = thrift.startWithSparkSession(spark._jsparkSession, False)  # noqa: SLF001 - py4j
        pid = int(jvm.java.lang.ProcessHandle.current().pid())
        on_ready(Ready(jdbc_url(settings), connect_url(settings), sorted(done.names), dict(done.waiting),
                       time.monotonic() - started, pid))
        while not stop.wait(settings.sql_endpoint_refresh_seconds):
            if not done.waiting:
                continue
            try:
                register(spark, wanted, done)
            except Exception as exc:  # noqa: BLE001 - S3 or the catalog failing now: the next refresh tries again
                log.warning(f"sql endpoint: looking for new tables failed, trying again later: {exc}")
    finally:
        if server is not None:
            server.stop()
        spark.stop()


# ---- clients: beeline (HiveServer2 JDBC, shipped in pyspark's jars) and Spark Connect, for tests and the bench ----

MARKER = "lakeline_statement_end"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else (shutil.which("java") or "java")


def beeline_command(settings: Settings, sql: str, user: str = "lakeline") -> list[str]:
    """Beeline (Hive's JDBC command-line client, from pyspark's jars) running `sql` against the endpoint, results as
    CSV with a header, NULL as an empty field."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return [_java(), "-cp", f"{jars}/*", BEELINE, "-u", jdbc_url(settings), "-n", user, "--outputformat=csv2",
            "--showHeader=true", "--nullemptystring=true", "--silent=true", "-e", sql]


def beeline(settings: Settings, statements: list[str], timeout: float = 300) -> list[list[tuple[str, ...]]]:
    """Run `statements` in one beeline process; each one's rows (header excluded) as tuples of strings."""
    sql = "".join(f"{s.rstrip().rstrip(';')};\nSELECT '{MARKER}' AS {MARKER};\n" for s in statements)
    done = subprocess.run(beeline_command(settings, sql), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"beeline exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    results, current = [], []
    rows = list(csv.reader(line for line in done.stdout.splitlines() if line.strip()))
    at = 0
    while at < len(rows):
        if rows[at] == [MARKER] and rows[at + 1:at + 2] == [[MARKER]]:  # the marker's header and its one row
            results.append(current[1:])  # without the statement's own header
            current, at = [], at + 2
            continue
        current.append(tuple(rows[at]))
        at += 1
    if len(results) != len(statements):
        raise RuntimeError(f"beeline answered {len(results)} of {len(statements)} statements: "
                           f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return results


def connect_session(settings: Settings):
    """A new Spark Connect client session on the endpoint, with the endpoint's token when one is set. The Connect
    class itself: `pyspark.sql.SparkSession.builder.remote` refuses to run beside a classic session in the same
    process, and switches that process's later sessions to Connect."""
    from pyspark.sql.connect.session import SparkSession  # the Connect client, loaded only when asked for

    url = connect_url(settings)
    if settings.sql_endpoint_token is not None:
        # The client sends a token over TLS only, or over local credentials to the host named `localhost`.
        if is_loopback(client_host(settings)):
            url = f"sc://localhost:{settings.sql_endpoint_connect_port}"
        url += f"/;token={settings.sql_endpoint_token.get_secret_value()}"
    return SparkSession.builder.remote(url).create()


@dataclass(frozen=True)
class Timed:
    """One query through the endpoint: its wall time, and the rows."""
    client: str
    seconds: float  # beeline: the whole client process (JVM start included); connect: the query on a warm session
    query_seconds: float | None  # beeline: the time beeline reports for the statement; connect: = seconds
    rows: list[tuple]


_BEELINE_TIME = re.compile(r"rows? selected \(([0-9.]+) seconds\)")


def time_query(settings: Settings, sql: str, client: str) -> Timed:
    """Time `sql` through the endpoint with `client` "beeline" (a cold client process, as a BI extract job runs) or
    "connect" (a Spark Connect session made first, then the query timed alone, as a notebook runs it). The endpoint
    must be running: `infra.stack.up(sql_endpoint=True)` starts it on the local stack, and its returned record has
    the ports for `settings` (sql_endpoint_port, sql_endpoint_connect_port)."""
    if client == "beeline":
        command = [arg for arg in beeline_command(settings, sql) if arg != "--silent=true"]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"beeline exited {done.returncode}: {done.stderr[-2000:]}")
        reported = _BEELINE_TIME.search(done.stderr + done.stdout)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        rows = [tuple(r) for r in csv.reader(lines[1:])]
        return Timed(client, seconds, float(reported.group(1)) if reported else None, rows)
    if client == "connect":
        session = connect_session(settings)
        try:
            began = time.perf_counter()
            rows = [tuple(row) for row in session.sql(sql).collect()]
            seconds = time.perf_counter() - began
        finally:
            session.stop()
        return Timed(client, seconds, seconds, rows)
    raise ValueError(f"client {client!r}: beeline or connect")
