"""The streaming pipeline: Kafka -> decode -> (table, dead-letter table), exactly once.

Per micro-batch (foreachBatch): decode, drop records the tables already hold (offset filter against the offsets
recorded in each table's commits), append dead letters then rows, each commit carrying the batch's offsets.
At start: compare the Spark checkpoint with the table's recorded offsets and rebuild the checkpoint from the
table when it is missing, stale, ahead or foreign (see ingest.checkpoint.plan_start and ARCHITECTURE.md).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import TYPE_CHECKING
from collections.abc import Callable

from ingest.checkpoint import StartPlan, move_aside, plan_start, read_checkpoint, write_lineage
from ingest.commits import CommitRecord, Offsets
from ingest.config import PipelineConfig, parse_trigger
from ingest.errors import CommitConflict, LakelineError, UnknownCommitOutcome
from ingest.settings import Settings
from ingest.spark import build_spark, pass_jvm_sigterm_to_driver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ingest.sinks import TableSink

COMMIT_ATTEMPTS = 6
# A batch is written by at most one task per this many records (never more tasks than it has input partitions):
# a small batch lands as one file per table partition instead of one per source partition.
RECORDS_PER_WRITE_TASK = 250_000
# Fault injection for tests and recovery drills: "<point>@<batch id>" makes the driver SIGKILL itself at that
# point of that batch (points: after-dlq-commit, after-table-commit). Never set in production.
CRASH_ENV = "LAKELINE_CRASH_AT"
# A running pipeline rewrites <checkpoint>/_lakeline/heartbeat this often; `checkpoint restore` refuses while
# the heartbeat is younger than HEARTBEAT_STALE_SECONDS.
HEARTBEAT_SECONDS = 10.0
HEARTBEAT_STALE_SECONDS = 60.0
HEARTBEAT_FILE = "_lakeline/heartbeat"


# Spark settings of a pipeline's own session, unless LAKELINE_SPARK_CONF says otherwise. The pipeline's only cache
# is each micro-batch's decoded records, read two or three times within seconds and then dropped: compressing it
# cost more than it saved (a 1M-record batch 49.8 s -> 43.9 s and 12 % less CPU, bench/results/tuning-2026-11-23.md).
# A `lakeline reconcile` process (it caches a whole table's coordinates) keeps Spark's compressed cache.
PIPELINE_SPARK_DEFAULTS = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}

# Consumer properties Lakeline sets on Spark's Kafka source unless the pipeline's source.options say otherwise.
# fetch.max.wait.ms: a micro-batch's range nearly always ends at the log end, and each partition's task then makes
# one more fetch that the broker holds for fetch.max.wait.ms (default 500 ms) waiting for data that is not part of
# the batch. With 2 tasks per core that cost 1 s per batch at trickle rates (bench/results/tuning-2026-11-22.md).
# max.poll.records / max.partition.fetch.bytes: Spark's Kafka reader asks the broker for the partition's offset
# range after every poll (two ListOffsets requests, and a seek that drops the rest of the fetched data). With the
# consumer's default 500 records per poll that happened every 500 records: reading 1M records cost 5.2-5.4 CPU s
# in the executor and 0.9-1.0 in the broker; with these settings 2.6-3.6 and 0.1 (bench/results/tuning-2026-11-24.md).
KAFKA_SOURCE_DEFAULTS = {"fetch.max.wait.ms": "10", "max.poll.records": "20000",
                         "max.partition.fetch.bytes": str(4 * 1024 * 1024)}


@dataclass
class BatchReport:
    batch_id: int
    rows: int = 0
    dead_letters: int = 0
    replayed: bool = False
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # decode+scan, dead-letter commit, table commit


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


def classify_commit_error(exc: BaseException) -> type[LakelineError] | None:
    """Map a Delta/Iceberg commit failure onto the taxonomy (None: not a commit-outcome problem)."""
    text = f"{type(exc).__name__}: {exc}"
    if "CommitStateUnknownException" in text:
        return UnknownCommitOutcome
    if any(name in text for name in ("CommitFailedException", "ConcurrentAppendException",
                                     "ConcurrentTransactionException", "ConcurrentWriteException",
                                     "ProtocolChangedException", "MetadataChangedException")):
        return CommitConflict
    return None


class Pipeline:
    """One pipeline run. Build with config + settings; `run()` blocks until the trigger ends or a stop signal."""

    def __init__(self, config: PipelineConfig, settings: Settings, spark: "SparkSession | None" = None,
                 trigger: str | None = None, echo: Callable[[str], None] = print):
        self.config, self.settings = config, settings
        self.trigger = parse_trigger(trigger or config.trigger)
        self.echo = echo
        self._spark = spark
        self._spark_start_seconds = 0.0  # building the session, when this pipeline built it
        self.summary: RunSummary | None = None
        self._reports: dict[int, BatchReport] = {}
        self._printed: set[int] = set()
        self._stop = threading.Event()
        self.lineage = ""
        self._main_end: Offsets = {}
        self._dlq_end: Offsets = {}
        self._last: CommitRecord | None = None
        # Spark replays at most one batch per query start (the planned, uncommitted one), always the first it runs.
        self._first_batch_of_start = True

    @property
    def spark(self) -> "SparkSession":
        if self._spark is None:
            started = time.monotonic()
            self._spark = build_spark(self.settings, app_name=f"lakeline-{self.config.pipeline}",
                                      defaults=PIPELINE_SPARK_DEFAULTS)
            self._spark_start_seconds = time.monotonic() - started
        return self._spark

    # ---- start-up -------------------------------------------------------------------------------------------
    def warm_up(self) -> float:
        """For a standby driver: start Spark, open both tables and run the batch body's code once on a sample
        record (decode; for Delta, both appends into a local scratch table), so that a takeover pays none of a
        new JVM's first-use costs. Touches no production data. Returns the seconds it took."""
        import shutil
        import tempfile

        from pyspark.sql.types import BinaryType, StringType, StructField, StructType

        from ingest.sinks import sinks_for
        from ingest.sinks.delta import DeltaSink
        from ingest.transforms import (coordinates_for, dead_letter_rows, dead_letter_schema, decode,
                                       fixed_timestamp, table_rows, table_schema)

        started = time.monotonic()
        main, dead = sinks_for(self.spark, self.config, self.settings)
        for sink in (main, dead):
            sink.ensure()
            sink.last_commit()
        coords = coordinates_for(self.config)
        fields = [*coords.fields, StructField("_key", BinaryType(), True), StructField("_raw", BinaryType(), True)]
        sample = [("warm-up" if f.dataType == StringType() else None if f.nullable else 0) for f in coords.fields]
        raw = self.spark.createDataFrame([(*sample, None, b"{}")], StructType(fields))
        decoded = decode(raw, self.config.record_schema)
        decoded.collect()
        if self.config.sink.format == "delta":
            scratch = tempfile.mkdtemp(prefix="lakeline-warm-up-")
            try:
                ingested_at = fixed_timestamp(self.spark, datetime.now(UTC))
                record = CommitRecord(self.config.pipeline, "warm-up", 0, {}, {}, 0, 1)
                partition = [self.config.sink.partition.column] if self.config.sink.partition else []
                rows_sink = DeltaSink(self.spark, f"file:{scratch}/rows", table_schema(self.config), partition,
                                      self.config.pipeline)
                dead_sink = DeltaSink(self.spark, f"file:{scratch}/dead", dead_letter_schema(coords), [],
                                      self.config.pipeline)
                for sink, frame in ((dead_sink, dead_letter_rows(decoded, ingested_at, coords)),
                                    (rows_sink, table_rows(decoded, self.config, ingested_at))):
                    sink.ensure()
                    sink.append(frame, record)
                    sink.last_commit()
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return time.monotonic() - started

    def prepare(self) -> StartPlan:
        from ingest.adapters.hadoop_fs import HadoopFS
        from ingest.sinks import sinks_for

        from concurrent.futures import ThreadPoolExecutor

        spark = self.spark  # starts the JVM on first use (run() has usually started it already)
        spark_ready = time.monotonic()
        self.main, self.dead = sinks_for(spark, self.config, self.settings)

        def open_dead_letters() -> CommitRecord | None:
            self.dead.ensure()
            return self.dead.last_commit()

        # Reading the two tables side by side shortens a restart (each is a few small Spark jobs and S3 reads in
        # a JVM that has just started). The main table is created first, alone: it also creates the Iceberg
        # namespace, which two concurrent CREATE ... IF NOT EXISTS could race on.
        self.main.ensure()
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakeline-open") as pool:
            main_last, dead_last = pool.submit(self.main.last_commit), pool.submit(open_dead_letters)
            self._last, dead_last = main_last.result(), dead_last.result()
        self._main_end = dict(self._last.end) if self._last else {}
        self._dlq_end = dict(dead_last.end) if dead_last else {}
        fs = HadoopFS(self.spark)
        location = self.config.checkpoint_location(self.settings)
        try:
            state, unreadable = read_checkpoint(fs, location), None
        except ValueError as exc:
            state, unreadable = None, str(exc)
        plan = plan_start(self._last, state, unreadable=unreadable)
        if plan.action in ("fresh", "rebuild"):
            # Spark needs an empty location for a new checkpoint. "fresh" can still find leftovers of a first
            # start killed before its first offsets entry was complete (e.g. offsets/.0.<uuid>.tmp).
            moved = move_aside(fs, location)
            if moved:
                self.echo(f"checkpoint moved aside to {moved}")
            write_lineage(fs, location, plan.lineage)
        self.lineage = plan.lineage
        self.echo(f"[{self.config.pipeline}] start: {plan.action} ({plan.reason}); lineage {plan.lineage} "
                  f"(Spark ready in {self._spark_start_seconds:.1f}s, tables and checkpoint read in "
                  f"{time.monotonic() - spark_ready:.1f}s)")
        self.summary = RunSummary(plan)
        return plan

    def _starting_offsets(self, plan: StartPlan) -> str:
        import json

        from ingest.adapters.kafka_admin import KafkaAdmin

        if plan.starting_offsets is None:
            return self.config.source.starting_offsets
        admin = KafkaAdmin(self.settings)
        topics = admin.resolve_topics(self.config.source.topics, self.config.source.topic_pattern)
        spec: dict[str, dict[str, int]] = {}
        for topic in topics:
            for part in admin.partitions(topic):
                # -2 = earliest: a partition the table has never seen is read from its beginning.
                spec.setdefault(topic, {})[str(part)] = plan.starting_offsets.get((topic, part), -2)
        return json.dumps(spec)

    def _kinesis_source(self, plan: StartPlan) -> "DataFrame":
        import json

        from ingest.adapters.kinesis import client_options
        from ingest.sources.kinesis import register
        from ingest.sources.kinesis_offsets import starting_positions

        src = self.config.source
        register(self.spark)
        reader = (self.spark.readStream.format("lakeline-kinesis").option("stream", src.stream)
                  .option("starting_position", src.reader_starting_position)
                  .option("max_records_per_batch", str(src.max_records_per_batch)))
        if plan.starting_offsets is not None:
            # Rebuild: shards the table holds resume after their last recorded sequence number, others from
            # TRIM_HORIZON (like Kafka's earliest for a partition the table has never seen).
            reader = reader.option("starting_positions",
                                   json.dumps(starting_positions(plan.starting_offsets, src.stream)))
        # Endpoint, region and credentials travel as options to the Python workers (never printed).
        return reader.options(**client_options(self.settings)).load()

    def _source(self, plan: StartPlan) -> "DataFrame":
        from ingest.adapters.kafka_admin import client_config

        src = self.config.source
        if src.kind == "kinesis":
            return self._kinesis_source(plan)
        reader = self.spark.readStream.format("kafka")
        for key, value in {**KAFKA_SOURCE_DEFAULTS, **client_config(self.settings), **src.options}.items():
            reader = reader.option(f"kafka.{key}", value)
        if src.topics:
            reader = reader.option("subscribe", ",".join(src.topics))
        else:
            reader = reader.option("subscribePattern", src.topic_pattern)
        reader = reader.option("startingOffsets", self._starting_offsets(plan)).option("failOnDataLoss", "true")
        if src.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(src.max_offsets_per_trigger))
        return reader.load()

    # ---- per batch ------------------------------------------------------------------------------------------
    def decoded_stream(self, source: "DataFrame") -> "DataFrame":
        """The source's records decoded against the declared schema (`ingest.transforms.decode`), as part of the
        streaming query itself: the plan is built once per start, not in every batch (building it through py4j
        took about 0.6 s a batch). Raw bytes are kept only for dead letters (the table rows never carry them),
        which halves the cached batch for clean data."""
        from pyspark.sql import functions as F

        from ingest.transforms import decode, kafka_coordinates, kinesis_coordinates

        raw = kinesis_coordinates(source) if self.config.source.kind == "kinesis" else kafka_coordinates(source)
        decoded = decode(raw, self.config.record_schema)
        return decoded.withColumn("_raw", F.when(F.col("_error").isNotNull(), F.col("_raw")))

    def process_batch(self, batch: "DataFrame", batch_id: int) -> None:
        """foreachBatch body over one decoded micro-batch (`decoded_stream`). Idempotent: a replay of an
        already-committed batch writes nothing."""
        from pyspark import StorageLevel

        from ingest.transforms import coordinates_for, dead_letter_rows, fixed_timestamp, is_new, table_rows

        started = time.monotonic()
        report = BatchReport(batch_id)
        self._reports[batch_id] = report
        if self._last and self._last.lineage == self.lineage and self._last.batch_id >= batch_id:
            report.replayed = True
            report.seconds = time.monotonic() - started
            return
        coords = coordinates_for(self.config)
        decoded = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            cover = _cover(decoded, coords, {}, {})
            # The common case: the batch starts at or past both tables' ends, so nothing in it is held yet and
            # the per-record offset filter is skipped. After a crash between the two commits the replayed batch
            # overlaps a table: count again with the filter.
            fresh = all(int(r["first"]) >= max(self._main_end.get((r[0], r[1]), -1),
                                               self._dlq_end.get((r[0], r[1]), -1)) for r in cover)
            if not fresh:
                cover = _cover(decoded, coords, self._main_end, self._dlq_end)
            # The range each table newly covers starts where it left off (a replayed prefix is filtered out).
            # Positions are ints here (Kinesis: the padded sequence strings parsed back).
            # Kinesis sequence numbers are not contiguous: the range a Kinesis batch covers starts at the table's
            # previous end (Spark hands out contiguous ranges), so consecutive commit ranges chain exactly.
            start = {(r[0], r[1]): (max(int(r["first"]), self._main_end.get((r[0], r[1]), 0)) if coords.numeric
                                    else self._main_end.get((r[0], r[1]), int(r["first"]))) for r in cover}
            batch_end = {(r[0], r[1]): int(r["last"]) + 1 for r in cover}
            rows, dead = sum(r["rows"] for r in cover), sum(r["dead"] for r in cover)
            report.phases["scan"] = time.monotonic() - started
            ingested_at = fixed_timestamp(self.spark, datetime.now(UTC))

            if dead:
                dlq_end = _advance(self._dlq_end, batch_end)
                record = CommitRecord(self.config.pipeline, self.lineage, batch_id, start, dlq_end, 0, dead)
                frame = _fewer_tasks(dead_letter_rows(decoded, ingested_at, coords), dead)
                frame = frame if fresh else frame.filter(is_new(self._dlq_end, coords))
                mark = time.monotonic()
                self._commit(self.dead, frame, record)
                self._dlq_end = dlq_end
                report.phases["dlq"] = time.monotonic() - mark
                _maybe_crash("after-dlq-commit", batch_id)
            main_end = _advance(self._main_end, batch_end)
            record = CommitRecord(self.config.pipeline, self.lineage, batch_id, start, main_end, rows, dead)
            frame = _fewer_tasks(table_rows(decoded, self.config, ingested_at), rows)
            frame = frame if fresh else frame.filter(is_new(self._main_end, coords))
            mark = time.monotonic()
            self._commit(self.main, frame, record)
            self._main_end, self._last = main_end, record
            report.phases["table"] = time.monotonic() - mark
            _maybe_crash("after-table-commit", batch_id)
            self._first_batch_of_start = False
            report.rows, report.dead_letters = rows, dead
        finally:
            decoded.unpersist()
        report.seconds = time.monotonic() - started

    def _commit(self, sink: "TableSink", frame: "DataFrame", record: CommitRecord) -> None:
        """Append with retries. A conflict is retried; an unknown outcome is reconciled against the table's own
        commit records (if the record is there, the commit landed). Nothing is ever deleted here."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                sink.append(frame, record, may_be_replay=self._first_batch_of_start)
                return
            except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is re-raised
                kind = classify_commit_error(exc)
                if kind is None:
                    raise
                landed = sink.last_commit()
                if landed and (landed.lineage, landed.batch_id) == (record.lineage, record.batch_id):
                    self.echo(f"  batch {record.batch_id}: commit outcome was unknown; the table has it, done")
                    return
                if attempt == COMMIT_ATTEMPTS:
                    raise kind(f"{sink.display_name}: batch {record.batch_id} failed to commit after "
                               f"{attempt} attempts: {exc}") from exc
                delay = min(0.5 * 2 ** attempt, 8.0)
                self.echo(f"  batch {record.batch_id}: {kind.__name__} on {sink.display_name}, retry {attempt} "
                          f"in {delay:.1f}s")
                time.sleep(delay)

    # ---- run ------------------------------------------------------------------------------------------------
    def start(self) -> "StreamingQuery":
        plan = self.summary.plan if self.summary else self.prepare()
        self._first_batch_of_start = True
        writer = (self.decoded_stream(self._source(plan)).writeStream.foreachBatch(self.process_batch)
                  .option("checkpointLocation", self.config.checkpoint_location(self.settings))
                  .queryName(f"lakeline-{self.config.pipeline}"))
        kind, seconds = self.trigger
        writer = writer.trigger(availableNow=True) if kind == "available-now" \
            else writer.trigger(processingTime=f"{int(seconds * 1000)} milliseconds")
        self._listener = _ProgressPrinter(self)
        self.spark.streams.addListener(self._listener)
        return writer.start()

    def _heartbeat(self, done: threading.Event) -> None:
        """Tell `checkpoint restore` (and operators) that this pipeline is alive."""
        import json
        import os
        import socket

        from ingest.adapters.hadoop_fs import HadoopFS

        fs = HadoopFS(self.spark)
        path = f"{self.config.checkpoint_location(self.settings)}/{HEARTBEAT_FILE}"
        while True:
            beat = {"at": datetime.now(UTC).isoformat(), "host": socket.gethostname(), "pid": os.getpid(),
                    "lineage": self.lineage}
            try:
                fs.write_text(path, json.dumps(beat))
            except Exception as exc:  # noqa: BLE001 - a missed beat must not stop ingestion; say so and go on
                self.echo(f"[{self.config.pipeline}] heartbeat write failed: {exc}")
            if done.wait(HEARTBEAT_SECONDS):
                return

    def _clear_heartbeat(self) -> None:
        from ingest.adapters.hadoop_fs import HadoopFS

        HadoopFS(self.spark).delete(f"{self.config.checkpoint_location(self.settings)}/{HEARTBEAT_FILE}")

    def _await_progress_lines(self, timeout: float = 5.0) -> None:
        """Progress events arrive asynchronously; let the last batch's line print before returning."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._printed.issuperset(self._reports):
            time.sleep(0.05)

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def run(self, install_signal_handlers: bool = True) -> RunSummary:
        """Run until the available-now backlog is done, or until SIGTERM/SIGINT (then stop cleanly, exit 0)."""
        previous = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            # Spark first: a new SparkContext installs its own SIGINT handler (cancel jobs, KeyboardInterrupt).
            # A signal to the process group reaches the JVM too; it must not end the JVM under a clean stop.
            pass_jvm_sigterm_to_driver(self.spark)
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.request_stop)
        query = self.start()
        beating = threading.Event()
        heart = threading.Thread(target=self._heartbeat, args=(beating,), name="lakeline-heartbeat", daemon=True)
        heart.start()
        # Spark runs available-now for a source without admission control (a Python data source) as a single
        # batch, capped by the Kinesis reader's per-batch limit: repeat until a round plans no new batch.
        drain_rounds = self.config.source.kind == "kinesis" and self.trigger[0] == "available-now"
        try:
            while True:
                batches_before = len(self._reports)
                while query.isActive and not self._stop.is_set():
                    query.awaitTermination(0.5)
                if self._stop.is_set() and query.isActive:
                    self.echo(f"[{self.config.pipeline}] stop requested: stopping after the current batch "
                              f"(an interrupted batch is replayed idempotently on the next run)")
                    query.stop()
                self._await_progress_lines()
                failure = query.exception()
                if failure is not None:
                    raise LakelineError(f"pipeline {self.config.pipeline} failed: {failure}")
                if not drain_rounds or self._stop.is_set() or len(self._reports) == batches_before:
                    break
                self.spark.streams.removeListener(self._listener)
                query = self.start()
        finally:
            beating.set()
            heart.join(30)
            self._clear_heartbeat()
            self.spark.streams.removeListener(self._listener)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.summary.batches = [self._reports[k] for k in sorted(self._reports)]
        return self.summary


