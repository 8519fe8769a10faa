"""Reading a Structured Streaming checkpoint (offsets/ and commits/ logs), and deciding how to start a run so
that the table's recorded offsets win over a missing, stale or foreign checkpoint.

`plan_start` is pure; `read_checkpoint` and `move_aside` do the IO through HadoopFS.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Protocol

from ingest.commits import CommitRecord, Offsets, offsets_from_json
from ingest.kinesis_offsets import is_kinesis_offset, next_positions

# A running pipeline rewrites <checkpoint>/_lakeline/heartbeat this often; `checkpoint restore` refuses while
# the heartbeat is younger than HEARTBEAT_STALE_SECONDS.
HEARTBEAT_SECONDS = 10.0
HEARTBEAT_STALE_SECONDS = 60.0
HEARTBEAT_FILE = "_lakeline/heartbeat"

LINEAGE_FILE = "_lakeline/lineage"


class FileOps(Protocol):
    def exists(self, path: str) -> bool: ...
    def list_names(self, path: str) -> list[str]: ...
    def read_text(self, path: str) -> str: ...
    def write_text(self, path: str, text: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...


@dataclass(frozen=True)
class CheckpointState:
    lineage: str | None
    last_committed: int | None        # newest batch id in commits/
    committed_end: Offsets            # source end offsets of that batch (from offsets/<id>)
    last_planned: int | None          # newest batch id in offsets/ (== last_committed, or +1 when a batch is pending)
    planned_end: Offsets


@dataclass(frozen=True)
class StartPlan:
    action: str                       # 'fresh' | 'resume' | 'rebuild'
    reason: str
    lineage: str
    starting_offsets: Offsets | None  # for 'rebuild': where the new checkpoint starts (from the table)


def parse_offset_file(text: str) -> Offsets:
    """Spark offsets/<batch>: 'v1', batch metadata JSON, then one line per source. Lakeline runs one source."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise ValueError("not a Spark offset log entry")
    try:
        data = json.loads(lines[2])
        if is_kinesis_offset(data):
            return next_positions(data)
        return offsets_from_json(data)
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"unparsable source offsets: {exc}") from None


