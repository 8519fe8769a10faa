"""Structured run events: what a pipeline run reports, as typed records, through one small API.

The pipeline only emits events (`Events.emit`); what becomes of them is the subscribers' business. Two renderers
ship here: `HumanLines` (the one-line-per-batch text an operator reads) and `JsonLines` (`lakeline ingest --events
FILE|-`: one JSON object per event, read by drills, benchmarks and tests). Nothing parses the human text back.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import IO, ClassVar


@dataclass(kw_only=True)
class Event:
    """Base of every run event: which pipeline, and when (UNIX seconds, this host's clock)."""

    kind: ClassVar[str] = "event"
    pipeline: str
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return {"event": self.kind, **asdict(self)}


@dataclass(kw_only=True)
class CheckpointMovedAside(Event):
    kind: ClassVar[str] = "checkpoint_moved_aside"
    moved_to: str


@dataclass(kw_only=True)
class SchemaEvolved(Event):
    """The main table's schema was changed to hold what the pipeline declares (or, in add mode, what records carry):
    fields added, types widened."""

    kind: ClassVar[str] = "schema_evolved"
    table: str
    changes: list[str]
    batch_id: int | None = None  # None: at start, from the YAML


@dataclass(kw_only=True)
class RunStarted(Event):
    """The start plan: resume the checkpoint, start fresh, or rebuild it from the table's offsets."""

    kind: ClassVar[str] = "run_started"
    action: str
    reason: str
    lineage: str
    spark_seconds: float
    read_seconds: float
    fence: int | None = None  # the fencing token the driver holds the pipeline's lease with (ingest.lease)


@dataclass(kw_only=True)
class BatchCommitted(Event):
    """A micro-batch landed: rows in the table and dead letters in the dead-letter table, each one commit carrying
    its offsets (`end`: source -> partition -> next offset, the main table's end after it). `phases`: Lakeline's
    own seconds (scan, dlq, table); `spark_phases`: Spark's (offsets, wal, plan, batch, commit, trigger)."""

    kind: ClassVar[str] = "batch_committed"
    batch_id: int
    rows: int
    dead_letters: int
    input_rows: int | None = None
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    lag: int | None = None
    spark_phases: dict[str, float] = field(default_factory=dict)
    end: dict[str, dict[str, int]] = field(default_factory=dict)
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)  # reason -> count (ingest.transforms)
    routed: dict[str, int] = field(default_factory=dict)  # a routed pipeline's rows per routed table (in `rows`)
    # field -> rows that landed with that field null and its value in _rescued_data (schema.on_type_conflict: rescue)
    rescued_conflicts: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class BatchReplayed(Event):
    """Spark re-ran a batch the tables already hold (after a crash): nothing was written."""

    kind: ClassVar[str] = "batch_replayed"
    batch_id: int
    input_rows: int | None = None
    seconds: float = 0.0
    lag: int | None = None
    spark_phases: dict[str, float] = field(default_factory=dict)


@dataclass(kw_only=True)
class CommitRetried(Event):
    """A commit lost a race (or its outcome was unknown and it had not landed): retried after `delay` s."""

    kind: ClassVar[str] = "commit_retried"
    batch_id: int
    table: str
    error: str
    attempt: int
    delay: float


@dataclass(kw_only=True)
class CommitReconciled(Event):
    """A commit's outcome was unknown; the table's own commit records show it landed."""

    kind: ClassVar[str] = "commit_reconciled"
    batch_id: int
    table: str


@dataclass(kw_only=True)
class HeartbeatFailed(Event):
    kind: ClassVar[str] = "heartbeat_failed"
    error: str


@dataclass(kw_only=True)
class StopRequested(Event):
    kind: ClassVar[str] = "stop_requested"


