"""`lakeline dev up|down|status`: the embedded local stack (Kafka broker, moto S3/Kinesis, Iceberg catalog, and
optionally a Spark standalone master with N workers and the Iceberg REST catalog server).

`up` starts what is not running, health-checks it, and writes the endpoints to <state>/stack/stack.env, which
every other command reads (see ingest.settings). The stack is ephemeral: moto keeps objects in memory, so a fresh
`up` also resets the Iceberg catalog file that points into it.
"""

from __future__ import annotations

import logging
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra import kafka_security
from infra.kafka_broker import broker_healthy, start_broker
from infra.iceberg_rest import rest_healthy, start_rest_catalog
from infra.moto_server import moto_healthy, start_moto
from infra.paths import jars_dir, state_dir
from infra.procs import ComponentError, free_port, marked_env, pid_alive, port_open, stop_pid, wait_until
from infra import spark_cluster

log = logging.getLogger(__name__)

BUCKET = "lakeline"
CATALOG_NAME = "lakeline"
REGION = "us-east-1"
# moto accepts any credentials; these are not secrets.
MOTO_ACCESS_KEY = "lakeline-local"
MOTO_SECRET_KEY = "lakeline-local"


@dataclass
class StackInfo:
    kafka_pid: int
    kafka_bootstrap: str
    moto_pid: int
    moto_endpoint: str
    catalog_db: str
    warehouse: str
    state: str
    # The optional Spark standalone cluster (`up(spark_workers=N)`); empty when the stack has none.
    spark_master_url: str = ""
    spark_master_pid: int = 0
    spark_master_ui_port: int = 0
    spark_worker_pids: list[int] = field(default_factory=list)
    # The Iceberg REST catalog server (`up(iceberg_catalog="rest")`); empty: the SQLite catalog file is the catalog.
    iceberg_rest_uri: str = ""
    iceberg_rest_pid: int = 0
    # The broker's security (`up(kafka_security=...)`): "" plaintext, sasl_ssl or mtls. Its keys and the client
    # settings are under kafka_security_dir (0600 files); never in this record, which `dev status` prints.
    kafka_security: str = ""
    kafka_security_dir: str = ""
    # The SQL endpoint (`up(sql_endpoint=True)`: `lakeline sql-endpoint` in the background, loopback only); 0: none.
    sql_endpoint_pid: int = 0
    sql_endpoint_port: int = 0
    sql_endpoint_connect_port: int = 0

    def kafka_client_env(self) -> dict[str, str]:
        """The Kafka client security settings (LAKELINE_* names, secrets included) of a secured broker."""
        return kafka_security.client_env(Path(self.kafka_security_dir)) if self.kafka_security else {}

    def env(self) -> dict[str, str]:
        """The environment every Lakeline command needs to reach this stack."""
        cluster = {} if not self.spark_master_url else {
            "LAKELINE_SPARK_MASTER": self.spark_master_url,
            # The workers run on this host: executors take the jars from the same folder as the driver.
            "LAKELINE_SPARK_JARS_ON_WORKERS": "true",
        }
        endpoint = {} if not self.sql_endpoint_pid else {
            "LAKELINE_SQL_ENDPOINT_PORT": str(self.sql_endpoint_port),
            "LAKELINE_SQL_ENDPOINT_CONNECT_PORT": str(self.sql_endpoint_connect_port),
        }
        return {
            "LAKELINE_KAFKA_BOOTSTRAP_SERVERS": self.kafka_bootstrap,
            "LAKELINE_S3_ENDPOINT": self.moto_endpoint,
            "LAKELINE_KINESIS_ENDPOINT": self.moto_endpoint,
            "LAKELINE_WAREHOUSE": self.warehouse,
            "LAKELINE_ICEBERG_CATALOG_URI": self.iceberg_rest_uri or f"sqlite:///{self.catalog_db}",
            "LAKELINE_ICEBERG_CATALOG_NAME": CATALOG_NAME,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": MOTO_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": MOTO_SECRET_KEY,
            **cluster,
            **endpoint,
            **self.kafka_client_env(),
        }


def stack_dir(root: Path | None = None) -> Path:
    return (root or state_dir()) / "stack"


def env_file(root: Path | None = None) -> Path:
    return stack_dir(root) / "stack.env"


def read_info(root: Path | None = None) -> StackInfo | None:
    info_file = stack_dir(root) / "stack.json"
    if not info_file.is_file():
        return None
    return StackInfo(**json.loads(info_file.read_text()))


