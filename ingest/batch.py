"""The per-batch commit protocol (the foreachBatch body), exactly once.

Per micro-batch: drop records the tables already hold (offset filter against the offsets recorded in each table's
commits), append dead letters then rows, each commit carrying the batch's offsets. A commit conflict is retried; an
unknown outcome is reconciled against the table's own commit records. Nothing is ever deleted here.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from collections.abc import Callable

from ingest.commits import CommitRecord, Offsets, offsets_to_json
from ingest.errors import CommitConflict, DriverFenced, LakelineError, SchemaChanged, UnknownCommitOutcome
from ingest.retry import retrying

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ingest.config import PipelineConfig
    from ingest.events import Events
    from ingest.formats import LakeTable, TableFormat

COMMIT_ATTEMPTS = 6
# Add mode: the distinct `_rescued_data` objects of a batch that type the new columns (more is slower, not safer:
# a value that does not fit the type inferred from these is rescued, or a schema_violation dead letter, never lost).
EVOLUTION_SAMPLE = 10_000
# A batch is written by at most one task per this many records (never more tasks than it has input partitions):
# a small batch lands as one file per table partition instead of one per source partition.
RECORDS_PER_WRITE_TASK = 250_000
# One pass (see `BatchCommitter._one_pass`): below this many planned records a batch is written by one task (one
# file per table partition); from it on, by at least one task per core, since the tasks also read and decode.
ONE_TASK_BELOW = 50_000


# The JVM's interruptions: a batch the query's stop interrupts fails with one of them.
INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                 "java.nio.channels.ClosedByInterruptException")
# py4j's wording and the interruption's class: what Spark's StreamExecution.PROXY_ERROR looks for.
INTERRUPTED = "py4j.protocol.Py4JJavaError: An error occurred while calling foreachBatch (batch {batch_id}): {name}"


class BatchInterrupted(Exception):
    """A batch the query's stop interrupted (replayed on the next start, idempotently)."""


def interruptions_kept_short(process: Callable[["DataFrame", int], None]) -> Callable[["DataFrame", int], None]:
    """The foreachBatch body with an interrupted batch raised again as one line. Spark tells a stop's interruption
    from a failure by matching the Python error's text with a regex (StreamExecution.PROXY_ERROR) whose
    `(.|\\n)*` recurses once per character: the whole traceback of an interrupted table write (Python frames and the
    Java stack, thousands of characters) overflowed the stream thread's stack, which then printed a
    StackOverflowError a thousand lines long instead of stopping quietly."""

    def run(batch: "DataFrame", batch_id: int) -> None:
        from ingest.formats import java_raised

        try:
            process(batch, batch_id)
            return
        except Exception as exc:
            name = next((n for n in INTERRUPTIONS if java_raised(exc, n)), None)
            if name is None:
                raise
        # raised outside the except block: no chained traceback for py4j to send to Spark
        raise BatchInterrupted(INTERRUPTED.format(batch_id=batch_id, name=name))

    return run


@dataclass
class BatchReport:
    batch_id: int
    rows: int = 0
    dead_letters: int = 0
    replayed: bool = False
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # decode+scan, dead-letter commit, table commit
    end: Offsets = field(default_factory=dict)  # the main table's end after the batch
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)  # dead letters per reason (ingest.transforms)
    routed: dict[str, int] = field(default_factory=dict)  # a routed pipeline's rows per routed table (sink.route)
    rescued_conflicts: dict[str, int] = field(default_factory=dict)  # rows with a value rescued, per field

    @property
    def end_json(self) -> dict[str, dict[str, int]]:
        return offsets_to_json(self.end)


@dataclass
class TableEnds:
    """Where each table stands: the offsets it holds (from its newest commit record) and that record."""

    main: Offsets
    dead_letters: Offsets
    last: CommitRecord | None
    dead_last: CommitRecord | None = None

    @property
    def dead_letters_settled(self) -> bool:
        """Whether the main table's newest batch has its dead letters in their table: counted at commit (the
        dead letters, if any, committed first), or the dead-letter table's newest record is that batch's. Only a
        one-pass batch (counts null) interrupted between its two commits is unsettled."""
        last, dead = self.last, self.dead_last
        return last is None or last.dead_letters is not None or (
            dead is not None and (dead.lineage, dead.batch_id) == (last.lineage, last.batch_id))