@dataclass(kw_only=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    batches: int
    rows: int
    dead_letters: int
    seconds: float


@dataclass(kw_only=True)
class StandbyReady(Event):
    kind: ClassVar[str] = "standby_ready"
    warm_seconds: float
    lock: str


@dataclass(kw_only=True)
class StandbyStopped(Event):
    kind: ClassVar[str] = "standby_stopped"


@dataclass(kw_only=True)
class StandbyTakingOver(Event):
    kind: ClassVar[str] = "standby_taking_over"


@dataclass(kw_only=True)
class LeaseWaiting(Event):
    """A standby found the pipeline's lease held by a live driver (on another host, or paused) and waits for it
    to lapse."""

    kind: ClassVar[str] = "lease_waiting"
    holder_host: str
    holder_pid: int
    ttl_s: float


@dataclass(kw_only=True)
class LeaseLost(Event):
    """The running driver lost the pipeline's lease (taken over, or not renewable for a whole ttl): it stops."""

    kind: ClassVar[str] = "lease_lost"
    reason: str


@dataclass(kw_only=True)
class PipelineFailed(Event):
    """One pipeline of a many-pipeline application failed; the others go on. `retry_in`: seconds until it starts
    again (None: it is not started again)."""

    kind: ClassVar[str] = "pipeline_failed"
    error: str
    failures: int
    retry_in: float | None = None


EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in (
    CheckpointMovedAside, SchemaEvolved, RunStarted, BatchCommitted, BatchReplayed, CommitRetried, CommitReconciled,
    HeartbeatFailed, StopRequested, RunFinished, StandbyReady, StandbyStopped, StandbyTakingOver, LeaseWaiting,
    LeaseLost, PipelineFailed)}


def event_from_json(data: dict) -> Event:
    """The typed event of one JSON line (unknown keys are ignored, so older readers survive newer fields)."""
    cls = EVENT_TYPES[data["event"]]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def read_events(text: str) -> list[Event]:
    """Events from JSON-lines text. Lines that are not JSON objects (blank, or another writer's on a shared stdout)
    are skipped."""
    return [event_from_json(json.loads(line)) for line in text.splitlines() if line.lstrip().startswith("{")]


_context = threading.local()


@contextmanager
def pipeline_context(pipeline: str) -> Iterator[None]:
    """Name the pipeline this thread works for, so log records can carry it (`lakeline --log-format json`)."""
    previous = getattr(_context, "pipeline", None)
    _context.pipeline = pipeline
    try:
        yield
    finally:
        _context.pipeline = previous


def current_pipeline() -> str | None:
    """The pipeline this thread works for (`pipeline_context`), or None."""
    return getattr(_context, "pipeline", None)


class Events:
    """Fan-out of run events to subscribers (renderers, metrics, tests). Thread-safe: Spark's listener thread and
    the batch thread both emit."""

    def __init__(self, *subscribers: Callable[[Event], None]):
        self._subscribers = list(subscribers)
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Callable[[Event], None]) -> None:
        self._subscribers.append(subscriber)

    def emit(self, event: Event) -> None:
        with self._lock:
            for subscriber in self._subscribers:
                subscriber(event)


class Recorder:
    """A subscriber that keeps every event (tests, the demo)."""

    def __init__(self):
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, cls: type[Event]) -> list:
        return [e for e in self.events if isinstance(e, cls)]


