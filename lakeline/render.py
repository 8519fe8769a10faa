"""The text renderings of the commands' results, for a person (rich tables). `--output json` prints the same
results as data instead; nothing parses these."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ingest.formats import format_for
from maintenance.policy import format_size

if TYPE_CHECKING:
    from ingest.reconcile import ReconcileReport
    from ingest.replay import ReplayReport
    from maintenance.drill import DrillReport
    from maintenance.policy import TableHealth


def _table(*columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", no_wrap=True)
    return table


def health(report: "TableHealth") -> Group:
    """A table's size and small-file picture, one row per partition, newest first."""
    since = "never" if report.last_compaction_at is None else \
        f"{(report.measured_at - report.last_compaction_at).total_seconds() / 3600:.1f}h ago"
    fmt = format_for(report.format)
    oldest = report.oldest_version_at.isoformat(timespec="seconds") if report.oldest_version_at else "-"
    lines = Text("\n".join([
        f"{report.table} ({report.format}) {report.location}",
        f"  {report.files} files, {format_size(report.bytes)}, {report.small_files} small "
        f"(< {format_size(report.small_below)}; target {format_size(report.target_file_size)})",
        f"  {report.versions} {fmt.version_noun} retained (current {report.current_version}), {fmt.metadata_noun} "
        f"{format_size(report.metadata_bytes)}, oldest {oldest}, last compaction {since}",
    ]))
    parts = _table("partition", "files", "bytes", "small", "ratio", "histogram (share of target)",
                   right=("files", "bytes", "small", "ratio"))
    for part in sorted(report.partitions, key=lambda p: p.partition, reverse=True):
        parts.add_row(part.partition or "(unpartitioned)", str(part.files), format_size(part.bytes),
                      str(part.small_files), f"{part.small_ratio:.2f}",
                      " ".join(f"{k}:{v}" for k, v in part.size_histogram.items() if v))
    return Group(lines, parts)


def reconcile(report: "ReconcileReport") -> Group:
    """Produced vs landed, with the commit-range checks and the first problems found."""
    rows = _table("", "count", "", right=("count",))
    for name, value, note in (
            ("produced", report.produced, ""), ("rows", report.rows, ""),
            ("dead_letters", report.dead_letters, str(report.dead_letters_by_reason)),
            ("duplicates", report.duplicates, ""), ("missing", report.missing, ""),
            ("out_of_range", report.out_of_range, "landed offsets no longer in the topic's retained range"),
            ("replayed", report.replayed, "dead letters a replay appended (counted once, in rows)"),
            ("commits", report.commits, f"contiguous={report.ranges_contiguous} "
                                        f"non_overlapping={report.ranges_non_overlapping}")):
        rows.add_row(name, f"{value:,}", note)
    notes = [f"  ! {problem}" for problem in report.range_problems]
    if report.missing_sample:
        notes.append(f"  first missing: {report.missing_sample[:5]}")
    if report.duplicate_sample:
        notes.append(f"  first duplicates: {report.duplicate_sample[:5]}")
    verdict = "EXACT" if report.exact else "NOT EXACT"
    return Group(Text(f"reconcile {report.pipeline}: {verdict}"), rows, *[Text(n) for n in notes])


def drill(report: "DrillReport") -> Group:
    """One row per scenario, its problems under it, and the verdict."""
    rows = _table("scenario", "format", "produced", "rows", "dlq", "dup", "miss", "recovery_s", "replayed", "start",
                  "result", right=("produced", "rows", "dlq", "dup", "miss", "recovery_s", "replayed"))
    problems = []
    for s in report.scenarios:
        recovery = "-" if s.recovery_seconds is None else f"{s.recovery_seconds:.1f}"
        rows.add_row(s.scenario, s.format, str(s.produced), str(s.rows), str(s.dead_letters), str(s.duplicates),
                     str(s.missing), recovery, str(s.batches_replayed), s.start_plan.split(":")[0],
                     "PASSED" if s.passed else "FAILED")
        problems += [Text(f"  ! {s.scenario}: {problem}") for problem in s.problems]
    return Group(Text(f"drill {report.run_id} of pipeline {report.pipeline}"), rows, *problems,
                 Text(f"drill {'PASSED' if report.passed else 'FAILED'}"))


RAW_WIDTH = 60  # characters of a raw payload a text row shows; --output json carries it whole
DETAIL_WIDTH = 60
HEADERS = {"_kafka_partition": "partition", "_error": "reason", "_error_detail": "detail"}


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters with a marker saying how much was left out."""
    return text if len(text) <= width else f"{text[:width]}… +{len(text) - width:,} chars"


def one_line(raw: str) -> str:
    """A payload on one line: JSON compacted (nested objects stay whole), anything else with its line breaks shown
    as spaces."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return " ".join(raw.split())


def cell(name: str, value: object) -> str:
    """A record's value as a person reads it: ISO-8601 times, text for bytes, a Kinesis sequence without its
    zero padding, "-" for null."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if name == "_sequence" and isinstance(value, str) and value.isdigit():
        return value.lstrip("0") or "0"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def records(rows: list[dict], clipped: dict[str, int] | None = None) -> Table:
    """Rows of records as an aligned table, one column per key (leading underscores dropped from the header);
    the columns in `clipped` cut to that many characters, with a marker, and wrapped on a narrow terminal."""
    clipped = clipped or {}
    columns = list(rows[0]) if rows else []
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.lstrip("_"), no_wrap=column not in clipped, overflow="fold")
    for row in rows:
        table.add_row(*[clip(cell(c, row.get(c)), clipped[c]) if c in clipped else cell(c, row.get(c))
                        for c in columns])
    return table


def dead_letters(rows: list[dict]) -> Group:
    """Dead letters not replayed yet: where, why, when, and the start of the payload (on one line). The source's
    own timestamp is left to `--output json`, for width."""
    if not rows:
        return Group(Text("no dead letters waiting"))
    shown = [{**{HEADERS.get(k, k): v for k, v in row.items()
                 if k not in ("_error", "_error_detail", "_ingested_at", "raw") and not k.endswith("_timestamp")},
              "ingested_at": row.get("_ingested_at"), "reason": row.get("_error"), "detail": row.get("_error_detail"),
              "raw": None if row.get("raw") is None else one_line(row["raw"])} for row in rows]
    return Group(records(shown, {"detail": DETAIL_WIDTH, "raw": RAW_WIDTH}),
                 Text(f"{len(rows)} dead letter(s); raw payloads cut at {RAW_WIDTH} characters (--output json "
                      "has them whole)"))


def replay(report: "ReplayReport") -> Group:
    """What a replay found and did (or would do), and the first records that still fail, as rows."""
    verb = "appended" if report.applied else "would append (dry run; --apply appends)"
    lines = [f"replay {report.pipeline}: {report.selected:,} dead letters selected, {report.already_replayed:,} "
             f"already replayed, {report.now_parse:,} parse now: {verb}"]
    for reason, count in sorted(report.still_failing.items()):
        lines.append(f"  still failing: {count:,} {reason}")
    parts: list = [Text(line) for line in lines]
    if report.sample_still_failing:
        parts += [Text(f"  the first {len(report.sample_still_failing)} still failing:"),
                  records([{HEADERS.get(k, k): v for k, v in row.items()} for row in report.sample_still_failing],
                          {"detail": DETAIL_WIDTH})]
    return Group(*parts)