class BatchCommitter:
    """Writes micro-batches of one pipeline start into its two tables. Spark replays at most one batch per query
    start (the planned, uncommitted one), always the first it runs: only that one may already be in a table."""

    def __init__(self, spark: "SparkSession", config: "PipelineConfig", fmt: "TableFormat", main: "LakeTable",
                 dead: "LakeTable", lineage: str, ends: TableEnds, events: "Events",
                 evolved: "StructType | None" = None, fence: int | None = None, crash_at: str | None = None):
        self.spark, self.config, self.format = spark, config, fmt
        self.main, self.dead, self.lineage, self.events = main, dead, lineage, events
        self._main_end, self._dlq_end, self._last = dict(ends.main), dict(ends.dead_letters), ends.last
        self._dead_letters_settled = ends.dead_letters_settled
        # Tables holding no commit of this pipeline yet (none at the start, none by this run): a batch cannot be
        # a replay there, so their commits skip Delta's txn check, which on a table just created rebuilds the log's
        # state (three Spark jobs before the first batch's write).
        self._uncommitted = {id(table) for table, record in ((main, ends.last), (dead, ends.dead_last))
                             if record is None}
        self.reports: dict[int, BatchReport] = {}
        self.first_batch_of_start = True
        # A typed error raised inside foreachBatch, for the run loop to raise as it is (Spark wraps it as text).
        self.failure: LakelineError | None = None
        # Add mode: the table's record columns (declared + evolved), and whether the query should restart to decode
        # with the columns a batch added.
        self.evolved = evolved
        self.plan_evolved = evolved  # what the streaming query decodes with (set by the pipeline at each start)
        self.restart_requested = False
        # The running batch's planned (start, end) positions per source partition, or None when unknown (set by
        # the pipeline once its query has started: ingest.sources.streams.planned_range).
        self.planned: Callable[[], tuple[Offsets, Offsets] | None] = lambda: None
        self._previous_had_dead_letters = False
        # The driver's fencing token (ingest.lease), carried by every commit record; None without a lease.
        self.fence = fence
        # Fault injection for tests and recovery drills only (the setting crash_at, LAKELINE_CRASH_AT).
        self._crash_at = crash_at

    def _record(self, batch_id: int, start: Offsets, end: Offsets, rows: int | None,
                dead_letters: int | None, **extra) -> CommitRecord:
        return CommitRecord(self.config.pipeline, self.lineage, batch_id, start, end, rows, dead_letters,
                            {**extra, **({} if self.fence is None else {"fence": self.fence})})

    @property
    def last(self) -> CommitRecord | None:
        """The main table's newest commit record of this pipeline, as far as this run knows."""
        return self._last

    def new_start(self) -> None:
        """A new query start on the same tables (add mode restarts the query to decode with new columns)."""
        self.first_batch_of_start = True

    def process(self, batch: "DataFrame", batch_id: int) -> None:
        """foreachBatch body over one decoded micro-batch. Idempotent: a replay of an already-committed batch
        writes nothing."""
        from pyspark import StorageLevel

        from ingest.transforms import coordinates_for, dead_letter_rows, fixed_timestamp, is_new, table_rows

        started = time.monotonic()
        report = BatchReport(batch_id)
        self.reports[batch_id] = report
        main_holds = bool(self._last and self._last.lineage == self.lineage and self._last.batch_id >= batch_id)
        if main_holds and (self._dead_letters_settled or self._last.batch_id > batch_id):
            report.replayed = True
            report.seconds = time.monotonic() - started
            return
        # Otherwise, when the main table holds the batch, its dead letters may not be in their table yet (a one-pass
        # batch interrupted between its commits): the batch runs again for them, and the main table is left alone.
        coords = coordinates_for(self.config)
        planned = None if main_holds else self._one_pass_plan(coords)
        if planned is not None:
            self._one_pass(batch, batch_id, coords, planned, report)
            report.seconds = time.monotonic() - started
            return
        decoded = batch.persist(StorageLevel.MEMORY_AND_DISK)
        evolved_here = False
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
            rescued = sum(r["rescued"] for r in cover)
            if self.config.record_schema.evolution == "add" and (rescued or self.evolved != self.plan_evolved):
                evolved = self._evolve(decoded, coords, batch_id, rescued)
                if evolved is not None:
                    evolved_here = True
                    decoded.unpersist()
                    decoded = evolved.persist(StorageLevel.MEMORY_AND_DISK)
                    cover = _cover(decoded, coords, {} if fresh else self._main_end, {} if fresh else self._dlq_end)
            rows, dead = sum(r["rows"] for r in cover), sum(r["dead"] for r in cover)
            if self.config.record_schema.evolution == "fail" and rescued:
                self.failure = _undeclared(decoded, coords, self._main_end, self.config)
                raise self.failure
            report.phases["scan"] = time.monotonic() - started
            ingested_at = fixed_timestamp(self.spark, datetime.now(UTC))

            if dead:
                dlq_end = _advance(self._dlq_end, batch_end)
                record = self._record(batch_id, start, dlq_end, 0, dead)
                frame = _fewer_tasks(dead_letter_rows(decoded, ingested_at, coords), dead)
                frame = frame if fresh else frame.filter(is_new(self._dlq_end, coords))
                mark = time.monotonic()
                self.commit(self.dead, frame, record)
                self._dlq_end = dlq_end
                report.phases["dlq"] = time.monotonic() - mark
                self._maybe_crash("after-dlq-commit", batch_id)
            self._dead_letters_settled = True
            main_end = _advance(self._main_end, batch_end)
            if not main_holds:
                record = self._record(batch_id, start, main_end, rows, dead)
                frame = _fewer_tasks(table_rows(decoded, self.config, ingested_at, self.evolved), rows)
                frame = frame if fresh else frame.filter(is_new(self._main_end, coords))
                mark = time.monotonic()
                self.commit(self.main, frame, record)
                self._main_end, self._last = main_end, record
                report.phases["table"] = time.monotonic() - mark
                self._report_turn_wait(report)
                self._maybe_crash("after-table-commit", batch_id)
            self.first_batch_of_start = False
            # Only once this batch is in both tables: the run loop stops the query to restart it.
            self.restart_requested = self.restart_requested or evolved_here
            report.rows, report.dead_letters, report.end = rows, dead, dict(main_end)
            report.dead_letter_reasons = _reasons(cover)
            report.rescued_conflicts = _conflict_counts(cover)
            self._previous_had_dead_letters = dead > 0
        finally:
            decoded.unpersist()
        report.seconds = time.monotonic() - started

    def _one_pass_plan(self, coords) -> "dict[tuple[str, int | str], tuple[int, int]] | None":
        """The batch's planned range per source partition it reads, when the batch can be written in one pass:
        rescue mode (add and fail decide on the rescued fields before writing), Kafka positions, and the previous
        batch of this run had no dead letters (then the batch is cached instead of read twice). The main table
        does not hold the batch (`process` checked); a dead-letter table that holds some of it (a counted batch
        interrupted between its commits) is filtered."""
        if self.config.record_schema.evolution != "rescue" or not coords.numeric \
                or self._previous_had_dead_letters:
            return None
        planned = self.planned()
        if planned is None:
            return None
        start, end = planned
        if set(end) - set(start):
            return None  # a partition new to the query (added to the topic): its first position is Spark's to resolve
        return {part: (start[part], stop) for part, stop in end.items() if stop > start[part]}

    def _one_pass(self, batch: "DataFrame", batch_id: int, coords, planned: dict, report: BatchReport) -> None:
        """Write a batch reading and decoding each record once: the main table first, its commit record built from
        the planned range (no scan), the counts observed on the write itself; then, only when the write saw dead
        letters, the dead-letter table (reading the batch again). A crash between the two commits leaves the batch
        uncommitted in Spark's checkpoint, so it runs again and writes only the dead letters (the main table holds
        its rows); a start without a usable checkpoint re-reads the main table's last batch for the same reason
        (ingest.checkpoint.plan_start). ARCHITECTURE.md has the argument."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from ingest.transforms import (conflict_fields, decoder_struct, dead_letter_rows, fixed_timestamp, is_new,
                                       table_rows)

        # Planned ranges start where the previous batch ended: at or past the main table's end unless this batch
        # replays records the table holds (then the per-record filter applies). A planned start past the table's
        # end stays a gap that reconcile reports (records the source no longer had), as in `process`.
        fresh = all(first >= self._main_end.get(part, -1) for part, (first, _) in planned.items())
        start = {part: max(first, self._main_end.get(part, 0)) for part, (first, _) in planned.items()}
        batch_end = {part: stop for part, (_, stop) in planned.items()}
        expected = sum(stop - first for first, stop in planned.values())
        good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
        new_main = good if fresh else good & is_new(self._main_end, coords)
        new_dead = bad & is_new(self._dlq_end, coords)
        observation = Observation(f"lakeline_{self.lineage}_{batch_id}")
        schema = self.config.record_schema
        drifting = conflict_fields(decoder_struct(schema)) if schema.rescues_conflicts else []
        conflicts = [F.sum((new_main & F.array_contains("_conflicts", path)).cast("long")).alias(f"conflict_{i}")
                     for i, path in enumerate(drifting)]
        observed = batch.observe(observation, F.sum(new_main.cast("long")).alias("rows"),
                                 F.sum(new_dead.cast("long")).alias("dead"), *_reason_counts(new_dead), *conflicts)
        ingested_at = fixed_timestamp(self.spark, datetime.now(UTC))
        main_end = _advance(self._main_end, batch_end)
        record = self._record(batch_id, start, main_end, None, None)
        frame = table_rows(observed, self.config, ingested_at)
        frame = frame if fresh else frame.filter(is_new(self._main_end, coords))
        tasks = 1 if expected < ONE_TASK_BELOW else max(-(-expected // RECORDS_PER_WRITE_TASK),
                                                           self.spark.sparkContext.defaultParallelism)
        mark = time.monotonic()
        self.commit(self.main, frame.coalesce(tasks), record)
        self._main_end, self._last = main_end, record
        report.phases["table"] = time.monotonic() - mark
        self._report_turn_wait(report)
        self._maybe_crash("after-table-commit", batch_id)
        counts = observation.get
        rows, dead = int(counts.get("rows") or 0), int(counts.get("dead") or 0)
        if dead:
            dlq_end = _advance(self._dlq_end, batch_end)
            letters = _fewer_tasks(dead_letter_rows(batch, ingested_at, coords).filter(is_new(self._dlq_end, coords)),
                                   dead)
            mark = time.monotonic()
            self.commit(self.dead, letters, self._record(batch_id, start, dlq_end, 0, dead))
            self._dlq_end = dlq_end
            report.phases["dlq"] = time.monotonic() - mark
            self._maybe_crash("after-dlq-commit", batch_id)
        self._previous_had_dead_letters = dead > 0
        self._dead_letters_settled = True
        self.first_batch_of_start = False
        report.rows, report.dead_letters, report.end = rows, dead, dict(main_end)
        report.dead_letter_reasons = _reasons(counts)
        report.rescued_conflicts = {path: int(counts[f"conflict_{i}"]) for i, path in enumerate(drifting)
                                    if counts.get(f"conflict_{i}")}

    def _evolve(self, decoded: "DataFrame", coords, batch_id: int, rescued: int) -> "DataFrame | None":
        """Add mode: add the fields this batch's records carry and the table lacks, then decode the batch again
        with them; also decode it again when an earlier batch of this query added columns its plan does not know
        (None: nothing to do). All the fields are added in one schema commit, before the data: a crash in between
        leaves columns that a replay of the batch fills. A rescued value carries its whole undeclared subtree (a new
        struct, nested arrays of objects), typed over every sampled value, so one round adds every field the values
        allow and the batch is decoded again once."""
        from pyspark.sql import functions as F

        from ingest.events import SchemaEvolved
        from ingest.evolution import additions
        from ingest.transforms import decode, is_new, raw_fields, pipeline_columns, record_columns

        # In source order (the first position each distinct object has), so that a type conflict keeps the same
        # first-seen type on every run and format, as `schema infer` reading from the start does.
        first = F.min(F.struct(coords.source, coords.partition, coords.position)).alias("first")
        texts = [] if not rescued else [
            r[0] for r in decoded.filter(F.col("_error").isNull() & F.col("_undeclared")
                                         & is_new(self._main_end, coords))
            .groupBy("_rescued_data").agg(first).orderBy("first").limit(EVOLUTION_SAMPLE)
            .select("_rescued_data").collect()]
        changes = additions(texts, self.evolved, reserved=pipeline_columns(self.config),
                            timestamps=self.config.record_schema.infer_timestamps)
        if changes:
            self._maybe_crash("before-schema-evolve", batch_id)
            self.main.evolve(changes)  # one table commit for all of them
            self.events.emit(SchemaEvolved(pipeline=self.config.pipeline, table=self.main.display_name,
                                           changes=[c.describe() for c in changes], batch_id=batch_id))
            self._maybe_crash("after-schema-evolve", batch_id)
            self.evolved = record_columns(self.config, self.main.table_schema())
        elif self.evolved == self.plan_evolved:
            return None  # what is rescued cannot be a column (e.g. `@version`): it stays in _rescued_data
        # Columns were added (now, or by an earlier batch of this query): decode this batch with them.
        raw = decoded.select(*[f.name for f in raw_fields(self.config)])
        return decode(raw, self.config.record_schema, self.evolved)

    def _maybe_crash(self, point: str, batch_id: int) -> None:
        if self._crash_at == f"{point}@{batch_id}":
            print(f"LAKELINE_CRASH_AT: SIGKILL at {point} of batch {batch_id}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def _report_turn_wait(self, report: "BatchReport") -> None:
        """The part of the table phase the main table's append spent waiting for a rewrite's commit (its `turn`)."""
        if self.main.turn_wait_s > 0:
            report.phases["turn"] = self.main.turn_wait_s

    def commit(self, table: "LakeTable", frame: "DataFrame", record: CommitRecord) -> None:
        """Append with retries. A conflict is retried; an unknown outcome is reconciled against the table's own
        commit records (if the record is there, the commit landed). Nothing is ever deleted here."""
        from ingest.events import CommitReconciled, CommitRetried
        from ingest.formats import refused_by_fence

        def on_retry(attempt: int, error: BaseException, delay: float) -> None:
            self.events.emit(CommitRetried(pipeline=record.pipeline, batch_id=record.batch_id,
                                           table=table.display_name, error=type(error).__name__, attempt=attempt,
                                           delay=delay))

        for attempt in retrying((CommitConflict, UnknownCommitOutcome), COMMIT_ATTEMPTS, on_retry=on_retry):
            with attempt:
                try:
                    table.append(frame, record, may_be_replay=self.first_batch_of_start
                                 and id(table) not in self._uncommitted)
                    self._uncommitted.discard(id(table))
                    return
                except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is re-raised
                    if refused_by_fence(exc):
                        self.failure = DriverFenced(
                            f"pipeline {record.pipeline}: {table.display_name} refused batch {record.batch_id} of "
                            f"this driver (token {self.fence}): another driver has taken the pipeline over. This "
                            f"driver stops; nothing of the batch was committed there.")
                        raise self.failure from exc
                    kind = self.format.classify(exc)
                    if kind is None:
                        raise
                    landed = table.last_commit()
                    if landed and (landed.lineage, landed.batch_id) == (record.lineage, record.batch_id):
                        self.events.emit(CommitReconciled(pipeline=record.pipeline, batch_id=record.batch_id,
                                                          table=table.display_name))
                        self._uncommitted.discard(id(table))
                        return
                    tries = attempt.retry_state.attempt_number
                    raise kind(f"{table.display_name}: batch {record.batch_id} failed to commit after {tries} "
                               f"attempt(s): {exc}") from exc


def _cover(decoded: "DataFrame", coords, main_end: Offsets, dlq_end: Offsets) -> list:
    """Per (source, partition): first and last position, the good / bad records past each table's end (every
    record, when the ends are empty), the good ones with undeclared fields (`rescued`), and `conflicts`: per field,
    the good ones whose value for it was rescued. Grouped by the records' conflict lists too (a handful of groups)
    and folded here, so the per-field counts cost no other pass."""
    from pyspark.sql import functions as F

    from ingest.transforms import is_new

    good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
    return _fold(decoded.groupBy(coords.source, coords.partition, "_conflicts").agg(
        F.min(coords.position).alias("first"), F.max(coords.position).alias("last"),
        F.sum((good & is_new(main_end, coords)).cast("long")).alias("rows"),
        F.sum((bad & is_new(dlq_end, coords)).cast("long")).alias("dead"),
        F.sum((good & F.col("_undeclared") & is_new(main_end, coords)).cast("long")).alias("rescued"),
        *_reason_counts(bad & is_new(dlq_end, coords)),
    ).collect())


def _fold(groups: list, keys: int = 2) -> list:
    """`_cover`'s groups (source, partition, conflict list) as one Row per (source, partition) (per its first `keys`
    columns): positions' min and max, counts summed, and `conflicts` {field: rows}."""
    from pyspark.sql import Row

    folded: dict[tuple, dict] = {}
    for group in groups:
        values = group.asDict()
        conflicts, rows = values.pop("_conflicts"), int(values["rows"] or 0)
        key = tuple(group[:keys])
        into = folded.get(key)
        if into is None:
            into = folded[key] = {**values, "conflicts": {}}
        else:
            for name in list(values)[keys:]:
                if name in ("first", "last"):
                    into[name] = (min if name == "first" else max)(into[name], values[name])
                else:
                    into[name] = (into[name] or 0) + (values[name] or 0)
        for path in conflicts or ():
            into["conflicts"][path] = into["conflicts"].get(path, 0) + rows
    return [Row(**values) for values in folded.values()]