class JsonLines:
    """One JSON object per event, flushed at once (a reader tails it)."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def __call__(self, event: Event) -> None:
        self.stream.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
        self.stream.flush()


def _seconds(parts: dict[str, float]) -> str:
    return ", ".join(f"{name} {secs:.2f}" for name, secs in parts.items())


def _spark(parts: dict[str, float]) -> str:
    if "trigger" not in parts:
        return ""
    rest = {k: v for k, v in parts.items() if k != "trigger"}
    return f" spark(trigger {parts['trigger']:.2f}: {_seconds(rest)})"


def human_line(event: Event) -> str | None:
    """The operator's text for an event (None: nothing to say)."""
    p = f"[{event.pipeline}]"
    match event:
        case CheckpointMovedAside():
            return f"checkpoint moved aside to {event.moved_to}"
        case SchemaEvolved():
            when = "at start" if event.batch_id is None else f"in batch {event.batch_id}"
            return f"{p} schema of {event.table} evolved {when}: {'; '.join(event.changes)}"
        case RunStarted():
            fence = "" if event.fence is None else f", fence token {event.fence}"
            return (f"{p} start: {event.action} ({event.reason}); lineage {event.lineage}{fence} (Spark ready in "
                    f"{event.spark_seconds:.1f}s, tables and checkpoint read in {event.read_seconds:.1f}s)")
        case BatchCommitted():
            lag = "?" if event.lag is None else event.lag
            phases = f" ({_seconds(event.phases)})" if event.phases else ""
            drift = "".join(f" {path}={n}" for path, n in event.rescued_conflicts.items())
            conflicts = f" rescued_conflicts({drift.strip()})" if drift else ""
            return (f"{p} batch {event.batch_id}: rows={event.rows} dead_letters={event.dead_letters}{conflicts} "
                    f"input={event.input_rows} took={event.seconds:.2f}s{phases} lag={lag}"
                    f"{_spark(event.spark_phases)}")
        case BatchReplayed():
            lag = "?" if event.lag is None else event.lag
            return (f"{p} batch {event.batch_id}: replayed, already in table input={event.input_rows} "
                    f"took={event.seconds:.2f}s lag={lag}{_spark(event.spark_phases)}")
        case CommitRetried():
            return (f"  batch {event.batch_id}: {event.error} on {event.table}, retry {event.attempt} in "
                    f"{event.delay:.1f}s")
        case CommitReconciled():
            return f"  batch {event.batch_id}: commit outcome was unknown; the table has it, done"
        case HeartbeatFailed():
            return f"{p} heartbeat write failed: {event.error}"
        case StopRequested():
            return (f"{p} stop requested: stopping after the current batch (an interrupted batch is replayed "
                    f"idempotently on the next run)")
        case RunFinished():
            return (f"{p} done: {event.batches} batches, {event.rows} rows, {event.dead_letters} dead letters in "
                    f"{event.seconds:.1f}s")
        case StandbyReady():
            return (f"{p} standby: warm in {event.warm_seconds:.1f}s; waiting for the driver on this host to exit "
                    f"(lock {event.lock})")
        case StandbyStopped():
            return f"{p} standby: stopped before taking over"
        case StandbyTakingOver():
            return f"{p} standby: the pipeline's driver is gone; taking over"
        case LeaseWaiting():
            return (f"{p} standby: a driver on host {event.holder_host} (pid {event.holder_pid}) holds the lease; "
                    f"taking over once it goes {event.ttl_s:g}s without renewal")
        case PipelineFailed():
            then = (f"starting it again in {event.retry_in:g}s" if event.retry_in is not None
                    else "not starting it again")
            return f"{p} FAILED (failure {event.failures}): {event.error.splitlines()[0][:300]}; {then}"
        case LeaseLost():
            return f"{p} lease lost: {event.reason}; stopping (the tables refuse this driver's commits)"
    return None


class JsonLogLines:
    """The operator's renderer under `--log-format json`: each event's human line as one JSON log object (time,
    level, logger, pipeline, event, message), for a log shipper that parses JSON."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream

    def __call__(self, event: Event) -> None:
        line = human_line(event)
        if line is None:
            return
        level = "error" if isinstance(event, PipelineFailed | LeaseLost) else "info"
        stream = self.stream or sys.stdout
        stream.write(json_log_line(event.at, level, "lakeline.events", event.pipeline, line, event=event.kind) + "\n")
        stream.flush()


def json_log_line(at: float, level: str, logger: str, pipeline: str | None, message: str, *,
                  event: str | None = None, exception: str | None = None) -> str:
    """The one shape of a JSON log line, for log records (lakeline.logs) and run events (`JsonLogLines`) alike:
    time (UTC, ISO 8601, ms), level, logger, pipeline, the event's kind (events only), message, exception (if any)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    entry: dict[str, object] = {"time": stamp, "level": level, "logger": logger, "pipeline": pipeline}
    if event is not None:
        entry["event"] = event
    entry["message"] = message
    if exception is not None:
        entry["exception"] = exception
    return json.dumps(entry, separators=(",", ":"), default=str)


class HumanLines:
    """The operator's renderer: `human_line` of each event, written to `stream` (stdout unless told) or given to
    `write` (e.g. a logger)."""

    def __init__(self, stream: IO[str] | None = None, write: Callable[[str], None] | None = None):
        self._write = write or (lambda line: print(line, file=stream or sys.stdout, flush=True))

    def __call__(self, event: Event) -> None:
        line = human_line(event)
        if line is not None:
            self._write(line)
