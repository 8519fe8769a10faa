"""Each DAG family run end to end with `dag.test()` against the real broker, moto S3 and Spark: the tasks launch
real `lakeline` commands, and the tests assert their effect, not just the run state."""

from __future__ import annotations

import time
from pathlib import Path

import pendulum
import pytest
import yaml

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.config import load_pipeline
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from maintenance import checkpoints
from tests.helpers import load_dag, pipeline_dict

pytestmark = pytest.mark.integration


@pytest.fixture
def pipeline_conf(conf_dir, monkeypatch):
    """Write one pipeline into a conf dir that the DAG files read (LAKELINE_CONF_DIR)."""
    (conf_dir / "pipelines").mkdir()
    monkeypatch.setenv("LAKELINE_CONF_DIR", str(conf_dir))

    def write(data: dict) -> Path:
        path = conf_dir / "pipelines" / f"{data['pipeline']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def _ingest(config, settings, spark):
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)


def test_checkpoint_backup_dag_makes_a_verifiable_backup(airflow_db, pipeline_conf, settings, spark):
    data = pipeline_dict("delta")
    config = load_pipeline(pipeline_conf(data))
    produce(config, settings, 1500, bad_ratio=0.01, seed=60)
    _ingest(config, settings, spark)
    run = load_dag(f"lakeline_checkpoint_backup__{config.pipeline}").test()
    assert run.state == "success"
    made = run.get_task_instance("backup").xcom_pull(task_ids="backup")
    fs, root = HadoopFS(spark), config.backup_location(settings)
    assert checkpoints.list_backups(fs, root) == [made["backup_id"]]
    report = checkpoints.verify(fs, root, made["backup_id"], None)
    assert report.ok and report.last_committed_batch == made["last_committed_batch"]
    verified = run.get_task_instance("verify").xcom_pull(task_ids="verify")
    # the task read the pipeline's commit record from the table (delta-rs, no JVM) and judged the backup by it
    assert verified["ok"] is True and verified["consistency"].startswith("consistent with the table"), verified


def test_freshness_dag_passes_when_fresh_and_fails_when_lag_breaches(airflow_db, pipeline_conf, settings, spark):
    data = {**pipeline_dict("iceberg"), "freshness": {"max_staleness": "1h", "max_lag_records": 100}}
    config = load_pipeline(pipeline_conf(data))
    produce(config, settings, 800, seed=61)
    _ingest(config, settings, spark)
    fresh = load_dag("lakeline_freshness").test()
    assert fresh.state == "success"
    [check] = [ti for ti in fresh.get_task_instances() if ti.task_id == "check"]
    assert check.state == "success"

    produce(config, settings, 500, seed=62)  # waiting in Kafka, not ingested
    stale = load_dag("lakeline_freshness").test()
    assert stale.state == "failed"
    [check] = [ti for ti in stale.get_task_instances() if ti.task_id == "check"]
    assert check.state == "failed"


@pytest.mark.soak  # ~9 min; the drill itself is covered by test_drill in the default run
def test_drill_dag_runs_setup_drill_teardown_and_reports(airflow_db, pipeline_conf, settings, spark):
    data = pipeline_dict("delta")
    config = load_pipeline(pipeline_conf(data))
    run = load_dag(f"lakeline_drill__{config.pipeline}").test(run_conf={"scenario": "lose-checkpoint", "events": 2000})
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"prepare": "success", "run_drill": "success", "remove": "success"}
    report = run.get_task_instance("run_drill").xcom_pull(task_ids="run_drill", key="report")
    assert report["passed"] and [s["scenario"] for s in report["scenarios"]] == ["lose-checkpoint"]
    scenario = report["scenarios"][0]
    assert scenario["duplicates"] == 0 and scenario["missing"] == 0 and scenario["recovery_seconds"] > 0
    # the drill ran with --keep; the teardown task removed the copy
    assert not HadoopFS(spark).exists(scenario["location"])
    removed = run.get_task_instance("remove").xcom_pull(task_ids="remove")
    assert removed["removed"] == ["lose-checkpoint"]


RETAIN_SECONDS = 60


def _table_conf(conf_dir, data: dict, compaction: dict) -> str:
    tables = conf_dir / "tables"
    tables.mkdir(exist_ok=True)
    window = f"{RETAIN_SECONDS}s"  # a test table: below the 1h floors, so the test can see retention delete
    (tables / f"{data['pipeline']}.yaml").write_text(yaml.safe_dump({
        "table": data["pipeline"], "pipeline": f"../pipelines/{data['pipeline']}.yaml", "compaction": compaction,
        "retention": {"retain": window, "min_retain": window, "orphan_older_than": window, "min_orphan_age": window,
                      "allow_short_windows": True}}))
    return data["pipeline"]


