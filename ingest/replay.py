"""Dead-letter replay: decode dead letters again with the pipeline's current schema (after a fix to the YAML, or
columns added in add mode) and append the ones that now parse to the main table, exactly once, beside a running
stream.

Exactly once: only dead letters behind the main table's committed end are replayed (the stream never writes those
coordinates again, even when it replays a batch that a crash interrupted between its two commits), and a dead letter
whose coordinates the main table already holds has been replayed and is never read again (an anti-join on the source
coordinates), so a second replay, or one rerun after a crash, adds nothing. Run one replay of a pipeline at a time.
Each replay is one append that carries a commit record of its own (pipeline `<name>:replay`), never the pipeline's,
so the stream's offset chain is untouched. The replayed row's ingest time is later than its dead letter's, which is
how `reconcile` tells a replay from a duplicate. Dead letters are never deleted: the dead-letter table stays the
audit log of what failed and why. The dead-letter table keeps no headers: a replayed row's `_headers` is null.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.commits import CommitRecord
from ingest.errors import CommitConflict
from ingest.retry import retrying

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ingest.config import PipelineConfig
    from ingest.settings import Settings

REPLAY_SUFFIX = ":replay"
SAMPLE = 5


def replay_pipeline(config: "PipelineConfig") -> str:
    """The commit-record pipeline name of this pipeline's replays."""
    return config.pipeline + REPLAY_SUFFIX


@dataclass
class ReplayReport:
    pipeline: str
    applied: bool
    selected: int = 0              # dead letters matching --reason / --since
    already_replayed: int = 0      # of those, already in the main table
    now_parse: int = 0             # would land (dry run) or landed (--apply)
    still_failing: dict[str, int] = field(default_factory=dict)  # by the reason they get now
    sample_still_failing: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def pending_dead_letters(letters: "DataFrame", main: "DataFrame", coordinates: list[str]) -> "DataFrame":
    """Dead letters the main table does not hold (not replayed yet)."""
    return letters.join(main.select(*coordinates), coordinates, "left_anti")


def replay(spark: "SparkSession", config: "PipelineConfig", settings: "Settings", reason: str | None = None,
           since: datetime | None = None, apply: bool = False) -> ReplayReport:
    """Decode the matching dead letters again; with `apply`, append those that parse now to the main table."""
    from pyspark.sql import functions as F

    from ingest.errors import ConfigError
    from ingest.evolution import plan_changes
    from ingest.formats import format_for, tables_for
    from ingest.transforms import (coordinates_for, decode, fixed_timestamp, is_new, raw_fields, record_columns,
                                   table_rows, table_schema)

    fmt = format_for(config.sink.format)
    main, dead = tables_for(spark, config, settings)
    changes, refusals = plan_changes(main.table_schema(), fmt.stored(table_schema(config)))
    if changes or refusals:
        what = "; ".join([c.describe() for c in changes] + refusals)
        raise ConfigError(f"pipeline {config.pipeline}: the YAML changes the table ({what}); restart the pipeline "
                          "with it first (a start applies the change, or refuses it), then replay")
    coordinates = coordinates_for(config)
    coords = coordinates.names
    last = main.last_commit()
    letters = dead.read()
    # Only behind the main table's committed end: a batch a crash interrupted between its two commits is
    # replayed by the stream itself, which would write its records again.
    letters = letters.filter(~is_new(dict(last.end), coordinates)) if last else letters.limit(0)
    if reason is not None:
        letters = letters.filter(F.col("_error") == reason)
    if since is not None:
        letters = letters.filter(F.col("_ingested_at") >= F.lit(since))  # an aware time: Spark converts it
    report = ReplayReport(config.pipeline, apply)
    pending = pending_dead_letters(letters, main.read(), coords).cache()
    try:
        report.selected = letters.count()
        waiting = pending.count()
        report.already_replayed = report.selected - waiting
        evolved = record_columns(config, main.table_schema()) if config.record_schema.evolution == "add" else None
        raw = pending.select(*[f.name if f.name in pending.columns else F.lit(None).cast(f.dataType).alias(f.name)
                               for f in raw_fields(config)])
        decoded = decode(raw, config.record_schema, evolved).cache()
        try:
            report.now_parse = decoded.filter(F.col("_error").isNull()).count()
            failing = decoded.filter(F.col("_error").isNotNull())
            report.still_failing = {r["_error"]: r["count"] for r in failing.groupBy("_error").count().collect()}
            report.sample_still_failing = [_record(r) for r in failing.select(*coords, "_error", "_error_detail")
                                           .orderBy(*coords).limit(SAMPLE).collect()]
            if apply and report.now_parse:
                rows = table_rows(decoded, config, fixed_timestamp(spark, datetime.now(UTC)), evolved)
                record = CommitRecord(replay_pipeline(config), f"replay-{uuid.uuid4().hex[:12]}", 0, {}, {},
                                      report.now_parse, 0)
                _append(fmt, main, rows, record)
        finally:
            decoded.unpersist()
    finally:
        pending.unpersist()
    return report


def _append(fmt, table, frame: "DataFrame", record: CommitRecord) -> None:
    """One append, retried on a conflict with the stream's commits (a conflict means nothing landed). Any other
    failure is raised: a rerun of the replay finds what did land through the anti-join and adds only the rest."""
    for attempt in retrying((CommitConflict,), 6):
        with attempt:
            try:
                table.append(frame, record, may_be_replay=False)
            except Exception as exc:  # noqa: BLE001 - classified: only a conflict is retried
                if fmt.classify(exc) is not CommitConflict:
                    raise
                raise CommitConflict(f"replay append conflicted with another writer: {exc}") from exc


def show(spark: "SparkSession", config: "PipelineConfig", settings: "Settings", reason: str | None = None,
         limit: int = 20) -> list[dict]:
    """Dead letters not replayed yet, newest first: coordinates, reason, detail and the raw payload as text."""
    from pyspark.sql import functions as F

    from ingest.formats import tables_for
    from ingest.transforms import coordinates_for

    main, dead = tables_for(spark, config, settings)
    coords = coordinates_for(config).names
    letters = dead.read()
    if reason is not None:
        letters = letters.filter(F.col("_error") == reason)
    pending = pending_dead_letters(letters, main.read(), coords)
    return [_record(r) for r in pending.select(*coords, "_error", "_error_detail", "_ingested_at",
                                               F.col("_raw").cast("string").alias("raw"))
            .orderBy(F.col("_ingested_at").desc(), *coords).limit(limit).collect()]


def _record(row) -> dict:
    """A collected row as a dict, its times aware (PySpark hands a timestamp back as a naive local time)."""
    return {k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in row.asDict().items()}
