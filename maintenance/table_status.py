"""What an analyst asks of a table before trusting a number: how fresh is it? `lakeline tables`, `lakeline query
--freshness`, the query session's `lakeline_freshness` view and the notebook API's `.freshness()` all give this.

Read without Spark: the table's reader facet gives its newest commit record (the source positions it is complete
through) and counts from metadata; the source gives the records still waiting (maintenance.freshness, the same
lag and SLA judgement `lakeline freshness` and the DAGs use). A table not created yet is a status, not an error.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ingest.commits import offsets_to_json
from ingest.errors import LakelineError
from maintenance.freshness import evaluate, observe_lag

if TYPE_CHECKING:
    from ingest.config import PipelineConfig
    from ingest.formats.table_reader import TableReader
    from ingest.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class TableStatus:
    table: str  # the analyst name (ingest.config.analyst_names)
    pipeline: str
    kind: str  # "main" or "dead letters"
    format: str
    location: str
    created: bool
    newest_commit_at: str | None = None
    complete_through: dict[str, dict[str, int]] = field(default_factory=dict)  # topic/stream -> partition -> next
    waiting_records: int | None = None  # None: the source could not be asked
    waiting_exact: bool = True
    rows: int | None = None
    files: int | None = None
    bytes: int | None = None
    sla: str = "unknown"  # FRESH, STALE, unknown (source not reachable), not created
    problems: list[str] = field(default_factory=list)
    note: str = ""  # what to do (not created yet) or why a figure is missing

    def to_json(self) -> dict:
        return asdict(self)


def observe(name: str, config: "PipelineConfig", table: str, settings: "Settings", now: datetime,
            reader: "TableReader", ask_source: bool = True) -> TableStatus:
    """The status of the pipeline's `table` (its main, dead-letter or a routed table) as of `now`."""
    kind = "main" if table == config.sink.table else "dead letters" if table == config.sink.dead_letters else "routed"
    # A routed table holds only its share of the source: records waiting are the pipeline's, seen on its main table.
    ask_source = ask_source and kind != "routed"
    status = TableStatus(name, config.pipeline, kind, config.sink.format, reader.ref, created=reader.exists())
    if not status.created:
        status.sla, status.note = "not created", reader.not_found().args[0]
        return status
    newest = reader.last_commit(config.pipeline)
    record = newest.record if newest else None
    status.newest_commit_at = newest.committed_at.isoformat() if newest else None
    status.complete_through = offsets_to_json(record.end) if record else {}
    counts = reader.counts()
    status.rows, status.files, status.bytes = counts.rows, counts.files, counts.bytes
    if not ask_source:
        return status
    try:
        lag, exact = observe_lag(config, settings, record)
    except LakelineError as exc:  # the listing still shows what the table knows
        log.debug("source lag of %s: %s", config.pipeline, exc)
        status.note = f"source not reachable: {exc}"
        return status
    report = evaluate(config, newest.committed_at if newest else None, lag, now, lag_exact=exact)
    status.waiting_records, status.waiting_exact = lag, exact
    status.sla, status.problems = ("FRESH" if report.ok else "STALE"), report.problems
    return status


def ago(moment: str, now: datetime) -> str:
    seconds = max(0, int((now - datetime.fromisoformat(moment)).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago" if seconds < 172800 else f"{seconds // 86400} days ago"


def positions(complete_through: dict[str, dict[str, int]]) -> str:
    """`orders[0:1200 1:1180]`: per topic or stream, each partition's next offset (shards' as given)."""
    return " ".join(f"{topic}[{' '.join(f'{p}:{o}' for p, o in parts.items())}]"
                    for topic, parts in sorted(complete_through.items())) or "nothing yet"


def freshness_line(status: TableStatus, now: datetime) -> str:
    """One line a person reads: `orders: FRESH, data as of ... (42 s ago), complete through ..., 0 waiting,
    1,000 rows in 4 files`."""
    if not status.created:
        return f"{status.table}: {status.note}"
    parts = [f"{status.table}: {status.sla}"]
    if status.newest_commit_at:
        parts.append(f"data as of {status.newest_commit_at} ({ago(status.newest_commit_at, now)})")
    else:
        parts.append(f"no commit of pipeline {status.pipeline} yet")
    parts.append(f"complete through {positions(status.complete_through)}")
    if status.waiting_records is not None:
        parts.append(f"{'' if status.waiting_exact else 'at least '}{status.waiting_records:,} waiting")
    rows = "?" if status.rows is None else f"{status.rows:,}"
    parts.append(f"{rows} rows in {status.files:,} files")
    line = ", ".join(parts)
    extra = status.problems + ([status.note] if status.note else [])
    return line + "".join(f"\n  ! {problem}" for problem in extra)
