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
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def autogroup_nice(path: str = AUTOGROUP) -> int | None:
    """The niceness of this process's autogroup (None: no autogroup scheduling here)."""
    try:
        with open(path) as handle:  # "/autogroup-123 nice 10"
            return int(handle.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def set_autogroup_nice(nice: int, path: str = AUTOGROUP) -> bool:
    """Set this session's autogroup niceness (0 and above need no privilege). False when refused."""
    try:
        with open(path, "w") as handle:
            handle.write(str(nice))
        return True
    except OSError:
        return False


def spark_jobs_running(spark: "SparkSession") -> Callable[[], bool]:
    """Whether the session has a Spark job running now."""
    tracker = spark.sparkContext.statusTracker()
    return lambda: len(tracker.getActiveJobsIds()) > 0


@contextmanager
def commits_at_stream_weight(jobs_running: Callable[[], bool], poll_s: float = 0.25,
                             path: str = AUTOGROUP) -> Iterator[None]:
    """Around a compaction commit: once the block's Spark jobs have run and none runs, the block is committing
    (the table format's optimistic commit on the driver, attempted again whenever the stream committed first),
    and this session's autogroup runs at nice 0, the stream's weight, until a job runs again or the block ends.

    At maintenance weight on a busy host one Iceberg commit attempt took 1-3 s against a stream committing every
    1.4 s, and lost every race: ten attempts, then the whole rewrite again. The commit is short; the rewrite before
    it still yields. Only in a session of its own whose autogroup is niced (an Airflow task's command,
    `yielding_child`): a command run by hand shares its shell's autogroup, which is left alone."""
    base = autogroup_nice(path) if os.getsid(0) == os.getpid() else None
    if not base:
        yield
        return
    stop = threading.Event()

    def watch() -> None:
        ran = raised = False
        while not stop.wait(poll_s):
            try:
                running = jobs_running()
            except Exception:  # noqa: BLE001 - the session is going away: the block's own error says why
                return
            ran = ran or running
            committing = ran and not running
            if committing != raised and set_autogroup_nice(0 if committing else base, path):
                raised = committing

    watcher = threading.Thread(target=watch, name="commit-weight", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        set_autogroup_nice(base, path)


@contextmanager
def at_stream_weight(path: str = AUTOGROUP) -> Iterator[None]:
    """The block at the stream's weight (this session's autogroup at nice 0): a commit made without Spark, which
    races the stream's own commits to the table (pyiceberg's rewrite and its retries). As
    `commits_at_stream_weight`, only in a session of its own whose autogroup is niced."""
    base = autogroup_nice(path) if os.getsid(0) == os.getpid() else None
    if not base or not set_autogroup_nice(0, path):
        yield
        return
    try:
        yield
    finally:
        set_autogroup_nice(base, path)


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


def bound_nice(settings: "Settings") -> int:
    """The niceness of the files-bound command: `bound_nice`, never above the other maintenance's."""
    return min(settings.bound_nice, settings.maintenance_nice)


def yield_to_streams(settings: "Settings", nice: int | None = None) -> dict[str, str]:
    """Lower this process's priority to `nice` (default `maintenance_nice`) before Spark starts, and return the
    Spark defaults for its session."""
    nice = settings.maintenance_nice if nice is None else nice
    if nice:
        lower_priority(nice)
    return spark_defaults(settings)