def is_running(info: StackInfo) -> bool:
    return _core_running(info) and _cluster_running(info)


def _core_running(info: StackInfo) -> bool:
    marker = info.state
    return (pid_alive(info.kafka_pid, marker) and pid_alive(info.moto_pid, marker)
            and broker_healthy(info.kafka_bootstrap, kafka_security.librdkafka_client(info.kafka_client_env()))
            and moto_healthy(info.moto_endpoint)
            and (not info.iceberg_rest_uri or (pid_alive(info.iceberg_rest_pid, marker)
                                               and rest_healthy(info.iceberg_rest_uri))))


def _cluster_running(info: StackInfo) -> bool:
    """No cluster recorded, or its master and every worker run and the workers are registered."""
    if not info.spark_master_url:
        return True
    return (pid_alive(info.spark_master_pid, info.state)
            and all(pid_alive(pid, info.state) for pid in info.spark_worker_pids)
            and spark_cluster.alive_workers(info.spark_master_ui_port) >= len(info.spark_worker_pids))


def up(root: Path | None = None, spark_workers: int = 0, worker_cores: int = 1,
       worker_memory: str = "2g", iceberg_catalog: str = "sql", kafka_security_mode: str = "",
       sql_endpoint: bool = False) -> StackInfo:
    """Start (or reuse) the local stack; returns its endpoints. With `spark_workers` > 0 it also starts a Spark
    standalone master and that many workers (`worker_cores` cores and `worker_memory` each), and the stack's
    environment points Spark at them. `iceberg_catalog` "rest" serves the Iceberg catalog through the Iceberg
    project's REST catalog server instead of the SQLite file. `kafka_security_mode` sasl_ssl or mtls starts the
    broker with a TLS listener only (SASL/SCRAM users, or client certificates), its client settings in the env
    file. `sql_endpoint` also starts the SQL endpoint (`lakeline sql-endpoint` on 127.0.0.1, its ports in the env
    file). Raises ComponentError naming what failed."""
    if iceberg_catalog not in ("sql", "rest"):
        raise ComponentError(f"iceberg catalog {iceberg_catalog!r}: use sql or rest")
    if kafka_security_mode and kafka_security_mode not in kafka_security.MODES:
        raise ComponentError(f"kafka security {kafka_security_mode!r}: use {' or '.join(kafka_security.MODES)}")
    root = (root or state_dir()).resolve()
    work = stack_dir(root)
    existing = read_info(root)
    if existing and _core_running(existing):
        log.info(f"stack already running: kafka {existing.kafka_bootstrap}, s3/kinesis {existing.moto_endpoint}")
        workers = spark_workers or len(existing.spark_worker_pids)
        if existing.spark_master_url and not _cluster_running(existing):
            log.info("the spark cluster is not whole (a daemon died): starting it again")
            _stop_cluster(existing)
        elif existing.spark_master_url and spark_workers and len(existing.spark_worker_pids) != spark_workers:
            log.warning(f"the running stack has {len(existing.spark_worker_pids)} spark worker(s), not "
                        f"{spark_workers}: `lakeline dev down` first to change that")
        if kafka_security_mode != existing.kafka_security:
            log.warning(f"the running stack's broker security is {existing.kafka_security or 'none (plaintext)'}: "
                        f"`lakeline dev down` first to change it")
        if (iceberg_catalog == "rest") != bool(existing.iceberg_rest_uri):
            log.warning(f"the running stack's Iceberg catalog is "
                        f"{'rest' if existing.iceberg_rest_uri else 'sql'}: `lakeline dev down` first to change it")
        if workers and not existing.spark_master_url:
            try:
                _start_cluster(existing, workers, worker_cores, worker_memory)
            except BaseException:
                _stop_cluster(existing)
                raise
            _record(root, existing)
        if sql_endpoint and not sql_endpoint_running(existing):
            _start_sql_endpoint(existing)
            _record(root, existing)
        return existing
    if existing:
        log.info("stack partly running or stale: stopping what is left and starting fresh")
        down(root)
    work.mkdir(parents=True, exist_ok=True)

    log.info("starting moto server (S3 + Kinesis)...")
    moto = start_moto(work)
    try:
        log.info(f"  moto ready at {moto.endpoint}")
        security = None
        if kafka_security_mode:
            log.info(f"making the broker's TLS keys and certificates ({kafka_security_mode}) with keytool...")
            security = kafka_security.make_security(kafka_security_mode, work / "kafka-security")
        log.info(f"starting Kafka broker (KRaft, single node{', ' + security.protocol if security else ''})...")
        broker = start_broker(jars_dir("kafka"), work, security=security)
        log.info(f"  kafka ready at {broker.bootstrap}")
    except BaseException:
        stop_pid(moto.pid, str(work))
        raise
    info = StackInfo(kafka_pid=broker.pid, kafka_bootstrap=broker.bootstrap, moto_pid=moto.pid,
                     moto_endpoint=moto.endpoint, catalog_db=str(work / "iceberg_catalog.db"),
                     warehouse=f"s3a://{BUCKET}/warehouse", state=str(work), kafka_security=kafka_security_mode,
                     kafka_security_dir=str(work / "kafka-security") if kafka_security_mode else "")
    try:
        _init_storage(info)
    except BaseException:
        _stop_all(info)
        raise
    log.info(f"  iceberg catalog '{CATALOG_NAME}' at {info.catalog_db}")
    if iceberg_catalog == "rest":
        try:
            _start_rest_catalog(info)
        except BaseException:
            _stop_all(info)
            raise
    if spark_workers:
        try:
            _start_cluster(info, spark_workers, worker_cores, worker_memory)
        except BaseException:
            _stop_all(info)
            raise
    _record(root, info)
    if sql_endpoint:
        _start_sql_endpoint(info)  # a child `lakeline` command: it reads the stack from the env file just written
        _record(root, info)
    return info


