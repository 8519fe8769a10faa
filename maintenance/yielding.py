"""Maintenance yields to the stream. Lakeline's maintenance runs as its own process (`lakeline compact|retain|health
|checkpoint backup`, by hand or as an Airflow task), never inside the streaming application, so the means are the
process's: a lower CPU priority taken before Spark starts (the driver JVM and its Python workers inherit it), and
fewer cores for its Spark. Compaction then slows down, not the stream; `max_bytes_per_run` in the table file bounds
one run's work, the rest waits for the next run.
"""

from __future__ import annotations

import logging
import os
import signal
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


AUTOGROUP = "/proc/self/autogroup"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl():
    """libc's prctl, looked up before a fork (None where there is none)."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def yielding_child(nice: int):
    """A Popen `preexec_fn` for a maintenance command started by a task: the child runs in a session of its own at
    niceness `nice` (never raising its priority), that session's autogroup at `nice` too, and it gets SIGTERM when
    the task process that started it dies.

    Linux with autogroup scheduling (the default on most distributions) shares the CPU between sessions first and
    ranks by niceness only within one: a niced command in the Airflow scheduler's session still takes as much CPU
    as a stream in another session. Its own session's autogroup at `nice` weighs it as a niced process against
    every other session; the session is its own, so the scheduler's priority is left alone. Nothing but system
    calls runs here (between fork and exec)."""
    prctl, parent = _prctl(), os.getpid()

    def start() -> None:
        os.setsid()
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the task died before the line above: nobody waits for this command
                os._exit(1)
        try:
            os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
        except OSError:
            pass
        try:
            fd = os.open(AUTOGROUP, os.O_WRONLY)
        except OSError:  # no autogroup scheduling in this kernel: the niceness above is what ranks it
            return
        try:
            os.write(fd, str(nice).encode())
        except OSError:
            pass
        finally:
            os.close(fd)

    return start


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
