"""The DAG files import cleanly, quickly, without network, and generate the expected DAG ids from conf/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Imports the DAGs folder in a fresh interpreter with every socket connection refused and no stack endpoints.
_PROBE = """
import json, socket, sys, time
def refuse(*args, **kwargs):
    raise OSError("network access at DAG import time")
socket.socket.connect = refuse
socket.create_connection = refuse
started = time.monotonic()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
                  "seconds": time.monotonic() - started, "tasks": {d: sorted(bag.dags[d].task_ids) for d in bag.dags},
                  "pools": {d: {t.task_id: t.pool for t in bag.dags[d].tasks} for d in bag.dags},
                  "schedules": {d: [str(getattr(bag.dags[d].timetable, a, None)) for a in ("expression", "interval",
                                                                                         "delta")] for d in bag.dags}}))
"""


def _parse(conf_dir: Path | None = None, **settings: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELINE_")}
    env["LAKELINE_STATE_DIR"] = "/nonexistent/lakeline-state"  # no stack.env to read
    env.update(settings)
    if conf_dir:
        env["LAKELINE_CONF_DIR"] = str(conf_dir)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "dags")], capture_output=True, text=True,
                         env=env, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dagbag_has_no_import_errors_and_expected_ids():
    result = _parse()
    assert result["errors"] == {}
    expected = {f"lakeline_{kind}__{name}" for kind in ("checkpoint_backup", "drill", "compact", "retain")
                for name in ("orders_delta", "orders_iceberg")} | {"lakeline_freshness", "lakeline_bound__orders_delta",
                                                                    "lakeline_bound__orders_iceberg"}
    assert expected <= set(result["dags"])
    assert result["tasks"]["lakeline_drill__orders_delta"] == ["prepare", "remove", "run_drill"]
    assert result["tasks"]["lakeline_checkpoint_backup__orders_delta"] == ["backup", "verify"]
    # decide measures and plans (no JVM where the table's library reads it), compact rewrites with Spark
    assert result["tasks"]["lakeline_compact__orders_iceberg"] == ["compact", "decide", "needed"]
    assert result["tasks"]["lakeline_retain__orders_iceberg"] == ["retain"]
    # the files bound: never Spark, in a pool of its own (no long Spark compaction, no backup ahead of it)
    pools = result["pools"]
    for name in ("orders_delta", "orders_iceberg"):
        assert result["tasks"][f"lakeline_bound__{name}"] == ["bound"]
        assert pools[f"lakeline_bound__{name}"]["bound"] == "lakeline_bound"
    assert result["schedules"]["lakeline_bound__orders_delta"][2] == "0:05:00"
    # a table's compaction and retention share its one-slot pool; the read-only steps do not take the slot
    assert pools["lakeline_compact__orders_iceberg"]["compact"] == pools["lakeline_retain__orders_iceberg"][
        "retain"] == "lakeline_table__orders_iceberg" != pools["lakeline_compact__orders_delta"]["compact"]
    assert pools["lakeline_compact__orders_iceberg"]["decide"] == "lakeline_steps"
    assert pools["lakeline_checkpoint_backup__orders_delta"] == {"backup": "lakeline_steps", "verify": "lakeline_steps"}
    # by default hourly compaction runs standing for the hour that ended, and backups every 15 minutes
    assert result["schedules"]["lakeline_compact__orders_delta"][:2] == ["0 * * * *", "1:00:00"]
    assert result["schedules"]["lakeline_checkpoint_backup__orders_delta"][2] == "0:15:00"
    print(f"DAG folder parsed in {result['seconds']:.2f}s")
    assert result["seconds"] < 30


def test_a_compressed_schedule_is_a_setting_and_each_run_stands_for_its_period():
    result = _parse(LAKELINE_DAG_COMPACT_EVERY="5", LAKELINE_DAG_BACKUP_EVERY="2", LAKELINE_DAG_BOUND_EVERY="1")
    assert result["errors"] == {}
    assert result["schedules"]["lakeline_bound__orders_delta"][2] == "0:01:00"
    for table in ("orders_delta", "orders_iceberg"):
        assert result["schedules"][f"lakeline_compact__{table}"][:2] == ["*/5 * * * *", "0:05:00"]
    assert result["schedules"]["lakeline_checkpoint_backup__orders_iceberg"][2] == "0:02:00"


def test_a_compaction_period_the_clock_cannot_align_is_an_import_error_naming_the_variable():
    errors = _parse(LAKELINE_DAG_COMPACT_EVERY="7")["errors"]
    assert errors and all("LAKELINE_DAG_COMPACT_EVERY='7'" in error for error in errors.values())


def test_compact_cron_aligns_to_the_hour_or_the_day():
    from ingest.errors import ConfigError
    from ingest.settings import compact_cron, settings_from

    assert [compact_cron(m) for m in (1, 5, 15, 60, 120, 360, 1440)] == [
        "*/1 * * * *", "*/5 * * * *", "*/15 * * * *", "0 * * * *", "0 */2 * * *", "0 */6 * * *", "0 0 * * *"]
    for key, value in [("LAKELINE_DAG_COMPACT_EVERY", "90"), ("LAKELINE_DAG_COMPACT_EVERY", "0"),
                       ("LAKELINE_DAG_COMPACT_EVERY", "soon"), ("LAKELINE_DAG_BACKUP_EVERY", "0")]:
        with pytest.raises(ConfigError, match=f"{key}='{value}'"):
            settings_from({key: value})


def test_adding_a_pipeline_file_adds_its_dags(tmp_path):
    (tmp_path / "pipelines").mkdir()
    source = (REPO / "conf" / "pipelines" / "orders_delta.yaml").read_text()
    (tmp_path / "pipelines" / "clicks.yaml").write_text(source.replace("pipeline: orders_delta", "pipeline: clicks"))
    kinesis = (REPO / "conf" / "examples" / "orders_kinesis_delta.yaml").read_text()
    (tmp_path / "pipelines" / "taps.yaml").write_text(kinesis.replace("pipeline: orders_kinesis", "pipeline: taps"))
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "clicks.yaml").write_text("table: clicks\npipeline: ../pipelines/clicks.yaml\n")
    result = _parse(tmp_path)
    assert result["errors"] == {}
    assert {"lakeline_checkpoint_backup__clicks", "lakeline_drill__clicks", "lakeline_freshness",
            "lakeline_compact__clicks", "lakeline_retain__clicks"} <= set(result["dags"])
    assert not [d for d in result["dags"] if d.endswith("orders_delta")]
    # A Kinesis pipeline gets checkpoint backups, freshness and drills (onto a drill stream of its own) too.
    assert {"lakeline_checkpoint_backup__taps", "lakeline_drill__taps"} <= set(result["dags"])


def test_an_invalid_pipeline_file_is_an_import_error_naming_file_and_key(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "broken.yaml").write_text("pipeline: broken\nsource: {kind: kafka}\n")
    result = _parse(tmp_path)
    assert len(result["errors"]) == 1, result["errors"]
    [(path, error)] = result["errors"].items()
    assert path.endswith("lakeline_pipelines.py") and "broken.yaml" in error and "source" in error


@pytest.mark.parametrize("launcher,expect", [("local", "-m"), ("spark-submit", "--master")])
def test_task_launcher_command_lines(launcher, expect):
    from maintenance.tasks import lakeline_command

    env = {"LAKELINE_TASK_LAUNCHER": launcher, "LAKELINE_SPARK_MASTER": "spark://m:7077"}
    command = lakeline_command(["freshness", "--pipeline", "p.yaml"], env)
    assert expect in command and command[-3:] == ["freshness", "--pipeline", "p.yaml"]
    if launcher == "spark-submit":
        assert command[command.index("--master") + 1] == "spark://m:7077"
        assert command[-4].endswith("lakeline/__main__.py")
        # the driver JVM spark-submit starts has the connector jars from the start
        assert "lakeline-spark-runtime.jar" in command[command.index("--driver-class-path") + 1]
        # and its logging: library noise off from the JVM's start
        assert "spark-log4j2-quiet.properties" in command[command.index("--driver-java-options") + 1]


def test_spark_submit_launcher_needs_a_master():
    from ingest.errors import ConfigError
    from maintenance.tasks import lakeline_command

    with pytest.raises(ConfigError, match="LAKELINE_SPARK_MASTER"):
        lakeline_command(["freshness"], {"LAKELINE_TASK_LAUNCHER": "spark-submit"})


def test_run_interval_and_as_of_never_reach_into_the_future():
    from datetime import UTC, datetime, timedelta

    from maintenance.tasks import run_as_of, run_interval

    class Lazy:  # Airflow passes some context values as lazy proxies
        def __init__(self, value):
            self.__wrapped__ = value

    end = datetime(2026, 11, 22, 11, tzinfo=UTC)
    start = end - timedelta(hours=1)
    context = {"data_interval_start": Lazy(start), "data_interval_end": Lazy(end)}
    assert run_interval(context) == (start.isoformat(), end.isoformat())
    assert run_as_of(context) == end
    assert run_interval({"data_interval_start": end, "data_interval_end": end}) is None  # zero-length interval
    future = datetime.now(UTC) + timedelta(hours=3)  # a manual run given a future logical date
    ahead = {"data_interval_start": future - timedelta(hours=1), "data_interval_end": future}
    assert run_interval(ahead) is None and run_as_of(ahead) <= datetime.now(UTC)
    straddling = {"data_interval_start": datetime.now(UTC) - timedelta(minutes=30), "data_interval_end": future}
    assert datetime.fromisoformat(run_interval(straddling)[1]) <= datetime.now(UTC)


def test_drill_run_id_is_stable_and_valid():
    from maintenance.tasks import drill_run_id

    first = drill_run_id("scheduled__2026-11-22T00:00:00+00:00")
    assert first == drill_run_id("scheduled__2026-11-22T00:00:00+00:00") and first.isalnum() and first.islower()
    assert first != drill_run_id("manual__2026-11-22T00:00:00+00:00")


def test_run_lakeline_parses_json_and_logs_the_error_of_a_failing_command(tmp_path, caplog):
    from ingest.errors import TaskFailed
    from maintenance.tasks import run_lakeline

    result = run_lakeline(["check-config", "--pipeline", str(REPO / "conf/pipelines/orders_delta.yaml")])
    assert result.code == 0 and result.output["pipeline"]["pipeline"] == "orders_delta"
    caplog.set_level("INFO", logger="maintenance.tasks")
    with pytest.raises(TaskFailed, match="exited 2") as failed:
        run_lakeline(["check-config", "--pipeline", str(tmp_path / "missing.yaml")])
    logged = [r.getMessage() for r in caplog.records if r.name == "maintenance.tasks"]
    assert any("missing.yaml" in line for line in logged) and "missing.yaml" in str(failed.value)


def test_every_task_takes_a_slot_of_a_lakeline_pool_and_the_bound_has_one_per_table(tmp_path):
    """With the executor's parallelism at slots_needed(), whatever a pool lets through starts at once: no task sits
    in default_pool, where it could fill the executor's queue ahead of a files-bound run."""
    from maintenance.pools import BOUND_POOL, import_file, pools, slots_needed

    shipped = REPO / "conf"
    declared = {p.name: p.slots for p in pools(shipped)}
    result = _parse()
    used = {pool for tasks in result["pools"].values() for pool in tasks.values()}
    assert used <= set(declared), used - set(declared)
    bounded = [d for d in result["dags"] if d.startswith("lakeline_bound__")]
    assert declared[BOUND_POOL] == len(bounded) == 2
    assert all(declared[f"lakeline_table__{t}"] == 1 for t in ("orders_delta", "orders_iceberg"))
    assert slots_needed(pools(shipped)) == sum(declared.values())
    assert import_file(pools(shipped))[BOUND_POOL]["slots"] == 2
    # a table added to conf/ adds its table pool and a bound slot
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "clicks.yaml").write_text(
        (shipped / "pipelines" / "orders_delta.yaml").read_text().replace("pipeline: orders_delta", "pipeline: clicks"))
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "clicks.yaml").write_text("table: clicks\npipeline: ../pipelines/clicks.yaml\n")
    names = {p.name: p.slots for p in pools(tmp_path)}
    assert names["lakeline_table__clicks"] == 1 and names[BOUND_POOL] == 1