def _record(root: Path, info: StackInfo) -> None:
    """Write stack.json and the env file every other command reads."""
    (stack_dir(root) / "stack.json").write_text(json.dumps(asdict(info), indent=2))
    env = env_file(root)
    env.touch()
    env.chmod(0o600)  # before the secrets (a secured broker's passwords) are written
    env.write_text("".join(f"{k}={v}\n" for k, v in info.env().items()))
    log.info(f"endpoints written to {env}")


def _start_cluster(info: StackInfo, workers: int, cores: int, memory: str) -> None:
    """Start the Spark master and `workers` workers for `info`'s stack and wait until they have all registered."""
    log.info(f"starting Spark standalone master and {workers} worker(s) ({cores} core(s), {memory} each)...")
    cluster = spark_cluster.start_cluster(Path(info.state), info.state, workers, cores, memory)
    info.spark_master_url, info.spark_master_pid = cluster.master_url, cluster.master_pid
    info.spark_master_ui_port, info.spark_worker_pids = cluster.master_ui_port, cluster.worker_pids
    log.info(f"  spark master ready at {cluster.master_url} (status page http://127.0.0.1:{cluster.master_ui_port}),"
             f" {workers} worker(s) registered")


def _start_rest_catalog(info: StackInfo) -> None:
    log.info("starting the Iceberg REST catalog server (iceberg-open-api test fixtures)...")
    rest = start_rest_catalog(jars_dir("iceberg-rest"), jars_dir("spark"), Path(info.state), info.warehouse,
                              info.moto_endpoint, MOTO_ACCESS_KEY, MOTO_SECRET_KEY, REGION)
    info.iceberg_rest_uri, info.iceberg_rest_pid = rest.uri, rest.pid
    log.info(f"  iceberg rest catalog ready at {rest.uri}")


def sql_endpoint_running(info: StackInfo) -> bool:
    return bool(info.sql_endpoint_pid) and pid_alive(info.sql_endpoint_pid, info.state) and \
        port_open(info.sql_endpoint_port) and port_open(info.sql_endpoint_connect_port)


