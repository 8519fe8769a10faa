"""Many pipelines in one Spark application (`lakeline ingest --pipeline a.yaml --pipeline b.yaml`, or a folder).

Each pipeline is its own streaming query in the one SparkSession, in a fair-scheduler pool of its own name, with
its own checkpoint, host lock, lease, commit records and run events: everything `Pipeline` does alone. A supervisor
thread per pipeline runs it; when it fails (a topic deleted, a table it cannot write), the failure is reported
(`pipeline_failed`) and the pipeline is started again after a backoff (5 s doubling to 5 min), while the others go on.
A pipeline another driver has taken over (fenced) is not restarted. SIGTERM/SIGINT stop them all after their
current batches; a pipeline that failed and has not committed a batch since is reported failed (exit 1).
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.errors import DriverFenced, DriverLockHeld, LakelineError
from ingest.events import PipelineFailed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.config import PipelineConfig
    from ingest.events import Events
    from ingest.pipeline import Pipeline
    from ingest.settings import Settings

RESTART_FIRST_SECONDS = 5.0
RESTART_CAP_SECONDS = 300.0
# An available-now run ends; a pipeline that keeps failing in it gets this many tries before it is reported failed.
AVAILABLE_NOW_TRIES = 3


@dataclass
class Outcome:
    """How one pipeline of the application ended."""

    pipeline: str
    ok: bool
    failures: int = 0
    error: str | None = None


class Supervisor(threading.Thread):
    """Runs one pipeline in the shared session until it ends, starting it again after a failure."""

    def __init__(self, config: "PipelineConfig", settings: "Settings", spark: "SparkSession", trigger: str | None,
                 events: "Events", stop: threading.Event):
        super().__init__(name=f"lakeline-{config.pipeline}", daemon=True)
        self.config, self.settings, self.spark, self.trigger = config, settings, spark, trigger
        self.events, self.stop = events, stop
        self.current: "Pipeline | None" = None
        self.outcome = Outcome(config.pipeline, ok=False)

    def run(self) -> None:
        from ingest.events import pipeline_context

        with pipeline_context(self.config.pipeline):
            self._supervise()

    def _supervise(self) -> None:
        from ingest.config import parse_trigger
        from ingest.lease import pipeline_lease
        from ingest.ownership import drive
        from ingest.pipeline import Pipeline

        available_now = parse_trigger(self.trigger or self.config.trigger)[0] == "available-now"
        # Jobs this thread's query starts run in the pipeline's own pool (a query's thread inherits it).
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", self.config.pipeline)
        while not self.stop.is_set():
            lease = pipeline_lease(self.config.pipeline, self.config.checkpoint_location(self.settings),
                                   self.settings)
            self.current = Pipeline(self.config, self.settings, spark=self.spark, trigger=self.trigger,
                                    events=self.events, lease=lease)
            if self.stop.is_set():
                break
            try:
                summary = None
                with drive(self.current) as driving:
                    if driving:
                        summary = self.current.run(install_signal_handlers=False)
                if self.outcome.failures and self.stop.is_set() and summary is not None and not summary.batches:
                    # Stopped while it was being started again: nothing shows that it recovered.
                    self.outcome.error = f"{self.outcome.error} (stopped before a batch committed after the restart)"
                    return
                self.outcome.ok = True
                return
            except (DriverFenced, DriverLockHeld) as exc:  # another driver has the pipeline: not ours to restart
                self._failed(exc, retry_in=None)
                return
            except Exception as exc:  # noqa: BLE001 - reported, then the pipeline starts again; the others go on
                self.outcome.failures += 1
                if available_now and self.outcome.failures >= AVAILABLE_NOW_TRIES:
                    self._failed(exc, retry_in=None)
                    return
                delay = min(RESTART_CAP_SECONDS, RESTART_FIRST_SECONDS * 2 ** (self.outcome.failures - 1))
                self._failed(exc, retry_in=delay)
                if self.stop.wait(delay):
                    return

    def _failed(self, exc: BaseException, retry_in: float | None) -> None:
        self.outcome.error = f"{type(exc).__name__}: {exc}"
        self.events.emit(PipelineFailed(pipeline=self.config.pipeline, error=self.outcome.error[:2000],
                                        failures=max(1, self.outcome.failures), retry_in=retry_in))

    def request_stop(self) -> None:
        if self.current is not None:
            self.current.request_stop()


def run_pipelines(configs: "list[PipelineConfig]", settings: "Settings", trigger: str | None,
                  events: "Events", spark: "SparkSession | None" = None) -> list[Outcome]:
    """Run `configs` as streaming queries of one Spark application until each ends (available-now) or until
    SIGTERM/SIGINT; returns how each ended."""
    from ingest.pipeline import PIPELINE_SPARK_DEFAULTS
    from ingest.spark import build_spark, pass_jvm_sigterm_to_driver

    names = [c.pipeline for c in configs]
    if len(set(names)) != len(names):
        raise LakelineError(f"the same pipeline is named twice: {sorted(n for n in names if names.count(n) > 1)}")
    if spark is None:
        spark = build_spark(settings, app_name=f"lakeline-{len(configs)}-pipelines",
                            defaults={**PIPELINE_SPARK_DEFAULTS, "spark.scheduler.mode": "FAIR"})
    stop = threading.Event()
    supervisors = [Supervisor(c, settings, spark, trigger, events, stop) for c in configs]

    def stop_all(*_args) -> None:
        stop.set()
        for supervisor in supervisors:
            supervisor.request_stop()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        pass_jvm_sigterm_to_driver(spark)
        previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for supervisor in supervisors:
            supervisor.start()
        for supervisor in supervisors:
            while supervisor.is_alive():
                supervisor.join(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return [s.outcome for s in supervisors]
