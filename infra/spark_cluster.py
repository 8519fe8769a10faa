"""A Spark standalone cluster from the pyspark distribution: one master and N workers, loopback only.

pyspark's wheel has no start-master.sh / start-worker.sh, so each daemon is `spark-class <Main> ...` in a process
group of its own. Every RPC and UI port is a free 127.0.0.1 port and SPARK_LOCAL_IP is 127.0.0.1, so nothing
listens on or sends to another address. Executors that workers launch inherit the worker's environment (and with
it the stack marker, so `down` recognises them as ours).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.procs import ComponentError, free_port, marked_env, pid_alive, port_open, stop_pid, tail, wait_until

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class SparkDaemon:
    pid: int
    port: int
    ui_port: int
    log: Path


def spark_home() -> Path:
    """The pyspark distribution's folder (its bin/spark-class starts the daemons)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _daemon_env(marker: str, work: Path) -> dict[str, str]:
    env = marked_env(marker)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        # The daemons' own JVMs are small; the executors a worker launches get spark.executor.memory.
        "SPARK_DAEMON_MEMORY": "256m",
    })
    # Keep a caller's Spark settings for drivers (LAKELINE_SPARK_CONF) out of the daemons' environment.
    env.pop("SPARK_CONF_DIR", None)
    return env


def _start(main_class: str, args: list[str], name: str, work: Path, marker: str) -> subprocess.Popen:
    work.mkdir(parents=True, exist_ok=True)
    spark_class = spark_home() / "bin" / "spark-class"
    if not spark_class.exists():
        raise ComponentError(f"spark {name}: {spark_class} is missing: run `bash infra/setup.sh` (pyspark).")
    with open(work / f"{name}.log", "w") as out:
        return subprocess.Popen([str(spark_class), main_class, *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=_daemon_env(marker, work))


def master_state(ui_port: int) -> dict | None:
    """The master's JSON status page (workers, their state, running applications), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


def alive_workers(ui_port: int) -> int:
    state = master_state(ui_port)
    return 0 if state is None else sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def start_master(work: Path, marker: str, timeout: float = 60.0) -> SparkDaemon:
    """Start a standalone master on free loopback ports and wait until its status page answers."""
    port, ui_port = free_port(), free_port()
    proc = _start(MASTER_CLASS, ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
                  "spark-master", work, marker)
    log = work / "spark-master.log"
    wait_until(lambda: port_open(port) and master_state(ui_port) is not None, timeout,
               f"spark master on 127.0.0.1:{port}", alive=lambda: proc.poll() is None, log=log)
    return SparkDaemon(pid=proc.pid, port=port, ui_port=ui_port, log=log)


def start_worker(master_url: str, index: int, work: Path, marker: str, cores: int, memory: str) -> SparkDaemon:
    """Start worker `index` (its own work dir for executor logs and files); the caller waits for registration."""
    port, ui_port = free_port(), free_port()
    folder = work / f"spark-worker-{index}"
    proc = _start(WORKER_CLASS, [master_url, "--host", "127.0.0.1", "--port", str(port), "--webui-port",
                                 str(ui_port), "--cores", str(cores), "--memory", memory, "--work-dir",
                                 str(folder)], f"spark-worker-{index}", work, marker)
    return SparkDaemon(pid=proc.pid, port=port, ui_port=ui_port, log=work / f"spark-worker-{index}.log")


def wait_for_workers(master: SparkDaemon, workers: list[SparkDaemon], timeout: float = 90.0) -> None:
    """Wait until every worker has registered with the master as ALIVE; fail naming the first one that died."""
    def registered() -> bool:
        for worker in workers:
            if not pid_alive(worker.pid):
                raise ComponentError(f"spark worker (pid {worker.pid}) exited during start-up. Last log lines "
                                     f"({worker.log}):\n{tail(worker.log)}")
        return alive_workers(master.ui_port) >= len(workers)

    wait_until(registered, timeout, f"{len(workers)} spark worker(s) registering with the master",
               alive=lambda: pid_alive(master.pid), log=master.log)


@dataclass
class Cluster:
    master_url: str
    master_pid: int
    master_ui_port: int
    worker_pids: list[int]
    work: Path  # the daemons' logs, and each worker's work dir (executor logs under <app id>/<executor id>/)


def start_cluster(work: Path, marker: str, workers: int, cores: int = 1, memory: str = "2g") -> Cluster:
    """A master and `workers` workers, every worker registered when this returns. On failure what was started is
    stopped again and a ComponentError names the daemon and its log."""
    master = start_master(work, marker)
    started: list[SparkDaemon] = []
    try:
        url = f"spark://127.0.0.1:{master.port}"
        started = [start_worker(url, i, work, marker, cores, memory) for i in range(workers)]
        wait_for_workers(master, started)
    except BaseException:
        for pid in (*(w.pid for w in started), master.pid):
            stop_pid(pid, marker)
        raise
    return Cluster(url, master.pid, master.ui_port, [w.pid for w in started], work)