def parse_commit_file(text: str) -> dict:
    """Spark commits/<batch>: 'v1' then a JSON object (e.g. {"nextBatchWatermarkMs":0})."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not re.match(r"^v\d+$", lines[0]):
        raise ValueError("not a Spark commit log entry (no version line)")
    if len(lines) < 2:
        raise ValueError("truncated commit log entry (version line only)")
    try:
        meta = json.loads(lines[1])
    except json.JSONDecodeError as exc:
        if lines[1].lstrip().startswith("{") and not lines[1].rstrip().endswith("}"):
            raise ValueError("truncated commit log entry (metadata cut off)") from None
        raise ValueError(f"unparsable commit metadata: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError("commit metadata is not a JSON object")
    return meta


def _batch_ids(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def read_checkpoint(fs: FileOps, location: str) -> CheckpointState | None:
    """The checkpoint's committed and planned positions; None if there is no checkpoint (or no offsets yet).
    Raises ValueError naming the file when an entry Spark reads on restart (the newest offsets, the one before
    it, the newest commit) is missing, truncated or garbage: `lakeline checkpoint repair` explains and fixes
    those; a pipeline start rebuilds from the table's offsets instead."""
    offsets = _batch_ids(fs.list_names(f"{location}/offsets"))
    commits = _batch_ids(fs.list_names(f"{location}/commits"))
    lineage = fs.read_text(f"{location}/{LINEAGE_FILE}").strip() if fs.exists(f"{location}/{LINEAGE_FILE}") else None
    if not offsets:
        return None
    last_committed = commits[-1] if commits else None

    def entry(batch: int) -> Offsets:
        try:
            return parse_offset_file(fs.read_text(f"{location}/offsets/{batch}"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{location}/offsets/{batch}: {exc}") from None
        except FileNotFoundError:
            raise ValueError(f"{location}/offsets/{batch}: missing (gap in the offsets log)") from None

    if last_committed is not None:
        try:
            parse_commit_file(fs.read_text(f"{location}/commits/{last_committed}"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{location}/commits/{last_committed}: {exc}") from None
    if offsets[-1] > offsets[0]:
        entry(offsets[-1] - 1)  # Spark reads it as the previous batch's end
    committed_end = entry(last_committed) if last_committed is not None and last_committed in offsets else {}
    return CheckpointState(lineage, last_committed, committed_end, offsets[-1], entry(offsets[-1]))


def plan_start(table: CommitRecord | None, checkpoint: CheckpointState | None,
               new_lineage: str | None = None, unreadable: str | None = None,
               dead_letters_settled: bool = True) -> StartPlan:
    """Decide how to start so that nothing is skipped (and the offset filter removes any replayed record).

    Keep the checkpoint only if, for every partition, the table's next offset lies between the checkpoint's
    committed end and its planned end: then Spark replays at most the one pending batch, whose already-committed
    records the sinks filter out. Otherwise (missing, stale, ahead, or foreign checkpoint) start a new checkpoint
    lineage at the offsets recorded in the table; when the table's newest batch may lack its dead letters
    (`dead_letters_settled` false: a one-pass batch interrupted between its two commits), at that batch's start
    on its partitions, so it is read again and only its dead letters land.
    """
    fresh_lineage = new_lineage or uuid.uuid4().hex[:12]
    restart = _restart_offsets(table, dead_letters_settled)
    if unreadable:
        return StartPlan("rebuild", f"checkpoint unreadable ({unreadable}); restarting from the table's offsets",
                         fresh_lineage, restart)
    if table is None and checkpoint is None:
        return StartPlan("fresh", "no checkpoint and no commits in the table", fresh_lineage, None)
    if table is None:
        if checkpoint.last_committed is None and checkpoint.lineage:
            return StartPlan("resume", "first batch was planned but never committed", checkpoint.lineage, None)
        return StartPlan("rebuild", "checkpoint has committed batches but the table has no commits from this "
                         "pipeline (table dropped or recreated?)", fresh_lineage, {})
    if checkpoint is None:
        return StartPlan("rebuild", "checkpoint missing; resuming from the offsets recorded in the table",
                         fresh_lineage, restart)
    if checkpoint.lineage is None:
        return StartPlan("rebuild", "checkpoint was not written by Lakeline (no lineage file)", fresh_lineage,
                         restart)
    behind, ahead = [], []
    for part in set(table.end) | set(checkpoint.committed_end) | set(checkpoint.planned_end):
        recorded = table.end.get(part)
        committed = checkpoint.committed_end.get(part)
        planned = checkpoint.planned_end.get(part)
        if recorded is None:
            # The table holds nothing from this partition; a checkpoint past offset 0 there may have consumed
            # records the table never got. Rebuilding is always safe (it starts that partition at earliest).
            if committed:
                ahead.append(part)
            continue
        if committed is not None and committed > recorded:
            ahead.append(part)
        elif planned is None or planned < recorded:
            behind.append(part)
    if ahead:
        return StartPlan("rebuild", f"checkpoint is ahead of the table on {_fmt(ahead)} (table restored or "
                         "rolled back?); restarting from the table's offsets", fresh_lineage, restart)
    if behind:
        return StartPlan("rebuild", f"checkpoint is behind the table on {_fmt(behind)} (stale checkpoint "
                         "restore?); restarting from the table's offsets", fresh_lineage, restart)
    return StartPlan("resume", "checkpoint agrees with the table", checkpoint.lineage, None)


def _restart_offsets(table: CommitRecord | None, dead_letters_settled: bool) -> dict:
    """Where a rebuilt checkpoint starts: the table's end, or its newest batch's start where that batch's dead
    letters may be missing."""
    if table is None:
        return {}
    return dict(table.end) if dead_letters_settled else {**table.end, **table.start}


def _fmt(parts: list) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(parts)[:5]) + (" ..." if len(parts) > 5 else "")


def move_aside(fs: FileOps, location: str) -> str | None:
    """Rename an unusable checkpoint to <location>.replaced-<UTC time> (never deleted: kept for forensics)."""
    if not fs.exists(location):
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = f"{location}.replaced-{stamp}-{uuid.uuid4().hex[:4]}"
    fs.rename(location, target)
    return target


def write_lineage(fs: FileOps, location: str, lineage: str) -> None:
    fs.write_text(f"{location}/{LINEAGE_FILE}", lineage + "\n")
