"""`lakeline dev up|down|status`: the embedded local stack (Kafka broker, moto S3/Kinesis, Iceberg catalog).

`up` starts what is not running, health-checks it, and writes the endpoints to <state>/stack/stack.env, which
every other command reads (see ingest.settings). The stack is ephemeral: moto keeps objects in memory, so a fresh
`up` also resets the Iceberg catalog file that points into it.
"""

from __future__ import annotations

import logging
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.kafka_broker import broker_healthy, start_broker
from infra.moto_server import moto_healthy, start_moto
from infra.paths import jars_dir, state_dir
from infra.procs import ComponentError, pid_alive, stop_pid

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

    def env(self) -> dict[str, str]:
        """The environment every Lakeline command needs to reach this stack."""
        return {
            "LAKELINE_KAFKA_BOOTSTRAP_SERVERS": self.kafka_bootstrap,
            "LAKELINE_S3_ENDPOINT": self.moto_endpoint,
            "LAKELINE_KINESIS_ENDPOINT": self.moto_endpoint,
            "LAKELINE_WAREHOUSE": self.warehouse,
            "LAKELINE_ICEBERG_CATALOG_URI": f"sqlite:///{self.catalog_db}",
            "LAKELINE_ICEBERG_CATALOG_NAME": CATALOG_NAME,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": MOTO_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": MOTO_SECRET_KEY,
        }


def stack_dir(root: Path | None = None) -> Path:
    return (root or state_dir()) / "stack"


def env_file(root: Path | None = None) -> Path:
    return stack_dir(root) / "stack.env"


def _marker(root: Path) -> str:
    # Each process we start has this directory on its command line (log/config paths), so `down` never kills a
    # process that merely reused a pid.
    return str(stack_dir(root))


def read_info(root: Path | None = None) -> StackInfo | None:
    info_file = stack_dir(root) / "stack.json"
    if not info_file.is_file():
        return None
    return StackInfo(**json.loads(info_file.read_text()))


def is_running(info: StackInfo) -> bool:
    marker = info.state
    return (pid_alive(info.kafka_pid, marker) and pid_alive(info.moto_pid, marker)
            and broker_healthy(info.kafka_bootstrap) and moto_healthy(info.moto_endpoint))


def up(root: Path | None = None) -> StackInfo:
    """Start (or reuse) the local stack; returns its endpoints. Raises ComponentError naming what failed."""
    root = (root or state_dir()).resolve()
    work = stack_dir(root)
    existing = read_info(root)
    if existing and is_running(existing):
        log.info(f"stack already running: kafka {existing.kafka_bootstrap}, s3/kinesis {existing.moto_endpoint}")
        return existing
    if existing:
        log.info("stack partly running or stale: stopping what is left and starting fresh")
        down(root)
    work.mkdir(parents=True, exist_ok=True)

    log.info("starting moto server (S3 + Kinesis)...")
    moto = start_moto(work)
    try:
        log.info(f"  moto ready at {moto.endpoint}")
        log.info("starting Kafka broker (KRaft, single node)...")
        broker = start_broker(jars_dir("kafka"), work)
        log.info(f"  kafka ready at {broker.bootstrap}")
    except BaseException:
        stop_pid(moto.pid, str(work))
        raise
    info = StackInfo(kafka_pid=broker.pid, kafka_bootstrap=broker.bootstrap, moto_pid=moto.pid,
                     moto_endpoint=moto.endpoint, catalog_db=str(work / "iceberg_catalog.db"),
                     warehouse=f"s3a://{BUCKET}/warehouse", state=str(work))
    try:
        _init_storage(info)
    except BaseException:
        stop_pid(broker.pid, str(work))
        stop_pid(moto.pid, str(work))
        raise
    (work / "stack.json").write_text(json.dumps(asdict(info), indent=2))
    env_file(root).write_text("".join(f"{k}={v}\n" for k, v in info.env().items()))
    log.info(f"  iceberg catalog '{CATALOG_NAME}' at {info.catalog_db}")
    log.info(f"endpoints written to {env_file(root)}")
    return info


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
    for name, pid in (("kafka", info.kafka_pid), ("moto", info.moto_pid)):
        stopped = stop_pid(pid, info.state)
        log.info(f"{name}: {'stopped' if stopped else 'was not running'} (pid {pid})")
    (stack_dir(root) / "stack.json").unlink(missing_ok=True)
    env_file(root).unlink(missing_ok=True)
    shutil.rmtree(stack_dir(root) / "kafka-data", ignore_errors=True)


def status(root: Path | None = None) -> dict:
    info = read_info(root)
    if info is None:
        return {"running": False}
    return {"running": is_running(info), **asdict(info)}