def _cover(decoded: "DataFrame", coords, main_end: Offsets, dlq_end: Offsets) -> list:
    """Per (source, partition): first and last position, and the good / bad records past each table's end
    (every record, when the ends are empty)."""
    from pyspark.sql import functions as F

    from ingest.transforms import is_new

    good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
    return decoded.groupBy(coords.source, coords.partition).agg(
        F.min(coords.position).alias("first"), F.max(coords.position).alias("last"),
        F.sum((good & is_new(main_end, coords)).cast("long")).alias("rows"),
        F.sum((bad & is_new(dlq_end, coords)).cast("long")).alias("dead"),
    ).collect()


def _fewer_tasks(frame: "DataFrame", records: int) -> "DataFrame":
    """`frame` written by one task per RECORDS_PER_WRITE_TASK records (coalesce: no shuffle), so each task's
    output file is not tiny; a 50-record batch over 4 source partitions becomes 1 file, not 4. (Asking for more
    tasks than the frame has partitions leaves it as it is.)"""
    return frame.coalesce(max(1, -(-records // RECORDS_PER_WRITE_TASK)))


def _maybe_crash(point: str, batch_id: int) -> None:
    import os

    if os.environ.get(CRASH_ENV) == f"{point}@{batch_id}":
        print(f"{CRASH_ENV}: SIGKILL at {point} of batch {batch_id}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def _advance(previous: Offsets, batch_end: Offsets) -> Offsets:
    merged = dict(previous)
    for part, end in batch_end.items():
        merged[part] = max(end, merged.get(part, 0))
    return merged


class _ProgressPrinter:
    """StreamingQueryListener printing one line per batch: id, rows, dead letters, duration, lag."""

    def __new__(cls, pipeline: Pipeline):
        from pyspark.sql.streaming import StreamingQueryListener

        class Printer(StreamingQueryListener):
            def onQueryStarted(self, event):  # noqa: N802 - Spark's API
                pass

            def onQueryIdle(self, event):  # noqa: N802
                pass

            def onQueryTerminated(self, event):  # noqa: N802
                pass

            def onQueryProgress(self, event):  # noqa: N802
                progress = event.progress
                if progress.name != f"lakeline-{pipeline.config.pipeline}":
                    return
                report = pipeline._reports.get(progress.batchId)  # noqa: SLF001
                if report is None:
                    return
                lag = _lag(progress)
                state = "replayed, already in table" if report.replayed else \
                    f"rows={report.rows} dead_letters={report.dead_letters}"
                pipeline.echo(f"[{pipeline.config.pipeline}] batch {progress.batchId}: {state} "
                              f"input={progress.numInputRows} took={report.seconds:.2f}s{_phases(report)} "
                              f"lag={'?' if lag is None else lag}{_spark_phases(progress)}")
                pipeline._printed.add(progress.batchId)  # noqa: SLF001

        return Printer()


def _phases(report: BatchReport) -> str:
    if not report.phases:
        return ""
    return " (" + ", ".join(f"{name} {secs:.2f}" for name, secs in report.phases.items()) + ")"


# Spark's own phases of a micro-batch (StreamingQueryProgress.durationMs), in the order they run: ask the source
# for its newest offsets, write offsets/N, plan, run foreachBatch (Lakeline's batch above), write commits/N.
_SPARK_PHASES = (("latestOffset", "offsets"), ("walCommit", "wal"), ("queryPlanning", "plan"),
                 ("addBatch", "batch"), ("commitOffsets", "commit"))


def _spark_phases(progress) -> str:
    """' spark(trigger 3.41: offsets 0.05, wal 0.31, ...)' from the progress event; the trigger time less the
    foreachBatch time is Spark's fixed cost per batch."""
    durations = dict(progress.durationMs or {})
    if "triggerExecution" not in durations:
        return ""
    parts = ", ".join(f"{short} {durations[key] / 1000:.2f}" for key, short in _SPARK_PHASES if key in durations)
    return f" spark(trigger {durations['triggerExecution'] / 1000:.2f}: {parts})"


def _lag(progress) -> int | None:
    import json

    try:
        total = 0
        for source in progress.sources:
            end = json.loads(source.endOffset) if isinstance(source.endOffset, str) else source.endOffset
            latest = json.loads(source.latestOffset) if isinstance(source.latestOffset, str) else source.latestOffset
            for topic, parts in (latest or {}).items():
                for part, offset in parts.items():
                    total += max(0, int(offset) - int(end.get(topic, {}).get(part, offset)))
        return total
    except (TypeError, ValueError, AttributeError):
        return None
