"""The Airflow pools every Lakeline DAG task runs in, so a files-bound run never waits behind other work.

Airflow 3's LocalExecutor accepts every task the scheduler hands it and starts them in arrival order as its
`parallelism` workers free (apache/airflow#71914), so the pools are what limits. Every Lakeline task takes a slot
of a bounded pool here; with the executor's parallelism at least `slots_needed()`, whatever a pool lets through
starts at once, and the files bound has slots of its own: no backup, decision or compaction is ahead of it.

- `lakeline_table__<table>` (1 slot each): the table's compaction and retention, the tasks that start Spark, never
  at the same time.
- `lakeline_bound` (a slot per table with a files-bound DAG): the files bound, seconds to a minute without Spark.
- `lakeline_steps` (1 slot): the short JVM-free steps: compaction decisions, checkpoint backups and their
  verification, freshness checks, a drill's set-up and teardown.
- `lakeline_drill` (1 slot): a recovery drill, one at a time (it starts a pipeline on a copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ingest.formats import format_for
from maintenance.policy import MaintainedTable, load_table

BOUND_POOL = "lakeline_bound"
STEPS_POOL = "lakeline_steps"
DRILL_POOL = "lakeline_drill"


@dataclass(frozen=True)
class Pool:
    name: str
    slots: int
    description: str


@dataclass(frozen=True)
class TableFile:
    table: MaintainedTable
    path: str
    bounded: bool  # its format rewrites without Spark, so it has a files-bound DAG


def table_pool(table: str) -> str:
    """The one-slot pool that keeps a table's compaction and retention from running at the same time."""
    return f"lakeline_table__{table}"


def table_files(conf_dir: Path) -> list[TableFile]:
    """Every table file under conf_dir/tables, in name order (an invalid one raises ConfigError naming it)."""
    return [TableFile(table, str(path), format_for(table.format).rewrites_without_spark)
            for path in sorted((conf_dir / "tables").glob("*.yaml"))
            for table in [load_table(str(path), conf_dir)]]


def pools(conf_dir: Path) -> list[Pool]:
    """The pools the DAGs generated from conf_dir use, with their slots."""
    tables = table_files(conf_dir)
    return [*(Pool(table_pool(t.table.name), 1, f"Lakeline: compaction and retention of {t.table.name}, one at "
                   "a time") for t in tables),
            Pool(BOUND_POOL, max(1, sum(t.bounded for t in tables)), "Lakeline: the files bound, a slot per table"),
            Pool(STEPS_POOL, 1, "Lakeline: decisions, checkpoint backups and checks (no Spark)"),
            Pool(DRILL_POOL, 1, "Lakeline: recovery drills, one at a time")]


def slots_needed(pool_list: list[Pool]) -> int:
    """The executor parallelism at which every pooled task the scheduler hands over starts at once."""
    return sum(p.slots for p in pool_list)


def import_file(pool_list: list[Pool]) -> dict:
    """The pools as `airflow pools import` reads them."""
    return {p.name: {"slots": p.slots, "description": p.description, "include_deferred": False} for p in pool_list}
