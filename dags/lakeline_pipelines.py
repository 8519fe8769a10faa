"""Airflow DAGs for every pipeline declared in conf/pipelines/*.yaml (adding a file adds its DAGs):

- lakeline_checkpoint_backup__<pipeline>: every 15 minutes (LAKELINE_DAG_BACKUP_EVERY), back up the checkpoint
  (keeps checkpoint.keep_backups), then verify the new backup.
- lakeline_drill__<pipeline>: weekly recovery drill; setup (clear leftovers of this run) -> drill
  -> teardown (always runs). The run fails when a scenario fails; the report is an XCom and in the log.
- lakeline_freshness: every 10 minutes, each pipeline's table against its `freshness:` SLA, judged as of the
  run's data interval end; fails (alerts) when any is stale.

Wiring only: the steps live in maintenance.tasks. At import this reads the YAML under LAKELINE_CONF_DIR (default
the repo's conf/) and nothing else: no network, no Spark, no Variables.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from ingest.config import load_pipeline
from ingest.settings import load_settings
from maintenance import tasks
from maintenance.pools import DRILL_POOL, STEPS_POOL

SETTINGS = load_settings()
CONF_DIR = Path(SETTINGS.conf_dir or Path(__file__).resolve().parent.parent / "conf")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
DEFAULT_ARGS = {"owner": "lakeline", "retries": 2, "retry_delay": timedelta(minutes=2),
                "retry_exponential_backoff": True}


def pipeline_configs() -> dict[str, tuple[str, str]]:
    """pipeline name -> (YAML path, source kind), for every valid pipeline file (an invalid one fails the import,
    naming it)."""
    out = {}
    for path in sorted((CONF_DIR / "pipelines").glob("*.yaml")):
        config = load_pipeline(path)
        out[config.pipeline] = (str(path), config.source.kind)
    return out


def backup_dag(name: str, path: str):
    @dag(dag_id=f"lakeline_checkpoint_backup__{name}", schedule=timedelta(minutes=SETTINGS.dag_backup_every),
         start_date=START, catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS,
         tags=["lakeline", "checkpoint", name],
         doc_md=f"Back up and verify the checkpoint of pipeline `{name}` (`{path}`).")
    def checkpoint_backup():
        @task(pool=STEPS_POOL)
        def backup() -> dict:
            return tasks.backup_checkpoint(path)

        @task(pool=STEPS_POOL)
        def verify(made: dict) -> dict:
            return tasks.verify_backup(path, made["backup_id"])

        verify(backup())

    return checkpoint_backup()


def drill_dag(name: str, path: str):
    @dag(dag_id=f"lakeline_drill__{name}", schedule="@weekly", start_date=START, catchup=False, max_active_runs=1,
         default_args={**DEFAULT_ARGS, "retries": 0}, tags=["lakeline", "drill", name],
         params={"scenario": Param("all", enum=["all", "kill", "lose-checkpoint", "corrupt-checkpoint",
                                                "stale-restore"]),
                 "events": Param(3000, type="integer", minimum=2000)},
         doc_md=f"Recovery drill of pipeline `{name}` on an isolated copy; see `lakeline drill --help`.")
    def recovery_drill():
        @task(pool=STEPS_POOL)
        def prepare() -> str:
            drill_id = tasks.drill_run_id(get_current_context()["dag_run"].run_id)
            tasks.drill_cleanup(path, drill_id)  # a retried run starts from a clean slate
            return drill_id

        @task(pool=DRILL_POOL)
        def run_drill(drill_id: str) -> dict:
            context = get_current_context()
            result = tasks.drill(path, drill_id, context["params"]["scenario"], int(context["params"]["events"]))
            context["ti"].xcom_push(key="report", value=result.output)
            if result.code != 0:
                failed = [s["scenario"] for s in (result.output or {}).get("scenarios", []) if not s["passed"]]
                raise AirflowFailException(f"drill {drill_id} failed: scenarios {failed or '?'}; report: "
                                           f"{result.output}")
            return result.output

        @task(pool=STEPS_POOL)
        def remove(drill_id: str) -> dict:
            return tasks.drill_cleanup(path, drill_id)

        drill_id = prepare()
        teardown = remove(drill_id)
        run_drill(drill_id) >> teardown.as_teardown(setups=drill_id)

    return recovery_drill()


def freshness_dag(pipelines: dict[str, str]):
    @dag(dag_id="lakeline_freshness", schedule="*/10 * * * *", start_date=START, catchup=False, max_active_runs=1,
         default_args={**DEFAULT_ARGS, "retries": 0}, tags=["lakeline", "freshness"],
         doc_md="Each pipeline's table against its `freshness:` SLA (pipeline YAML), as of the data interval end.")
    def freshness():
        @task(pool=STEPS_POOL)
        def check(path: str) -> dict:
            result = tasks.freshness(path, tasks.run_as_of(get_current_context()))
            if result.code != 0:
                raise AirflowFailException(f"STALE: {result.output['pipeline']}: "
                                           f"{'; '.join(result.output['problems'])}")
            return result.output

        check.expand(path=sorted(pipelines.values()))

    return freshness()


_CONFIGS = pipeline_configs()
PIPELINES = {name: path for name, (path, _kind) in _CONFIGS.items()}
for _name, (_path, _kind) in _CONFIGS.items():
    backup_dag(_name, _path)
    drill_dag(_name, _path)  # a Kafka pipeline's drills copy it onto a drill topic, a Kinesis one onto a stream
if PIPELINES:
    freshness_dag(PIPELINES)
