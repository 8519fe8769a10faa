"""A single-node KRaft Apache Kafka broker run from the Maven Central jars in .lakeline/jars/kafka."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.kafka_security import KafkaSecurity
from infra.procs import marked_env, ComponentError, free_port, port_open, wait_until

LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


@dataclass
class BrokerProcess:
    pid: int
    port: int
    controller_port: int
    bootstrap: str
    log: Path


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ComponentError("kafka: `java` is not on PATH; install Java 17+ (infra/setup.sh does it on Debian).")
    return java


def start_broker(jars: Path, work_dir: Path, heap: str = "512m", timeout: float = 90.0,
                 security: KafkaSecurity | None = None) -> BrokerProcess:
    """Format a fresh KRaft log dir under `work_dir` and start the broker on free loopback ports: plaintext, or
    with `security` a TLS listener (SASL/SCRAM or client certificates) as the only client listener."""
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise ComponentError(f"kafka: no kafka_2.13 jar in {jars}; run `bash infra/setup.sh` to resolve the jars.")
    java = _java()
    port, controller_port = free_port(), free_port()
    data = work_dir / "kafka-data"
    shutil.rmtree(data, ignore_errors=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "kafka.log"
    log4j = work_dir / "kafka-log4j2.properties"
    log4j.write_text(LOG4J2.format(log=log))
    props = work_dir / "server.properties"
    listener = security.protocol if security else "PLAINTEXT"
    props.touch()
    props.chmod(0o600)  # it holds the keystore and inter-broker passwords when secured (before they are written)
    props.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners={listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners={listener}://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        f"inter.broker.listener.name={listener}",
        f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}",
        *(security.broker_properties if security else []),
        f"log.dirs={data}",
        "num.partitions=4",
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "log.retention.hours=-1",
        "",
    ]))
    classpath = f"{jars}/*"
    base = [java, f"-Xmx{heap}", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    cluster_id = subprocess.run(base + ["kafka.tools.StorageTool", "random-uuid"], check=True,
                                capture_output=True, text=True).stdout.strip().splitlines()[-1]
    scram = [a for user, password in (security.scram_users.items() if security else [])
             for a in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")]
    fmt = subprocess.run(base + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), *scram],
                         capture_output=True, text=True)
    if fmt.returncode != 0:
        raise ComponentError(f"kafka: formatting the KRaft log dir failed:\n{fmt.stderr or fmt.stdout}")
    broker = BrokerProcess(pid=0, port=port, controller_port=controller_port, bootstrap=f"127.0.0.1:{port}", log=log)
    return restart_broker(broker, jars, work_dir, heap, timeout, security.client_config if security else None)


def restart_broker(broker: BrokerProcess, jars: Path, work_dir: Path, heap: str = "512m", timeout: float = 90.0,
                   client: dict[str, str] | None = None) -> BrokerProcess:
    """Start the broker `start_broker` set up in `work_dir` (again, after it was stopped): the same ports,
    properties and log dir, so its topics and offsets are kept. Returns it with its new pid."""
    command = [_java(), f"-Xmx{heap}", f"-Dlog4j2.configurationFile={work_dir / 'kafka-log4j2.properties'}", "-cp",
               f"{jars}/*", "-Dlakeline.component=kafka", "kafka.Kafka", str(work_dir / "server.properties")]
    with open(work_dir / "kafka.stdout", "a") as out:
        proc = subprocess.Popen(command,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=marked_env(str(work_dir)))
    try:
        wait_until(lambda: port_open(broker.port) and broker_healthy(broker.bootstrap, client), timeout,
                   f"kafka broker on {broker.bootstrap}", alive=lambda: proc.poll() is None,
                   log=work_dir / "kafka.stdout")
    except BaseException:
        if proc.poll() is None:  # not left holding the ports: it runs in a session of its own
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    broker.pid = proc.pid
    return broker


def broker_healthy(bootstrap: str, client: dict[str, str] | None = None) -> bool:
    """True when the broker answers a metadata request (`client`: librdkafka security settings)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException

    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(client or {})}).list_topics(timeout=2)
    except KafkaException:
        return False
    return bool(meta.brokers)
