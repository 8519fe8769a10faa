"""Maintenance yields to the stream. Lakeline's maintenance runs as its own process (`lakeline compact|retain|health
|checkpoint backup`, by hand or as an Airflow task), never inside the streaming application, so the means are the
process's: a lower CPU priority taken before Spark starts (the driver JVM and its Python workers inherit it), and
fewer cores for its Spark. Compaction then slows down, not the stream; `max_bytes_per_run` in the table file bounds
one run's work, the rest waits for the next run.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.settings import Settings

log = logging.getLogger(__name__)


def lower_priority(nice: int) -> int:
    """Raise this process's niceness to `nice` if it is lower (never raises its priority); the niceness now."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > current:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError as exc:  # a sandbox that forbids it: run at the priority given
            log.warning(f"maintenance priority not lowered to nice {nice}: {exc}")
            return current
    return os.getpriority(os.PRIO_PROCESS, 0)


def niced(nice: int):
    """A Popen `preexec_fn` that starts the child at niceness `nice` or lower priority (nothing but system calls:
    it runs between fork and exec)."""

    def lower() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
        except OSError:
            pass

    return lower


# Delta's VACUUM lists the table's folders in this many Spark tasks (Spark's default, 10,000, is sized for big
# clusters): on a 2-core box 10,000 near-empty tasks took 73 s of a dry run that takes 4 s with 8.
LISTING_TASKS_PER_CORE = 8
CLUSTER_LISTING_TASKS = 64


def spark_defaults(settings: "Settings") -> dict[str, str]:
    """Spark settings of a maintenance command's session: `maintenance_cores` cores (local[N] on a local master;
    spark.cores.max on a cluster only when set, a cluster's scheduler shares its cores already), and file listing
    in tasks sized to them. The operator's LAKELINE_SPARK_CONF still wins over these."""
    cores = settings.maintenance_cores
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    if settings.spark_master.startswith("local"):
        return {"spark.master": f"local[{cores}]", listing: str(cores * LISTING_TASKS_PER_CORE)}
    if "maintenance_cores" in settings.model_fields_set:
        return {"spark.cores.max": str(cores), listing: str(cores * LISTING_TASKS_PER_CORE)}
    return {listing: str(CLUSTER_LISTING_TASKS)}


def yield_to_streams(settings: "Settings") -> dict[str, str]:
    """Lower this process's priority (before Spark starts) and return the Spark defaults for its session."""
    if settings.maintenance_nice:
        lower_priority(settings.maintenance_nice)
    return spark_defaults(settings)