@pytest.mark.soak  # ~14 min of task processes; compaction itself is in test_maintenance's default tests
def test_compact_dag_is_interval_scoped_then_retain_dag_deletes_past_the_window(airflow_db, pipeline_conf,
                                                                              conf_dir, settings, spark):
    data = pipeline_dict("iceberg")
    data["source"]["max_offsets_per_trigger"] = 300  # many small files per day partition
    config = load_pipeline(pipeline_conf(data))
    name = _table_conf(conf_dir, data, {"min_small_files": 3, "small_file_ratio": 0.3, "hot_partition_window": "1s"})
    produce(config, settings, 2400, seed=63)
    _ingest(config, settings, spark)
    before = spark.table(f"{config.iceberg_identifier(settings)}.files").count()
    answer = sorted(spark.table(config.iceberg_identifier(settings)).select("event_id", "amount").collect())

    # A run whose data interval ends before every write decides as of that end: every partition was written
    # after it, so each one is hot and nothing is compacted.
    stale = load_dag(f"lakeline_compact__{name}").test(logical_date=pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC"))
    states = {ti.task_id: ti.state for ti in stale.get_task_instances()}
    assert stale.state == "success" and states["compact"] == "skipped", states
    plan = stale.get_task_instance("decide").xcom_pull(task_ids="decide")
    assert plan["partitions"] == [] and plan["interval"] == ["2025-12-31T23:30:00+00:00", "2026-01-01T00:30:00+00:00"]
    assert len(plan["skipped_by_policy"]) >= 2 and all("hot" in s["reason"] for s in plan["skipped_by_policy"]), plan
    assert spark.table(f"{config.iceberg_identifier(settings)}.files").count() == before

    # The hour that has just ended holds every write: each partition went quiet in it and is compacted.
    run = load_dag(f"lakeline_compact__{name}").test(logical_date=pendulum.now("UTC"))
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == dict.fromkeys(["decide", "needed", "compact"], "success")
    plan = run.get_task_instance("decide").xcom_pull(task_ids="decide")
    assert plan["dry_run"] and plan["partitions"] and plan["from_interval"] == len(plan["partitions"]), plan
    assert plan["health"]["files"] == before  # the table as decide measured it
    after = spark.table(f"{config.iceberg_identifier(settings)}.files").count()
    assert after < before, (before, after)
    after_compaction_removed = before - after
    assert sorted(spark.table(config.iceberg_identifier(settings)).select("event_id", "amount").collect()) == answer
    result = run.get_task_instance("compact").xcom_pull(task_ids="compact")
    assert result["table_files_now"] == after

    again = load_dag(f"lakeline_compact__{name}").test(logical_date=pendulum.now("UTC"))  # nothing left to do
    states = {ti.task_id: ti.state for ti in again.get_task_instances()}
    assert again.state == "success" and states["compact"] == "skipped"

    # The stream goes on after the compaction; then, once everything before the compaction is older than the
    # time-travel window, retention expires those snapshots and deletes the small files only they referenced.
    produce(config, settings, 100, seed=64)
    _ingest(config, settings, spark)
    ident = config.iceberg_identifier(settings)
    compacted_ms = spark.sql(f"SELECT max(unix_millis(committed_at)) FROM {ident}.snapshots "
                             "WHERE operation = 'replace'").first()[0]
    snapshots = spark.table(f"{ident}.snapshots").count()
    answer = sorted(spark.table(ident).select("event_id", "amount").collect())
    wait = compacted_ms / 1000 + RETAIN_SECONDS + 2 - time.time()
    if wait > 0:
        time.sleep(wait)  # retention is about wall-clock age: let the window pass

    retained = load_dag(f"lakeline_retain__{name}").test()
    assert retained.state == "success"
    report = retained.get_task_instance("retain").xcom_pull(task_ids="retain")
    assert report["dry_run"] is False and report["snapshots_expired"] >= 2, report
    deleted_data_files = int(report["files_deleted"][0].split()[0])
    assert deleted_data_files >= after_compaction_removed, report
    assert spark.table(f"{ident}.snapshots").count() == snapshots - report["snapshots_expired"]
    assert sorted(spark.table(ident).select("event_id", "amount").collect()) == answer
    # The snapshot with the newest commit record survives: the stream resumes exactly.
    assert reconcile(config, settings, spark).exact
