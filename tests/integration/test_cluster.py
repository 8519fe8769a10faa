"""Lakeline on a Spark standalone cluster (a master and two one-core workers from the pyspark distribution, loopback
only) beside the session's broker and moto S3: `lakeline dev up --spark-workers`, steady Kafka and Kinesis runs on
both formats, and kill -9 of an executor, of a whole worker and of the driver in one run, each exact.

Costs (2 cores): the cluster starts in about 10 s; a steady run about 60-90 s (driver and executor JVMs start);
the packed-environment run about 90 s; the kill run 2-5 min; the maintenance commands about 4.5 min; a drill
about 2-3 min; the DAG through spark-submit about 1.5 min; `dev up/down` with a cluster of its own about 20 s.
All heavy: CI runs them, except what is marked soak (two steady pairs, the packed-environment run, the
maintenance commands, the drill).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from infra import spark_cluster
from infra.procs import pid_alive, stop_pid
from ingest.config import load_pipeline
from ingest.events import BatchCommitted, BatchReplayed, RunStarted
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import (assert_exact, events_of, lakeline_json, load_dag, pipeline_dict, producing, wait_for,
                           write_pipeline)

pytestmark = [pytest.mark.integration, pytest.mark.heavy, pytest.mark.soak]  # soak: does not fit CI on a slow day
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _cluster(folder: Path) -> spark_cluster.Cluster:
    try:
        return spark_cluster.start_cluster(folder, str(folder), workers=2, cores=1, memory="2g")
    except spark_cluster.ComponentError as exc:
        pytest.fail(f"spark cluster could not start: {exc}", pytrace=False)


def _stop(cluster: spark_cluster.Cluster) -> None:
    for pid in (*cluster.worker_pids, cluster.master_pid):
        stop_pid(pid, str(cluster.work))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, stack_env):
    running = _cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield running
    _stop(running)


def _driver_env(cluster: spark_cluster.Cluster) -> dict[str, str]:
    """A driver of the session's stack, run on `cluster` (the jars from this host's folder, as the stack sets)."""
    return {**os.environ, "LAKELINE_SPARK_MASTER": cluster.master_url, "LAKELINE_SPARK_JARS_ON_WORKERS": "true"}


def _apps(cluster: spark_cluster.Cluster, name: str) -> list[dict]:
    state = spark_cluster.master_state(cluster.master_ui_port) or {}
    return [app for app in state.get("activeapps", []) + state.get("completedapps", []) if app["name"] == name]


def _listening(processes: list[psutil.Process]) -> set[str]:
    """The addresses `processes` listen on, IPv4-mapped IPv6 ones as plain IPv4."""
    import ipaddress

    found = set()
    for process in processes:
        for conn in process.net_connections("inet"):
            if conn.status == psutil.CONN_LISTEN:
                address = ipaddress.ip_address(conn.laddr.ip)
                found.add(str(getattr(address, "ipv4_mapped", None) or address))
    return found


def _executors(cluster: spark_cluster.Cluster) -> list[psutil.Process]:
    found = []
    for worker in cluster.worker_pids:
        try:
            children = psutil.Process(worker).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                if EXECUTOR_CLASS in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.Error:
                continue  # ended meanwhile, or an earlier application's executor not yet reaped (a zombie)
    return found


# Kafka into Delta in CI's heavy tier; the other three pairs (about 1.5 min each) in the soak run.
@pytest.mark.parametrize("kind, fmt", [("kafka", "delta"), pytest.param("kafka", "iceberg", marks=pytest.mark.soak),
                                       pytest.param("kinesis", "delta", marks=pytest.mark.soak),
                                       pytest.param("kinesis", "iceberg", marks=pytest.mark.soak)])
def test_steady_run_on_the_cluster_is_exact(kind, fmt, cluster, conf_dir, settings, spark, tmp_path):
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 4000
    if kind == "kinesis":  # read by Lakeline's Python data source, in Python workers of the cluster's executors
        data["source"] = {"kind": "kinesis", "stream": f"{data['pipeline']}-{uuid.uuid4().hex[:4]}",
                          "max_records_per_batch": 4000}
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    produced = produce(config, settings, 12_000, bad_ratio=0.01, seed=11, partitions=3)
    stream = tmp_path / "events.jsonl"
    run = subprocess.run([sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger",
                          "available-now", "--events", str(stream)], capture_output=True, text=True,
                         env=_driver_env(cluster), timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    batches = events_of(stream, BatchCommitted)
    assert len(batches) >= 3 and sum(b.rows + b.dead_letters for b in batches) == 12_000
    # It ran on the cluster: the master lists the application, with cores of the workers, and the workers ran
    # its executors (each executor's log is in a worker's work dir under the application's id).
    apps = _apps(cluster, f"lakeline-{config.pipeline}")
    assert len(apps) == 1 and apps[0]["cores"] >= 1, apps
    assert list(cluster.work.glob(f"spark-worker-*/{apps[0]['id']}/*/stderr"))
    assert_exact(reconcile(config, settings, spark), 12_000, produced.bad_total)


# Soak (about 3 min, past CI's budget): CI's steady Kinesis run on the cluster reads through the same shipped packages
# in the workers' base interpreter; this one also shows that interpreter has none of them installed.
@pytest.mark.soak
def test_executors_run_lakeline_with_nothing_installed_on_the_worker(cluster, conf_dir, settings, spark, tmp_path):
    """The workers' Python (the base interpreter) has none of the Kinesis source's packages; the executors run it
    with the packed packages and the code zip the driver shipped (spark.archives, addPyFile), and the run is exact."""
    from infra.executor_env import build
    from ingest.spark import base_interpreter

    build()  # as infra/setup.sh does (a no-op when up to date)
    python = base_interpreter(sys.executable)
    for package in ("pyarrow", "tenacity"):
        bare = subprocess.run([python, "-c", f"import {package}"], capture_output=True, text=True)
        assert bare.returncode != 0, f"{python} has {package} installed: this test needs a worker Python without it"
    data = pipeline_dict("delta")
    data["source"] = {"kind": "kinesis", "stream": f"{data['pipeline']}-{uuid.uuid4().hex[:4]}",
                      "max_records_per_batch": 1000}
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    produced = produce(config, settings, 4000, bad_ratio=0.01, seed=13, partitions=2)
    stream = tmp_path / "events.jsonl"
    driver = subprocess.Popen([sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger",
                               "processing-time=500ms", "--events", str(stream)], env=_driver_env(cluster),
                              stdout=open(tmp_path / "driver.log", "w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(events_of(stream, BatchCommitted)) >= 2, "batches read by the executors", timeout=300)
        workers = _python_workers(cluster)
        assert workers, "no Python worker ran on the executors"
        for exe, pythonpath, cwd in workers:
            assert os.path.realpath(exe) == os.path.realpath(python)
            assert "lakeline_env" in pythonpath.split(os.pathsep), pythonpath
            # an executor's work dir: the packages unpacked there, and the code zip the worker adds to its path
            assert str(cluster.work) in cwd
            assert (Path(cwd) / "lakeline_env" / "tenacity").is_dir() and (Path(cwd) / "lakeline_ingest.zip").is_file()
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(180) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    final = subprocess.run([sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger",
                            "available-now"], capture_output=True, text=True, env=_driver_env(cluster), timeout=600)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert_exact(reconcile(config, settings, spark), 4000, produced.bad_total)


def _python_workers(cluster: spark_cluster.Cluster) -> list[tuple[str, str, str]]:
    """(executable, PYTHONPATH, working dir) of each Python process the cluster's executors started (pyspark's
    daemon and the workers it forked) that is still running."""
    found = []
    for executor in _executors(cluster):
        for child in executor.children(recursive=True):
            try:
                if "pyspark" in " ".join(child.cmdline()) or child.name().startswith("python"):
                    found.append((child.exe(), child.environ().get("PYTHONPATH", ""), child.cwd()))
            except psutil.Error:
                continue  # ended while we looked
    return found


@pytest.mark.soak  # ~8.5 min on a slow day
def test_executor_worker_and_driver_killed_mid_stream_stay_exact(conf_dir, settings, spark, tmp_path,
                                                                 tmp_path_factory, stack_env):
    """One stream while a producer writes 300 events/s: kill -9 an executor, then a whole worker (its executors
    go with it), then the driver, which is started again; exact after a final drain."""
    cluster = _cluster(tmp_path_factory.mktemp("spark-cluster-kills"))
    data = pipeline_dict("delta")
    data["source"]["max_offsets_per_trigger"] = 2000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path)]
    env = _driver_env(cluster)
    drivers = []

    def start_driver(name: str) -> Path:
        stream = tmp_path / f"{name}.events.jsonl"
        drivers.append(subprocess.Popen(command + ["--trigger", "processing-time=500ms", "--events", str(stream)],
                                        stdout=open(tmp_path / f"{name}.log", "w"), stderr=subprocess.STDOUT,
                                        env=env))
        return stream

    def committed(stream: Path) -> int:
        return len(events_of(stream, BatchCommitted, BatchReplayed))

    try:
        with producing(config, settings, chunk=600, rate=300, seed=51) as produced:
            first = start_driver("first")
            wait_for(lambda: committed(first) >= 2, "the first driver's first batches", timeout=300)

            executors = _executors(cluster)
            assert len(executors) == 2  # one per worker
            assert _listening(executors) == {"127.0.0.1"}
            victim = executors[0]
            victim.send_signal(signal.SIGKILL)
            print(f"killed executor pid {victim.pid}")
            seen = committed(first)
            wait_for(lambda: committed(first) >= seen + 3, "batches after an executor was killed", timeout=300)

            worker = cluster.worker_pids[0]
            os.killpg(worker, signal.SIGKILL)  # the worker and the executors it launched
            print(f"killed worker pid {worker}")
            seen = committed(first)
            wait_for(lambda: committed(first) >= seen + 3, "batches after a worker was killed", timeout=300)
            assert not pid_alive(worker)

            drivers[0].send_signal(signal.SIGKILL)
            drivers[0].wait(60)
            second = start_driver("second")
            wait_for(lambda: committed(second) >= 3, "the restarted driver's batches", timeout=300)
            assert [e.action for e in events_of(second, RunStarted)] == ["resume"]
        drivers[1].send_signal(signal.SIGTERM)
        assert drivers[1].wait(180) == 0, (tmp_path / "second.log").read_text()[-3000:]
        final = subprocess.run(command + ["--trigger", "available-now"], capture_output=True, text=True, env=env,
                               timeout=900)
        assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        _stop(cluster)
    assert_exact(reconcile(config, settings, spark), produced.count, produced.bad)


# Soak (about 4-4.5 min, past CI's budget): CI's cluster DAG test runs a maintenance command through spark-submit.
@pytest.mark.soak
def test_maintenance_commands_run_on_the_cluster(cluster, conf_dir, settings, spark):
    """health, compact, retain (dry run), checkpoint backup and reconcile as `lakeline` commands whose Spark
    application runs on the cluster: the small files a stream left are compacted, nothing is lost."""

    import yaml

    from ingest.pipeline import Pipeline

    data = pipeline_dict("iceberg")
    data["source"]["max_offsets_per_trigger"] = 300
    pipeline_path = write_pipeline(conf_dir, data)
    config = load_pipeline(pipeline_path)
    (conf_dir / "tables").mkdir()
    (conf_dir / "tables" / f"{config.pipeline}.yaml").write_text(yaml.safe_dump({
        "table": config.pipeline, "pipeline": f"../{pipeline_path.name}",
        "compaction": {"min_small_files": 3, "small_file_ratio": 0.3, "hot_partition_window": "1m"},
        "retention": {"retain": "24h", "min_retain": "24h", "orphan_older_than": "24h", "min_orphan_age": "1h"}}))
    produced = produce(config, settings, 3000, bad_ratio=0.01, seed=17)
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)

    def lakeline(*args: str) -> dict:
        return lakeline_json(_driver_env(cluster), *args)

    table = ["--table", config.pipeline, "--conf-dir", str(conf_dir)]
    before = lakeline("health", *table)
    later = "2099-01-01T00:00:00+00:00"  # every partition cold, so the policy takes them all
    compacted = lakeline("compact", *table, "--now", later)
    after = lakeline("health", *table)
    files = lambda report: sum(p["files"] for p in report["partitions"])  # noqa: E731
    assert files(after) < files(before), (files(before), files(after), compacted)
    lakeline("retain", *table)
    backup = lakeline("checkpoint", "backup", "--pipeline", str(pipeline_path))
    assert backup["backup_id"]
    report = lakeline("reconcile", "--pipeline", str(pipeline_path))
    assert report["duplicates"] == 0 and report["missing"] == 0 and report["produced"] == 3000
    assert report["dead_letters"] == produced.bad_total
    names = {app["name"] for app in (spark_cluster.master_state(cluster.master_ui_port) or {})["completedapps"]}
    assert {f"lakeline-health-{config.pipeline}", f"lakeline-compact-{config.pipeline}",
            "lakeline-reconcile"} <= names, names


# Soak (about 3-3.5 min, past CI's budget): CI runs drills locally and the kill run on this cluster.
@pytest.mark.soak
def test_a_recovery_drill_on_the_cluster(cluster, conf_dir, settings):
    """`lakeline drill --scenario kill` whose drill drivers (and the drill's own session) run on the cluster. A
    standalone master gives an application every free core unless spark.cores.max says otherwise, so each
    application here takes one: the drill's own session must leave cores to the drivers it starts."""
    path = write_pipeline(conf_dir, pipeline_dict("delta"))
    env = {**_driver_env(cluster), "LAKELINE_SPARK_CONF": '{"spark.cores.max": "1"}'}
    report = lakeline_json(env, "drill", "--pipeline", str(path), "--scenario", "kill", "--events",
                           "2000", "--batch-size", "400", timeout=900)
    assert report["passed"], report
    [kill] = report["scenarios"]
    assert kill["scenario"] == "kill" and kill["duplicates"] == 0 and kill["missing"] == 0, kill
    assert kill["rows"] + kill["dead_letters"] == kill["produced"] >= 2000
    config = load_pipeline(path)
    names = {app["name"] for app in (spark_cluster.master_state(cluster.master_ui_port) or {})["completedapps"]}
    assert "lakeline-drill" in names and sum(n.startswith(f"lakeline-{config.pipeline}") for n in names) >= 1, names


def test_a_dag_runs_its_tasks_through_spark_submit_on_the_cluster(cluster, airflow_db, conf_dir, settings, spark,
                                                                  monkeypatch):
    """The checkpoint backup DAG with LAKELINE_TASK_LAUNCHER=spark-submit: each task is `spark-submit --master
    <cluster> lakeline/__main__.py ...`; the backup verifies, and the master ran the tasks' applications."""
    import yaml

    from ingest.adapters.hadoop_fs import HadoopFS
    from ingest.pipeline import Pipeline
    from maintenance import checkpoints

    (conf_dir / "pipelines").mkdir()
    data = pipeline_dict("delta")
    path = conf_dir / "pipelines" / f"{data['pipeline']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_pipeline(path)
    produce(config, settings, 1500, bad_ratio=0.01, seed=19)
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    before = len((spark_cluster.master_state(cluster.master_ui_port) or {})["completedapps"])
    for key, value in {"LAKELINE_CONF_DIR": str(conf_dir), "LAKELINE_TASK_LAUNCHER": "spark-submit",
                       "LAKELINE_SPARK_SUBMIT": str(Path(sys.executable).parent / "spark-submit"),
                       "LAKELINE_SPARK_MASTER": cluster.master_url, "LAKELINE_SPARK_JARS_ON_WORKERS": "true",
                       "PYSPARK_DRIVER_PYTHON": sys.executable, "PYSPARK_PYTHON": sys.executable}.items():
        monkeypatch.setenv(key, value)
    run = load_dag(f"lakeline_checkpoint_backup__{config.pipeline}").test()
    assert run.state == "success"
    made = run.get_task_instance("backup").xcom_pull(task_ids="backup")
    root = config.backup_location(settings)
    assert checkpoints.verify(HadoopFS(spark), root, made["backup_id"], None).ok
    apps = (spark_cluster.master_state(cluster.master_ui_port) or {})["completedapps"]
    assert len(apps) >= before + 2, apps  # backup and verify, each its own application on the cluster


def test_dev_up_with_spark_workers_then_status_and_down(tmp_path):
    """`lakeline dev up --spark-workers 2` in a state folder of its own: the workers register, stack.env points
    Spark at the master (mode 0600), every port is on loopback, and `dev down` stops every daemon it started."""
    import json

    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELINE_", "AWS_"))}
    env["LAKELINE_STATE_DIR"] = str(state)

    def dev(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lakeline", "dev", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    up = dev("up", "--spark-workers", "2")
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        status = json.loads(dev("status").stdout)
        assert status["running"] and status["spark_workers_alive"] == 2, status
        env_file = state / "stack" / "stack.env"
        assert f"LAKELINE_SPARK_MASTER={status['spark_master_url']}" in env_file.read_text()
        assert env_file.stat().st_mode & 0o777 == 0o600
        daemons = [status["spark_master_pid"], *status["spark_worker_pids"]]
        assert _listening([psutil.Process(pid) for pid in daemons]) == {"127.0.0.1"}
        again = dev("up", "--spark-workers", "2")  # reused, not started twice
        assert again.returncode == 0 and json.loads(dev("status").stdout)["spark_master_pid"] == daemons[0]
    finally:
        down = dev("down")
    assert down.returncode == 0, down.stderr[-2000:]
    assert not any(pid_alive(pid) for pid in daemons)
    assert not (state / "stack" / "stack.env").exists()
