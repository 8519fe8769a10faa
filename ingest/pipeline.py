"""The streaming pipeline's run loop: source -> decode -> (table, dead-letter table), exactly once.

A run starts (ingest.startup: compare the checkpoint with the tables' recorded offsets, resume or rebuild), starts
the streaming query whose foreachBatch body is the commit protocol (ingest.batch), and then waits: for the
available-now backlog to end, or for SIGTERM/SIGINT (stop after the current batch), rewriting a heartbeat file
meanwhile. What happens is reported as run events (ingest.events), never as text to parse.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.batch import BatchCommitter, BatchReport, interruptions_kept_short
from ingest.checkpoint import HEARTBEAT_FILE, HEARTBEAT_SECONDS, StartPlan
from ingest.config import PipelineConfig, parse_trigger
from ingest.errors import DriverFenced, LakelineError
from ingest.events import Events, HeartbeatFailed, HumanLines, LeaseLost, RunFinished, StopRequested
from ingest.failures import describe as describe_failure
from ingest.formats import format_for
from ingest.settings import Settings
from ingest.spark import build_spark, pass_jvm_sigterm_to_driver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ingest.commits import CommitRecord
    from ingest.lease import PipelineLease
    from ingest.startup import Start

# Spark settings of a pipeline's own session, unless LAKELINE_SPARK_CONF says otherwise. The pipeline's only cache
# is each micro-batch's decoded records, read two or three times within seconds and then dropped: compressing it
# cost more than it saved (a 1M-record batch 49.8 s -> 43.9 s and 12 % less CPU, bench/results/tuning-2026-11-23.md).
# A `lakeline reconcile` process (it caches a whole table's coordinates) keeps Spark's compressed cache.
PIPELINE_SPARK_DEFAULTS = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}


@dataclass
class RunSummary:
    plan: StartPlan
    batches: list[BatchReport] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)


class Pipeline:
    """One pipeline run. Build with config + settings; `run()` blocks until the trigger ends or a stop signal.
    `events` receives the run's events (default: the human lines on stdout)."""

    def __init__(self, config: PipelineConfig, settings: Settings, spark: "SparkSession | None" = None,
                 trigger: str | None = None, events: Events | None = None, lease: "PipelineLease | None" = None):
        self.config, self.settings = config, settings
        # The pipeline's lease, acquired and kept renewed by the caller from before Spark starts (ingest.lease), which
        # calls `lost_lease` if it is lost: the tables are fenced with its token. None: no fence (a checkpoint off
        # S3, or a test's own run).
        self.lease = lease
        self._lease_lost: str | None = None
        self._lease_news = threading.Lock()
        self.trigger = parse_trigger(trigger or config.trigger)
        self._run_began = time.time()  # run() sets it again: an available-now Kinesis run plans what arrived before
        self.events = events if events is not None else Events(HumanLines())
        self._spark = spark
        self._spark_start_seconds = 0.0  # building the session, when this pipeline built it
        self._start: Start | None = None
        self._committer: BatchCommitter | None = None
        self._reported: set[int] = set()
        self._stop = threading.Event()

    @property
    def spark(self) -> "SparkSession":
        if self._spark is None:
            started = time.monotonic()
            self._spark = build_spark(self.settings, app_name=f"lakeline-{self.config.pipeline}",
                                      defaults=PIPELINE_SPARK_DEFAULTS)
            self._spark_start_seconds = time.monotonic() - started
        return self._spark

    @property
    def query_name(self) -> str:
        return f"lakeline-{self.config.pipeline}"

    @property
    def last_commit(self) -> "CommitRecord | None":
        """The newest commit record of the main table, as this run knows it."""
        return self._committer.last if self._committer else self._start.ends.last if self._start else None

    def warm_up(self) -> float:
        """Standby: start Spark and warm the batch code (ingest.startup.warm_up). Returns the seconds it took."""
        from ingest.startup import warm_up

        return warm_up(self.spark, self.config, self.settings)

    def prepare(self) -> StartPlan:
        """Open the tables, read the checkpoint and decide how to start (ingest.startup.prepare)."""
        from ingest.startup import prepare

        spark = self.spark  # starts the JVM on first use (run() has usually started it already)
        self._start = prepare(spark, self.config, self.settings, self.events, self._spark_start_seconds, self.lease)
        start = self._start
        evolved = None
        if self.config.record_schema.evolution == "add":
            from ingest.transforms import record_columns

            evolved = record_columns(self.config, start.main.table_schema())
        committer = BatchCommitter
        kwargs = {}
        if self.config.sink.route is not None:
            from ingest.fanout import RoutedCommitter

            committer, kwargs = RoutedCommitter, {"settings": self.settings}
        self._committer = committer(spark, self.config, format_for(self.config.sink.format), start.main,
                                    start.dead, start.plan.lineage, start.ends, self.events, evolved,
                                    start.fence, crash_at=self.settings.crash_at, **kwargs)
        return start.plan

    def decoded_stream(self, source: "DataFrame") -> "DataFrame":
        """The source's records decoded against the declared schema (`ingest.transforms.decode`), as part of the
        streaming query itself: the plan is built once per start, not in every batch (building it through py4j
        took about 0.6 s a batch). Raw bytes are kept only for dead letters (the table rows never carry them),
        which halves the cached batch for clean data."""
        from pyspark.sql import functions as F

        from ingest.transforms import decode

        if self.config.sink.route is not None:
            # Each routed table may decode its records again with its own columns, from their raw bytes.
            return decode(source, self.config.record_schema)
        decoded = decode(source, self.config.record_schema, self._committer.evolved)
        if self.config.record_schema.evolution == "add":
            return decoded  # a batch that adds columns is decoded again from its raw bytes
        return decoded.withColumn("_raw", F.when(F.col("_error").isNotNull(), F.col("_raw")))

    def start(self) -> "StreamingQuery":
        from ingest.progress import progress_listener
        from ingest.sources.streams import planned_range, source_stream

        if self._start is None:
            self.prepare()
        self._committer.new_start()
        self._committer.plan_evolved = self._committer.evolved
        source = source_stream(self.spark, self.config, self.settings, self._start.plan,
                               until_arrival=self._run_began if self._drains_to_idle else None)
        body = interruptions_kept_short(self._committer.process)
        writer = (self.decoded_stream(source).writeStream.foreachBatch(body)
                  .option("checkpointLocation", self.config.checkpoint_location(self.settings))
                  .queryName(self.query_name))
        kind, seconds = self.trigger
        if self._drains_to_idle:
            writer = writer.trigger(processingTime="0 seconds")  # until processAllAvailable returns: see run()
        elif kind == "available-now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{int(seconds * 1000)} milliseconds")
        self._listener = progress_listener(self.query_name, self.config.pipeline, self._committer.reports,
                                           self.events, self._reported.add)
        self.spark.streams.addListener(self._listener)
        query = writer.start()
        self._committer.planned = lambda: planned_range(query)
        return query

    @property
    def _drains_to_idle(self) -> bool:
        """Spark runs available-now for a source without admission control (a Python data source: Kinesis) as a
        single batch. Such a run instead uses a processing-time trigger, plans only records that arrived before
        the run began (`until_arrival`), and stops once a trigger finds nothing more: one query, each batch
        within the per-batch limit."""
        return self.trigger[0] == "available-now" and self.config.source.kind == "kinesis"

    @staticmethod
    def _drain_to_idle(query: "StreamingQuery") -> threading.Event:
        """An event set once `query` has committed everything its source has (processAllAvailable, on a thread
        of its own so that a stop signal is still heard), or has ended."""
        from pyspark.errors import StreamingQueryException

        drained = threading.Event()

        def wait() -> None:
            try:
                query.processAllAvailable()
            except StreamingQueryException:
                pass  # the query failed: the run loop raises its error from query.exception()
            finally:
                drained.set()

        threading.Thread(target=wait, name="lakeline-drain", daemon=True).start()
        return drained

    # ---- liveness -------------------------------------------------------------------------------------------
    def _heartbeat(self, done: threading.Event) -> None:
        """Tell `checkpoint restore` (and operators) that this pipeline is alive."""
        from ingest.adapters.hadoop_fs import HadoopFS

        fs = HadoopFS(self.spark)
        path = f"{self.config.checkpoint_location(self.settings)}/{HEARTBEAT_FILE}"
        while True:
            beat = {"at": datetime.now(UTC).isoformat(), "host": socket.gethostname(), "pid": os.getpid(),
                    "lineage": self._start.plan.lineage}
            try:
                fs.write_text(path, json.dumps(beat))
            except Exception as exc:  # noqa: BLE001 - a missed beat must not stop ingestion; say so and go on
                self.events.emit(HeartbeatFailed(pipeline=self.config.pipeline, error=str(exc)))
            if done.wait(HEARTBEAT_SECONDS):
                return

    def _clear_heartbeat(self) -> None:
        from ingest.adapters.hadoop_fs import HadoopFS

        HadoopFS(self.spark).delete(f"{self.config.checkpoint_location(self.settings)}/{HEARTBEAT_FILE}")

    def _await_batch_events(self, timeout: float = 5.0) -> None:
        """Progress events arrive asynchronously; let the last batch's event be emitted before returning."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._reported.issuperset(self._committer.reports):
            time.sleep(0.05)

    def _routed_tables(self) -> list:
        routed = getattr(self._committer, "routed_tables", None)
        return routed() if routed else []

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def lost_lease(self, reason: str) -> None:
        """The lease renewer's news: stop after the current batch (whose commit the fence refuses anyway if the
        pipeline has a new driver). Told once: the renewer and a failed query may both find out."""
        with self._lease_news:
            if self._lease_lost is not None:
                return
            self._lease_lost = reason
        self.events.emit(LeaseLost(pipeline=self.config.pipeline, reason=reason))
        self._stop.set()

    def _query_failure(self, error: str) -> LakelineError:
        """The error to raise for a failed query: the committer's own typed error if it has one; DriverFenced if
        this driver has lost its lease (a resumed driver's query can fail on the new driver's checkpoint writes,
        e.g. CONCURRENT_STREAM_LOG_UPDATE, before the renewer notices); else the failure, named."""
        if self._committer.failure is not None:
            return self._committer.failure
        unchecked = ""
        if self._lease_lost is None and self.lease is not None:
            try:
                reason = self.lease.lost_to()
            except Exception as exc:  # noqa: BLE001 - cannot tell: report the query's own failure, and say so
                reason, unchecked = None, f" (its lease could not be read to check ownership: {exc})"
            if reason is not None:
                self.lost_lease(reason)
        if self._lease_lost is not None:
            return self._fenced(f" (its query failed: {error.splitlines()[0] if error else 'no message'})")
        # Spark logged the trace; the command's error names the component that failed.
        return LakelineError(describe_failure(self.config.pipeline, error) + unchecked)

    def _fenced(self, how: str = "") -> DriverFenced:
        return DriverFenced(f"pipeline {self.config.pipeline}: {self._lease_lost}; this driver stopped{how}, and the "
                            f"tables refuse its commits from the new driver's start on")

    # ---- the run --------------------------------------------------------------------------------------------
    def run(self, install_signal_handlers: bool = True) -> RunSummary:
        """Run until the available-now backlog is done, or until SIGTERM/SIGINT (then stop cleanly, exit 0)."""
        started = time.monotonic()
        previous = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            # Spark first: a new SparkContext installs its own SIGINT handler (cancel jobs, KeyboardInterrupt).
            # A signal to the process group reaches the JVM too; it must not end the JVM under a clean stop.
            pass_jvm_sigterm_to_driver(self.spark)
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.request_stop)
        self._run_began = time.time()
        query = self.start()
        reports = self._committer.reports
        beating = threading.Event()
        heart = threading.Thread(target=self._heartbeat, args=(beating,), name="lakeline-heartbeat", daemon=True)
        heart.start()
        try:
            while True:
                drained = self._drain_to_idle(query) if self._drains_to_idle else threading.Event()
                while query.isActive and not self._stop.is_set() and not self._committer.restart_requested \
                        and not drained.is_set():
                    try:
                        query.awaitTermination(0.5)
                    except Exception as exc:  # noqa: BLE001 - the query failed; our own typed error, if ours
                        raise self._query_failure(str(exc)) from None
                if self._stop.is_set() and query.isActive:
                    self.events.emit(StopRequested(pipeline=self.config.pipeline))
                    query.stop()
                elif drained.is_set() and query.isActive and query.exception() is None:
                    query.stop()  # every record that had arrived when the run began is committed
                self._await_batch_events()
                failure = query.exception()
                if failure is not None:
                    raise self._query_failure(str(failure))
                if self._committer.restart_requested and not self._stop.is_set():
                    # Add mode: a batch added columns; decode the next ones with them (a batch the stop
                    # interrupted is replayed, and the tables' commit records keep it exactly once).
                    if query.isActive:
                        query.stop()
                    self._committer.restart_requested = False
                    self.spark.streams.removeListener(self._listener)
                    query = self.start()
                    continue
                break
        finally:
            beating.set()
            heart.join(30)
            if self._lease_lost is None:  # once the lease is lost, the heartbeat is the new driver's
                self._clear_heartbeat()
            self.spark.streams.removeListener(self._listener)
            for table in (self._start.main, self._start.dead, *self._routed_tables()):
                table.close()
                table.unfence()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._lease_lost is not None:
            raise self._fenced()
        summary = RunSummary(self._start.plan, [reports[k] for k in sorted(reports)])
        self.events.emit(RunFinished(pipeline=self.config.pipeline, batches=len(summary.batches), rows=summary.rows,
                                     dead_letters=summary.dead_letters, seconds=time.monotonic() - started))
        return summary