def _conflict_counts(cover: list) -> dict[str, int]:
    """The rows with a rescued conflict per field, over `_cover`'s partitions (fields with none left out)."""
    totals: dict[str, int] = {}
    for row in cover:
        for path, count in row["conflicts"].items():
            totals[path] = totals.get(path, 0) + count
    return {path: n for path, n in sorted(totals.items()) if n}


def _reason_counts(new_dead) -> list:
    """One sum per dead-letter reason (`dead_<reason>`) of the records `new_dead` selects: the dead letters by
    reason that metrics report, counted in the aggregation the batch runs anyway."""
    from pyspark.sql import functions as F

    from ingest.transforms import DEAD_LETTER_REASONS

    return [F.sum((new_dead & (F.col("_error") == reason)).cast("long")).alias(f"dead_{reason}")
            for reason in DEAD_LETTER_REASONS]


def _reasons(counts) -> dict[str, int]:
    """The non-zero `dead_<reason>` sums of `counts` (a Row or dict, or a list of them), as reason -> count."""
    from ingest.transforms import DEAD_LETTER_REASONS

    rows = counts if isinstance(counts, list) else [counts]
    totals = {reason: sum(int(row[f"dead_{reason}"] or 0) for row in rows) for reason in DEAD_LETTER_REASONS}
    return {reason: n for reason, n in totals.items() if n}


