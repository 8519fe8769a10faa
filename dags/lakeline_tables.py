"""Airflow DAGs for every maintained table declared in conf/tables/*.yaml (adding a file adds its DAGs):

- lakeline_compact__<table>: hourly (LAKELINE_DAG_COMPACT_EVERY minutes), each run standing for the period that
  ended. decide (the table's health and the policy's plan, a dry run) -> compact (only when the plan selects
  partitions; its result counts the files there after, the stream's included). Only compact starts Spark (decide
  measures through the table's own library where it can), so maintenance on a small box leaves the cores to the
  stream. Partition-scoped by the
  run's data interval: decisions are made as of its end (partitions written after it are hot), the partitions
  that went quiet in it come first, then any backlog still over threshold (so a byte budget or a missed run
  never leaves a partition behind). A retry decides the same way and finds what the first try compacted under
  threshold.
- lakeline_bound__<table>, for tables whose format rewrites without Spark (Delta on S3, Iceberg): every
  LAKELINE_DAG_BOUND_EVERY minutes (5), the hot partitions holding half the policy's max_files_per_partition
  rewritten without Spark (seconds, where a Spark task beside the stream takes minutes), so the bound holds
  between compaction runs. Its pool lakeline_bound has a slot per table, so no backup or compaction is ever ahead
  of it; a conflict with the compaction's own rewrite of the partition is retried.
- lakeline_retain__<table>: runs after each successful compaction of the table (scheduled on the compaction's
  asset) and daily at 03:30 UTC in any case: VACUUM / expire_snapshots + orphan removal with the table file's
  guards. Its task and the compact task
  share the one-slot pool lakeline_table__<table>, so a long retention and the next hour's compaction never
  overlap. decide and needed take the lakeline_steps slot (maintenance.pools; create the pools with
  `bash infra/airflow.sh create-pools`, dags/README.md).

Wiring only: the steps live in maintenance.tasks. At import this reads the YAML under LAKELINE_CONF_DIR and
nothing else: no network, no Spark, no Variables.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, dag, get_current_context, task

from ingest.settings import compact_cron, load_settings
from maintenance import tasks
from maintenance.pools import BOUND_POOL, STEPS_POOL, table_files, table_pool

SETTINGS = load_settings()
CONF_DIR = Path(SETTINGS.conf_dir or Path(__file__).resolve().parent.parent / "conf")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# Every period (hourly by default), each run standing for the period that just ended: [run time - period, run
# time). (Plain "@hourly" is a trigger timetable in Airflow 3, whose runs have a zero-length data interval.)
EVERY = timedelta(minutes=SETTINGS.dag_compact_every)
COMPACT_SCHEDULE = CronTriggerTimetable(compact_cron(SETTINGS.dag_compact_every), timezone="UTC", interval=EVERY)
DEFAULT_ARGS = {"owner": "lakeline", "retries": 2, "retry_delay": timedelta(minutes=2),
                "retry_exponential_backoff": True}


def compacted_asset(name: str) -> Asset:
    return Asset(name=f"lakeline_compacted__{name}", uri=f"lakeline://tables/{name}/compacted")


def _as_of() -> str:
    return tasks.run_as_of(get_current_context()).isoformat()


def _interval() -> tuple[str, str] | None:
    return tasks.run_interval(get_current_context())


def compact_dag(name: str, path: str):
    @dag(dag_id=f"lakeline_compact__{name}", schedule=COMPACT_SCHEDULE, start_date=START, catchup=False,
         max_active_runs=1, default_args=DEFAULT_ARGS, tags=["lakeline", "compaction", name],
         doc_md=f"Policy-driven compaction of table `{name}` (`{path}`); see `lakeline compact --help`.")
    def compaction():
        @task(pool=STEPS_POOL)
        def decide() -> dict:
            plan = tasks.compact(path, CONF_DIR, _as_of(), dry_run=True, interval=_interval())
            print(tasks.health_line(plan.get("health") or {}))
            print(f"decision for interval {plan.get('interval')}: {len(plan.get('partitions', []))} partition(s) to "
                  f"compact ({plan.get('from_interval', 0)} went quiet in the interval, {plan.get('backlog', 0)} "
                  f"backlog, {plan.get('hot_over_bound', 0)} hot over max_files_per_partition), "
                  f"{len(plan.get('skipped_by_policy', []))} left alone (under threshold, hot or budget)")
            return plan

        @task.short_circuit(pool=STEPS_POOL)
        def needed(plan: dict) -> bool:
            return bool(plan.get("partitions"))

        @task(outlets=[compacted_asset(name)], pool=table_pool(name))
        def compact(_plan: dict) -> dict:
            return tasks.compact(path, CONF_DIR, _as_of(), dry_run=False, interval=_interval())

        plan = decide()
        needed(plan) >> compact(plan)

    return compaction()


def bound_dag(name: str, path: str):
    @dag(dag_id=f"lakeline_bound__{name}", schedule=timedelta(minutes=SETTINGS.dag_bound_every), start_date=START,
         catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS, tags=["lakeline", "compaction", name],
         doc_md=f"The files-per-partition bound of table `{name}` (`{path}`); see `lakeline compact --help`.")
    def bounding():
        @task(pool=BOUND_POOL)
        def bound() -> dict:
            return tasks.bound(path, CONF_DIR, _as_of())

        bound()

    return bounding()


def retain_dag(name: str, path: str):
    # After each compaction, and daily in any case: a table that is never compacted (still written, or under
    # threshold) must not keep its old versions for ever.
    schedule = AssetOrTimeSchedule(assets=[compacted_asset(name)],
                                   timetable=CronTriggerTimetable("30 3 * * *", timezone="UTC"))

    @dag(dag_id=f"lakeline_retain__{name}", schedule=schedule, start_date=START, catchup=False,
         max_active_runs=1, default_args=DEFAULT_ARGS, tags=["lakeline", "retention", name],
         doc_md=f"Retention for table `{name}` after its compaction; see `lakeline retain --help`.")
    def retention():
        @task(pool=table_pool(name))
        def retain() -> dict:
            return tasks.retain(path, CONF_DIR, _as_of())

        retain()

    return retention()


for _file in table_files(CONF_DIR):  # an invalid table file fails the import, naming it
    compact_dag(_file.table.name, _file.path)
    if _file.bounded:  # elsewhere the compaction run keeps the bound (Spark's rewrite)
        bound_dag(_file.table.name, _file.path)
    retain_dag(_file.table.name, _file.path)
