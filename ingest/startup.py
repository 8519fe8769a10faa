"""A pipeline start: open both tables, read where each stands, compare with the Spark checkpoint and decide to
resume it, start fresh, or rebuild it from the tables' offsets (ingest.checkpoint.plan_start); and the warm-up of
a standby driver."""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.batch import TableEnds
from ingest.checkpoint import StartPlan, move_aside, plan_start, read_checkpoint, write_lineage
from ingest.commits import CommitRecord
from ingest.compatibility import changes_refusal
from ingest.events import CheckpointMovedAside, RunStarted, SchemaEvolved
from ingest.formats import format_for, tables_for
from ingest.preflight import schema_refused

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.config import PipelineConfig
    from ingest.events import Events
    from ingest.formats import LakeTable
    from ingest.lease import PipelineLease
    from ingest.settings import Settings


@dataclass
class Start:
    """What a start found and decided."""

    plan: StartPlan
    main: "LakeTable"
    dead: "LakeTable"
    ends: TableEnds
    fence: int | None = None  # the token both tables are fenced at for this driver (None: no lease)


def fence_tables(lease: "PipelineLease", tables: "tuple[LakeTable, ...]") -> int:
    """Raise both tables' fences to the lease's token (first lifting the token above any fence a table already
    has, should the lease object have been lost), before anything reads where the tables stand."""
    with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="lakeline-fence") as pool:
        current = list(pool.map(lambda table: table.fence_token(), tables))
        token = lease.raise_token(max(current))
        # side by side: each is a table commit; each table's fence is read once, here
        list(pool.map(lambda pair: pair[0].fence(token, pair[1]), zip(tables, current, strict=True)))
    return token


def prepare(spark: "SparkSession", config: "PipelineConfig", settings: "Settings", events: "Events",
            spark_seconds: float = 0.0, lease: "PipelineLease | None" = None) -> Start:
    """Open (create) both tables, fence them with the lease's token (when there is a lease), read their newest
    commit records and the checkpoint, and make the checkpoint location what the plan needs."""
    from ingest.adapters.hadoop_fs import HadoopFS

    started = time.monotonic()
    main, dead = tables_for(spark, config, settings)

    def open_dead_letters() -> CommitRecord | None:
        dead.ensure()
        return dead.last_commit()

    # Reading the two tables side by side shortens a restart (each is a few small Spark jobs and S3 reads in a JVM
    # that has just started). The main table is created first, alone: it also creates the Iceberg namespace, which
    # two concurrent CREATE ... IF NOT EXISTS could race on.
    main.ensure()
    fence = None
    if lease is not None:
        dead.ensure()
        fence = fence_tables(lease, (main, dead))
    apply_declared_schema(main, config, events)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakeline-open") as pool:
        main_last = pool.submit(main.last_commit)
        dead_last = pool.submit(dead.last_commit if lease is not None else open_dead_letters)
        last, dead_record = main_last.result(), dead_last.result()
    ends = TableEnds(dict(last.end) if last else {}, dict(dead_record.end) if dead_record else {}, last,
                     dead_record)
    fs = HadoopFS(spark)
    location = config.checkpoint_location(settings)
    try:
        state, unreadable = read_checkpoint(fs, location), None
    except ValueError as exc:
        state, unreadable = None, str(exc)
    plan = plan_start(last, state, unreadable=unreadable, dead_letters_settled=ends.dead_letters_settled)
    if plan.action in ("fresh", "rebuild"):
        # Spark needs an empty location for a new checkpoint. "fresh" can still find leftovers of a first start
        # killed before its first offsets entry was complete (e.g. offsets/.0.<uuid>.tmp).
        moved = move_aside(fs, location)
        if moved:
            events.emit(CheckpointMovedAside(pipeline=config.pipeline, moved_to=moved))
        write_lineage(fs, location, plan.lineage)
    events.emit(RunStarted(pipeline=config.pipeline, action=plan.action, reason=plan.reason, lineage=plan.lineage,
                           spark_seconds=spark_seconds, read_seconds=time.monotonic() - started, fence=fence))
    return Start(plan, main, dead, ends, fence)


def apply_declared_schema(table: "LakeTable", config: "PipelineConfig", events: "Events") -> list[str]:
    """Bring the main table to what the YAML declares before anything is written: add the fields it lacks, widen
    what widens (ingest.evolution). A narrowing or incompatible change is refused (ConfigError) naming the column,
    and so is a widening that needs a table feature locking a supported reader out, unless the pipeline's
    `sink.allow_features` opts in (ReaderLockedOut, ingest.compatibility)."""
    from ingest.evolution import plan_changes
    from ingest.transforms import table_schema

    declared = format_for(config.sink.format).stored(table_schema(config))
    changes, refusals = plan_changes(table.table_schema(), declared)
    if refusals:
        raise schema_refused(config, table.display_name, refusals)
    locked_out = changes_refusal(config, table.display_name, changes)
    if locked_out is not None:
        raise locked_out
    if changes:
        table.evolve(changes)
        events.emit(SchemaEvolved(pipeline=config.pipeline, table=table.display_name,
                                  changes=[c.describe() for c in changes]))
    return [c.describe() for c in changes]


def warm_up(spark: "SparkSession", config: "PipelineConfig", settings: "Settings") -> float:
    """For a standby driver: open both tables and run the batch body's code once on a sample record (decode; where
    the format has catalog-free tables, both appends into a local scratch table), so that a takeover pays none of
    a new JVM's first-use costs. Touches no production data. Returns the seconds it took."""
    from pyspark.sql.types import StringType, StructType

    from ingest.transforms import (coordinates_for, dead_letter_rows, dead_letter_schema, decode, fixed_timestamp,
                                   raw_fields, table_rows, table_schema)

    started = time.monotonic()
    for table in tables_for(spark, config, settings):
        table.ensure()
        table.last_commit()
    coords = coordinates_for(config)
    fields = raw_fields(config)
    sample = [("warm-up" if f.dataType == StringType() else None if f.nullable else 0) for f in coords.fields]
    raw = spark.createDataFrame([(*sample, *[None] * (len(fields) - len(sample) - 1), b"{}")], StructType(fields))
    decoded = decode(raw, config.record_schema)
    decoded.collect()
    fmt = format_for(config.sink.format)
    scratch = tempfile.mkdtemp(prefix="lakeline-warm-up-")
    try:
        rows_table = fmt.scratch(spark, f"{scratch}/rows", table_schema(config), config.partitioning,
                                 config.pipeline)
        dead_table = fmt.scratch(spark, f"{scratch}/dead", dead_letter_schema(coords), [], config.pipeline)
        if rows_table is not None and dead_table is not None:
            ingested_at = fixed_timestamp(spark, datetime.now(UTC))
            record = CommitRecord(config.pipeline, "warm-up", 0, {}, {}, 0, 1)
            for table, frame in ((dead_table, dead_letter_rows(decoded, ingested_at, coords)),
                                 (rows_table, table_rows(decoded, config, ingested_at))):
                table.ensure()
                table.append(frame, record)
                table.last_commit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started