def _undeclared(decoded: "DataFrame", coords, main_end: Offsets, config: "PipelineConfig") -> SchemaChanged:
    """The error for a batch with undeclared fields under schema.evolution: fail, naming the first record's fields
    and coordinates."""
    import json

    from pyspark.sql import functions as F

    from ingest.transforms import is_new

    first = (decoded.filter(F.col("_error").isNull() & F.col("_rescued_data").isNotNull() & is_new(main_end, coords))
             .orderBy(coords.source, coords.partition, coords.position)
             .select(coords.source, coords.partition, coords.position, "_rescued_data").first())
    fields = ", ".join(json.loads(first["_rescued_data"]))
    return SchemaChanged(
        f"pipeline {config.pipeline}: {first[0]} partition {first[1]} position {first[2]} carries field(s) {fields} "
        f"that schema.fields does not declare, and schema.evolution is fail. Nothing of this batch was written. "
        f"Declare the field(s) in the pipeline YAML (or set schema.evolution: rescue to keep them in "
        f"_rescued_data) and restart: ingestion continues exactly where it stopped.")


def _fewer_tasks(frame: "DataFrame", records: int) -> "DataFrame":
    """`frame` written by one task per RECORDS_PER_WRITE_TASK records (coalesce: no shuffle), so each task's
    output file is not tiny; a 50-record batch over 4 source partitions becomes 1 file, not 4. (Asking for more
    tasks than the frame has partitions leaves it as it is.)"""
    return frame.coalesce(max(1, -(-records // RECORDS_PER_WRITE_TASK)))


def _advance(previous: Offsets, batch_end: Offsets) -> Offsets:
    merged = dict(previous)
    for part, end in batch_end.items():
        merged[part] = max(end, merged.get(part, 0))
    return merged
