"""The per-batch commit protocol of a routed pipeline (`sink.route`): one source, many tables, exactly once.

A batch is decoded once (declared fields) and cached; one aggregation gives, per source partition and route value,
its range and counts. Each route value goes to a routed table (ingest.routing), made on first sight. Then, per
routed table present in the batch (side by side, on a few threads): in add mode its own evolution from its own
rescued fields, the batch's records for it decoded again when its columns differ from the declared ones, and its
append with a commit record carrying the batch's range and its end. Then the dead letters, then the main table
(`sink.table`, the default table) LAST, every batch, even with no rows of its own: its newest record still means
"batch done", and lists every routed table made so far. A replayed batch skips, per table, what that table's own
newest record says it holds. ARCHITECTURE.md has the argument.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.batch import (EVOLUTION_SAMPLE, BatchCommitter, BatchReport, _advance, _conflict_counts, _fewer_tasks,
                          _fold, _reasons)
from ingest.commits import Offsets
from ingest.routing import DEFAULT, OVERFLOW, ROUTE_OVERFLOW, assign, known_routes, table_config

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from ingest.config import PipelineConfig
    from ingest.formats import LakeTable
    from ingest.settings import Settings

ROUTE = "__route"
# Routed tables committed side by side: Spark runs jobs from several threads at once; more threads than this
# mostly wait for the two cores and the catalog.
COMMIT_THREADS = 4


@dataclass
class Target:
    """One table a routed batch writes: a routed table, or the main (default) table."""

    name: str
    config: "PipelineConfig"
    table: "LakeTable"
    end: Offsets
    columns: "StructType | None"  # add mode: the table's record columns (declared + evolved)
    values: list[str] = field(default_factory=list)  # this batch's route values that go here
    frame: "DataFrame | None" = None  # this batch's records for it, decoded with its columns
    redecoded: bool = False
    rows: int = 0
    dead: dict[str, int] = field(default_factory=dict)  # redecoded: its dead letters per reason
    conflicts: dict[str, int] = field(default_factory=dict)  # redecoded: its rows with a rescued conflict per field


def route_value(config: "PipelineConfig") -> "Column":
    """The route value of a decoded record, as a string ("" when it has none)."""
    from pyspark.sql import functions as F

    route = config.sink.route
    if route.kind == "header":
        value = F.try_element_at(F.col("_headers"), F.lit(route.argument)).cast("string")
    elif route.kind == "key":
        value = F.col("_key").cast("string")
    else:
        value = F.col(route.argument).cast("string")
    return F.coalesce(value, F.lit(""))


class RoutedCommitter(BatchCommitter):
    """`BatchCommitter` for a routed pipeline: the main table is the default table, committed last every batch."""

    def __init__(self, *args, settings: "Settings", **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.known: list[str] = known_routes(self.config, self._last.extra if self._last else None)
        self.targets: dict[str, Target] = {}
        self.main_target = Target("", self.config, self.main, self._main_end, self.evolved)

    def routed_tables(self) -> list["LakeTable"]:
        """The routed tables this run has opened."""
        return [t.table for t in self.targets.values()]

    def _open(self, name: str) -> Target:
        """A routed table, made when new: its schema as declared (plus its overrides), fenced with this driver's
        token, and where it stands (its own newest commit record)."""
        from ingest.formats import format_for
        from ingest.startup import apply_declared_schema
        from ingest.transforms import record_columns, table_schema

        target = self.targets.get(name)
        if target is not None:
            return target
        config = table_config(self.config, name)
        fmt = format_for(config.sink.format)
        table = fmt.open(self.spark, fmt.ref(config, self.settings), table_schema(config), config.partitioning,
                         config.pipeline, self.settings)
        table.ensure()
        if self.fence is not None:
            table.fence(self.fence)
        apply_declared_schema(table, config, self.events)
        last = table.last_commit()
        columns = record_columns(config, table.table_schema()) if config.record_schema.evolution == "add" else None
        target = Target(name, config, table, dict(last.end) if last else {}, columns)
        self.targets[name] = target
        return target

    def _open_all(self, names: list[str]) -> None:
        """Open (make) the routed tables a batch meets first. Delta tables side by side (each is its own log);
        Iceberg tables one at a time (their creation writes the one catalog database)."""
        if self.config.sink.format == "delta" and len(names) > 1:
            with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="lakeline-open") as pool:
                list(pool.map(self._open, names))
        for name in names:
            self._open(name)

    def process(self, batch: "DataFrame", batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from ingest.transforms import coordinates_for, fixed_timestamp

        started = time.monotonic()
        report = BatchReport(batch_id)
        self.reports[batch_id] = report
        if self._last and self._last.lineage == self.lineage and self._last.batch_id >= batch_id:
            report.replayed = True  # the main table commits last: it holds the batch, so every table does
            report.seconds = time.monotonic() - started
            return
        coords = coordinates_for(self.config)
        decoded = batch.withColumn(ROUTE, route_value(self.config)).persist(StorageLevel.MEMORY_AND_DISK)
        cached: list = [decoded]
        try:
            cover = _routed_cover(decoded, coords)
            where = assign(self.config, {r[ROUTE] for r in cover}, self.known)
            for name in sorted({n for n in where.values() if n}):
                if name not in self.known:
                    self.known.append(name)
            self._open_all(sorted({n for n in where.values() if n and n not in self.targets}))
            targets = {"": self.main_target}
            self.main_target.values = []
            for value, name in sorted(where.items()):
                if name == DEFAULT:
                    self.main_target.values.append(value)
                elif name is not OVERFLOW:
                    target = targets.get(name) or self._open(name)
                    if name not in targets:
                        target.values = []
                        targets[name] = target
                    target.values.append(value)
            overflow = sorted(v for v, n in where.items() if n is OVERFLOW)
            first: Offsets = {}
            for r in cover:
                first[(r[0], r[1])] = min(first.get((r[0], r[1]), int(r["first"])), int(r["first"]))
            batch_end: Offsets = {}
            for r in cover:
                batch_end[(r[0], r[1])] = max(batch_end.get((r[0], r[1]), 0), int(r["last"]) + 1)
            # Fresh: the batch starts at or past every end of the tables it writes (nothing of it held yet).
            fresh = all(pos >= max([self._dlq_end.get(part, -1), *(t.end.get(part, -1) for t in targets.values())])
                        for part, pos in first.items())
            # As in `BatchCommitter.process`: a Kinesis batch's range starts at the main table's previous end.
            start = {part: (max(pos, self._main_end.get(part, 0)) if coords.numeric else self._main_end.get(part, pos))
                     for part, pos in first.items()}
            report.phases["scan"] = time.monotonic() - started
            ingested_at = fixed_timestamp(self.spark, datetime.now(UTC))

            def by_value(values, column: str) -> int:
                chosen = set(values)
                return sum(int(r[column] or 0) for r in cover if r[ROUTE] in chosen)

            if self.config.record_schema.evolution == "add":
                self._evolve_targets(decoded, coords, batch_id, targets)
            mark = time.monotonic()
            routed = [t for name, t in targets.items() if name]
            with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="lakeline-route") as pool:
                list(pool.map(lambda t: self._shape(t, decoded, coords, fresh, by_value, cached), targets.values()))
                list(pool.map(lambda t: self._write(t, batch_id, start, batch_end, ingested_at, coords, fresh),
                              routed))
            if routed:
                report.phases["routes"] = time.monotonic() - mark

            # The dead letters: those of the base decode (tables not decoded again), those of tables decoded again
            # with their own columns, and the good records past max_tables (overflow: dead_letter).
            redecoded = [v for t in targets.values() if t.redecoded for v in t.values]
            good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
            parts = [decoded.filter(bad & ~_among(redecoded))]
            if overflow:
                parts.append(decoded.filter(good & _among(overflow))
                             .withColumn("_error", F.lit(ROUTE_OVERFLOW))
                             .withColumn("_error_detail", F.concat(F.lit(f"{self.config.sink.route.by} value "),
                                                                   F.col(ROUTE), F.lit(" is past max_tables"))))
            parts += [t.frame.filter(bad) for t in targets.values() if t.redecoded]
            reasons = _reasons([r for r in cover if r[ROUTE] not in set(redecoded)])
            for t in targets.values():
                for reason, n in t.dead.items():
                    reasons[reason] = reasons.get(reason, 0) + n
            if overflow:
                reasons[ROUTE_OVERFLOW] = by_value(overflow, "rows")
            reasons = {k: v for k, v in reasons.items() if v}
            dead = sum(reasons.values())
            from ingest.transforms import dead_letter_rows, is_new

            letters = None
            for part in parts:
                shaped = dead_letter_rows(part, ingested_at, coords)
                letters = shaped if letters is None else letters.unionByName(shaped)
            if not fresh:
                letters = letters.filter(is_new(self._dlq_end, coords))
                dead = letters.count()
            if dead:
                dlq_end = _advance(self._dlq_end, batch_end)
                mark = time.monotonic()
                self.commit(self.dead, _fewer_tasks(letters, dead), self._record(batch_id, start, dlq_end, 0, dead))
                self._dlq_end = dlq_end
                report.phases["dlq"] = time.monotonic() - mark
                self._maybe_crash("after-dlq-commit", batch_id)

            main = self.main_target
            main_end = _advance(self._main_end, batch_end)
            record = self._record(batch_id, start, main_end, main.rows, dead, routes=sorted(self.known))
            mark = time.monotonic()
            self.commit(self.main, self._rows(main, ingested_at, coords, fresh), record)
            self._main_end, self._last = main_end, record
            main.end = main_end
            report.phases["table"] = time.monotonic() - mark
            self._maybe_crash("after-table-commit", batch_id)
            self.first_batch_of_start = False
            self._dead_letters_settled = True
            report.rows = sum(t.rows for t in targets.values())
            report.dead_letters, report.end = dead, dict(main_end)
            report.dead_letter_reasons = reasons
            report.routed = {t.name: t.rows for t in routed}
            conflicts = _conflict_counts([r for r in cover if r[ROUTE] not in set(redecoded)])
            for t in targets.values():
                for path, n in t.conflicts.items():
                    conflicts[path] = conflicts.get(path, 0) + n
            report.rescued_conflicts = dict(sorted(conflicts.items()))
        finally:
            for frame in cached:
                frame.unpersist()
        report.seconds = time.monotonic() - started

    def _evolve_targets(self, decoded: "DataFrame", coords, batch_id: int, targets: dict[str, Target]) -> None:
        """Add mode: each table adds the fields its own records carry (one `LakeTable.evolve` per table that needs
        it, side by side), before any data. The sample is one query over the batch."""
        from pyspark.sql import functions as F

        from ingest.events import SchemaEvolved
        from ingest.evolution import additions
        from ingest.transforms import is_new, pipeline_columns, record_columns

        # In source order, as `BatchCommitter._evolve` reads it: a type conflict keeps the same first-seen type.
        first = F.min(F.struct(coords.source, coords.partition, coords.position)).alias("first")
        rows = (decoded.filter(F.col("_error").isNull() & F.col("_undeclared") & is_new(self._main_end, coords))
                .groupBy(ROUTE, "_rescued_data").agg(first).orderBy("first").limit(EVOLUTION_SAMPLE)
                .select(ROUTE, "_rescued_data").collect())
        owner = {v: t for t in targets.values() for v in t.values}
        texts: dict[str, list[str]] = {}
        for row in rows:
            target = owner.get(row[0])
            if target is not None:
                texts.setdefault(target.name, []).append(row[1])

        def evolve(target: Target) -> None:
            changes = additions(texts[target.name], target.columns, reserved=pipeline_columns(target.config),
                                timestamps=target.config.record_schema.infer_timestamps)
            if not changes:
                return
            target.table.evolve(changes)
            self.events.emit(SchemaEvolved(pipeline=self.config.pipeline, table=target.table.display_name,
                                           changes=[c.describe() for c in changes], batch_id=batch_id))
            self._maybe_crash("after-schema-evolve", batch_id)
            target.columns = record_columns(target.config, target.table.table_schema())
            if target is self.main_target:
                self.evolved = target.columns

        with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="lakeline-evolve") as pool:
            list(pool.map(evolve, [targets[name] for name in sorted(texts)]))

    def _shape(self, target: Target, decoded: "DataFrame", coords, fresh: bool, by_value, cached: list) -> None:
        """The batch's records for `target`, decoded again with its own columns when they differ from the declared
        ones (add mode, overrides), and its row count (and, decoded again, its dead letters per reason)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from ingest.transforms import DEAD_LETTER_REASONS, decode, decoder_struct, is_new, raw_fields

        mine = decoded.filter(_among(target.values))
        declared = decoder_struct(self.config.record_schema)
        own = decoder_struct(target.config.record_schema, target.columns)
        if own != declared:
            raw = mine.select(*[f.name for f in raw_fields(self.config)], ROUTE)
            mine = decode(raw, target.config.record_schema, target.columns)
        target.redecoded = bool(target.values) and own != declared
        if target.redecoded:
            mine = mine.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(mine)
            good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
            new_dead = bad & is_new(self._dlq_end, coords)
            counts = mine.agg(F.sum((good & is_new(target.end, coords)).cast("long")).alias("rows"),
                              *[F.sum((new_dead & (F.col("_error") == r)).cast("long")).alias(r)
                                for r in DEAD_LETTER_REASONS]).first()
            target.rows = int(counts["rows"] or 0)
            target.dead = {r: int(counts[r] or 0) for r in DEAD_LETTER_REASONS if counts[r]}
            # Conflicts with its own (evolved) columns: a handful of groups over the cached frame.
            groups = mine.filter(good & is_new(target.end, coords)).groupBy("_conflicts").count().collect()
            target.conflicts = {}
            for group in groups:
                for path in group["_conflicts"] or ():
                    target.conflicts[path] = target.conflicts.get(path, 0) + int(group["count"])
        elif not target.values:
            target.rows = 0
        elif fresh:
            target.rows = by_value(target.values, "rows")
        else:
            target.rows = mine.filter(F.col("_error").isNull() & is_new(target.end, coords)).count()
        target.frame = mine

    def _rows(self, target: Target, ingested_at, coords, fresh: bool) -> "DataFrame":
        from ingest.transforms import is_new, table_rows

        frame = table_rows(target.frame, target.config, ingested_at, target.columns)
        frame = frame if fresh else frame.filter(is_new(target.end, coords))
        return _fewer_tasks(frame, target.rows)

    def _write(self, target: Target, batch_id: int, start: Offsets, batch_end: Offsets, ingested_at, coords,
               fresh: bool) -> None:
        """One routed table's append, carrying the batch's range and the table's own end."""
        if not target.rows:
            return
        end = _advance(target.end, batch_end)
        self.commit(target.table, self._rows(target, ingested_at, coords, fresh),
                    self._record(batch_id, start, end, target.rows, 0))
        target.end = end
        self._maybe_crash("after-route-commit", batch_id)


def _among(values: list[str]) -> "Column":
    from pyspark.sql import functions as F

    return F.col(ROUTE).isin(list(values)) if values else F.lit(False)


def _routed_cover(decoded: "DataFrame", coords) -> list:
    """Per (source, partition, route value): first and last position, good, bad and rescued records, `conflicts`
    per field, and the dead letters by reason (the whole batch: a replayed batch is counted again with each table's
    filter)."""
    from pyspark.sql import functions as F

    from ingest.batch import _reason_counts

    good, bad = F.col("_error").isNull(), F.col("_error").isNotNull()
    return _fold(decoded.groupBy(coords.source, coords.partition, ROUTE, "_conflicts").agg(
        F.min(coords.position).alias("first"), F.max(coords.position).alias("last"),
        F.sum(good.cast("long")).alias("rows"), F.sum(bad.cast("long")).alias("dead"),
        F.sum((good & F.col("_undeclared")).cast("long")).alias("rescued"),
        *_reason_counts(bad),
    ).collect(), keys=3)