def _start_sql_endpoint(info: StackInfo) -> None:
    """Start `lakeline sql-endpoint` on free loopback ports and wait until both servers answer (the HiveServer2
    port opens once the tables are registered)."""
    if info.sql_endpoint_pid:
        stop_pid(info.sql_endpoint_pid, info.state)
    port, connect_port = free_port(), free_port()
    log_path = Path(info.state) / "sql-endpoint.log"
    env = {**marked_env(info.state), **info.env(), "LAKELINE_SQL_ENDPOINT_HOST": "127.0.0.1",
           "LAKELINE_SQL_ENDPOINT_PORT": str(port), "LAKELINE_SQL_ENDPOINT_CONNECT_PORT": str(connect_port)}
    log.info("starting the SQL endpoint (Spark Thrift server + Spark Connect, one Spark driver)...")
    with open(log_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lakeline", "sql-endpoint"], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    info.sql_endpoint_pid, info.sql_endpoint_port, info.sql_endpoint_connect_port = proc.pid, port, connect_port
    try:
        wait_until(lambda: port_open(port) and port_open(connect_port), 300, "the SQL endpoint",
                   alive=lambda: proc.poll() is None, log=log_path)
    except BaseException:
        stop_pid(proc.pid, info.state)
        info.sql_endpoint_pid = info.sql_endpoint_port = info.sql_endpoint_connect_port = 0
        raise
    log.info(f"  sql endpoint ready: jdbc:hive2://127.0.0.1:{port}/default, sc://127.0.0.1:{connect_port} "
             f"(log {log_path})")


def stop_sql_endpoint(root: Path | None = None) -> bool:
    """Stop the stack's SQL endpoint only; False when none ran."""
    root = (root or state_dir()).resolve()
    info = read_info(root)
    if info is None or not info.sql_endpoint_pid:
        return False
    stopped = stop_pid(info.sql_endpoint_pid, info.state)
    info.sql_endpoint_pid = info.sql_endpoint_port = info.sql_endpoint_connect_port = 0
    _record(root, info)
    return stopped


def _stop_cluster(info: StackInfo) -> None:
    """Stop the cluster's daemons (a worker's process group holds its executors too) and forget them."""
    for pid in (*info.spark_worker_pids, info.spark_master_pid):
        if pid:
            stop_pid(pid, info.state)
    info.spark_master_url, info.spark_master_pid, info.spark_master_ui_port = "", 0, 0
    info.spark_worker_pids = []


def _stop_all(info: StackInfo) -> None:
    _stop_cluster(info)
    for pid in (info.sql_endpoint_pid, info.iceberg_rest_pid, info.kafka_pid, info.moto_pid):
        if pid:
            stop_pid(pid, info.state)


def _init_storage(info: StackInfo) -> None:
    """Create the warehouse bucket and a fresh embedded Iceberg catalog (SQLite, pyiceberg's V1 schema)."""
    import boto3
    from pyiceberg.catalog.sql import SqlCatalog

    s3 = boto3.client("s3", endpoint_url=info.moto_endpoint, region_name=REGION,
                      aws_access_key_id=MOTO_ACCESS_KEY, aws_secret_access_key=MOTO_SECRET_KEY)
    s3.create_bucket(Bucket=BUCKET)
    Path(info.catalog_db).unlink(missing_ok=True)
    try:
        SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{info.catalog_db}", warehouse=info.warehouse)
    except Exception as exc:  # noqa: BLE001 - re-raised with the component named
        raise ComponentError(f"iceberg catalog: could not initialise {info.catalog_db}: {exc}") from exc


def down(root: Path | None = None) -> None:
    """Stop only the processes this stack started (checked by pid and command line)."""
    root = (root or state_dir()).resolve()
    info = read_info(root)
    if info is None:
        log.info("no local stack recorded; nothing to stop")
        return
    daemons = [("sql endpoint", info.sql_endpoint_pid),
               *((f"spark worker {i}", pid) for i, pid in enumerate(info.spark_worker_pids)),
               ("spark master", info.spark_master_pid), ("iceberg rest catalog", info.iceberg_rest_pid),
               ("kafka", info.kafka_pid), ("moto", info.moto_pid)]
    for name, pid in daemons:
        if not pid:
            continue
        stopped = stop_pid(pid, info.state)  # a worker's process group holds its executors too
        log.info(f"{name}: {'stopped' if stopped else 'was not running'} (pid {pid})")
    (stack_dir(root) / "stack.json").unlink(missing_ok=True)
    env_file(root).unlink(missing_ok=True)
    shutil.rmtree(stack_dir(root) / "kafka-data", ignore_errors=True)
    shutil.rmtree(stack_dir(root) / "kafka-security", ignore_errors=True)  # keys and passwords


def status(root: Path | None = None) -> dict:
    info = read_info(root)
    if info is None:
        return {"running": False}
    out = {"running": is_running(info), **asdict(info)}
    if info.spark_master_url:
        out["spark_workers_alive"] = spark_cluster.alive_workers(info.spark_master_ui_port)
    if info.sql_endpoint_pid:
        out["sql_endpoint"] = {"running": sql_endpoint_running(info),
                               "jdbc_url": f"jdbc:hive2://127.0.0.1:{info.sql_endpoint_port}/default",
                               "connect_url": f"sc://127.0.0.1:{info.sql_endpoint_connect_port}",
                               "log": str(Path(info.state) / "sql-endpoint.log")}
    return out
