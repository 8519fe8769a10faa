"""`lakeline checkpoint repair`: find what is wrong with a Structured Streaming checkpoint and fix it.

What Spark reads when a query restarts (MicroBatchExecution.populateStartOffsets): `metadata`, the newest
readable offsets/N, offsets/N-1 (the previous end), and the newest commits/M. A truncated or garbage entry there,
or a gap between offsets and commits (SPARK-38033), stops the restart or makes it misplan. Older entries are
never read again (Spark purges them in time).

The fix never deletes: damaged or uncommitted-tail entries are moved into <checkpoint>.repaired-<UTC time>/.
- drop-tail: keep everything up to the newest intact committed batch B (and offsets/B+1 when it is intact, so
  Spark re-runs that planned batch, which the tables' offset filter makes idempotent); move the rest aside.
- rebuild: no intact committed batch is left; move the whole checkpoint aside, and the next start rebuilds the
  checkpoint from the offsets recorded in the table's commits (ingest.checkpoint.plan_start).
`diagnose` is pure over the file-ops protocol; `apply` does the moves.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, UTC

from ingest.checkpoint import (LINEAGE_FILE, CheckpointState, FileOps, move_aside, parse_commit_file,
                              parse_offset_file, plan_start)
from ingest.commits import CommitRecord, Offsets

_VERSION_LINE = re.compile(r"^v\d+$")
_TEMP_FILE = re.compile(r"^\..*\.tmp$")


@dataclass
class Finding:
    path: str        # relative to the checkpoint
    problem: str     # missing | truncated | garbage | gap | temp-leftover | no-lineage
    detail: str
    blocking: bool   # True: Spark would fail or misplan on restart because of it


@dataclass
class RepairPlan:
    location: str
    action: str                                 # none | drop-tail | rebuild
    explanation: str
    findings: list[Finding] = field(default_factory=list)
    move: list[str] = field(default_factory=list)  # relative paths moved aside by `apply` (drop-tail)
    keep_through: int | None = None             # newest committed batch kept
    next_start: str = ""                        # what the pipeline will do on its next start

    @property
    def healthy(self) -> bool:
        return self.action == "none"

    def to_json(self) -> dict:
        return {**asdict(self), "healthy": self.healthy}


def _problem_with_offsets(text: str) -> tuple[str, str] | None:
    if not text.strip():
        return "truncated", "empty file"
    try:
        parse_offset_file(text)
    except ValueError as exc:
        lines = [line for line in text.splitlines() if line.strip()]
        return ("truncated" if len(lines) < 3 and lines and _VERSION_LINE.match(lines[0]) else "garbage"), str(exc)
    return None


def _problem_with_commit(text: str) -> tuple[str, str] | None:
    if not text.strip():
        return "truncated", "empty file"
    try:
        parse_commit_file(text)
    except ValueError as exc:
        return ("truncated" if "truncated" in str(exc) else "garbage"), str(exc)
    return None


def _check_log(fs: FileOps, location: str, log: str, check) -> tuple[list[int], set[int], list[Finding], list[str]]:
    """(batch ids, ids whose entry is intact, findings, temp leftovers) for offsets/ or commits/."""
    names = fs.list_names(f"{location}/{log}")
    ids = sorted(int(n) for n in names if n.isdigit())
    temps = [f"{log}/{n}" for n in names if _TEMP_FILE.match(n)]
    intact, findings = set(), []
    for batch in ids:
        try:
            problem = check(fs.read_text(f"{location}/{log}/{batch}"))
        except UnicodeDecodeError:
            problem = ("garbage", "not UTF-8 text")
        if problem is None:
            intact.add(batch)
        else:
            findings.append(Finding(f"{log}/{batch}", problem[0], problem[1], blocking=False))
    for low, high in pairwise(ids):
        if high != low + 1:
            findings.append(Finding(f"{log}/{low + 1}", "gap", f"{log}/{low + 1}..{high - 1} missing between "
                                    f"{log}/{low} and {log}/{high}", blocking=False))
    return ids, intact, findings, temps


def diagnose(fs: FileOps, location: str, table: CommitRecord | None = None) -> RepairPlan:
    """What is wrong with the checkpoint at `location`, the minimal fix, and what the next start will do."""
    if not fs.exists(location):
        plan = plan_start(table, None)
        return RepairPlan(location, "none", "no checkpoint here", next_start=f"{plan.action}: {plan.reason}")
    findings: list[Finding] = []
    move: list[str] = []
    if fs.exists(f"{location}/metadata"):
        try:
            if not isinstance(json.loads(fs.read_text(f"{location}/metadata")).get("id"), str):
                raise ValueError("no query id")
        except (json.JSONDecodeError, ValueError, AttributeError, UnicodeDecodeError) as exc:
            findings.append(Finding("metadata", "garbage", f"unreadable query metadata ({exc}); Spark writes a "
                                    "new one when it is absent", blocking=True))
            move.append("metadata")
    offset_ids, good_offsets, offset_findings, offset_temps = _check_log(fs, location, "offsets",
                                                                         _problem_with_offsets)
    commit_ids, good_commits, commit_findings, commit_temps = _check_log(fs, location, "commits",
                                                                         _problem_with_commit)
    findings += offset_findings + commit_findings
    for temp in offset_temps + commit_temps:
        findings.append(Finding(temp, "temp-leftover", "in-flight file of a killed writer (Spark ignores it)",
                                blocking=False))
    move += offset_temps + commit_temps
    lineage = fs.read_text(f"{location}/{LINEAGE_FILE}").strip() if fs.exists(f"{location}/{LINEAGE_FILE}") \
        else None
    if lineage is None and offset_ids:
        findings.append(Finding(LINEAGE_FILE, "no-lineage", "not written by Lakeline, or the lineage file was "
                                "lost; the next start rebuilds from the table's offsets", blocking=False))
    for batch in commit_ids:
        if batch not in offset_ids and (not offset_ids or batch >= offset_ids[0]):
            findings.append(Finding(f"commits/{batch}", "missing", f"commits/{batch} exists without offsets/{batch}",
                                    blocking=False))

    # The newest batch Spark can restart from: offsets/B and commits/B intact, and offsets/B-1 intact unless B
    # is the oldest retained entry.
    restart_points = [b for b in offset_ids if b in good_offsets and b in good_commits
                      and (b == offset_ids[0] or b - 1 in good_offsets)]
    if not offset_ids:
        if commit_ids:
            return _rebuild(location, findings, table, "commits/ has entries but offsets/ has none")
        action = "drop-tail" if move else "none"
        return _finish(RepairPlan(location, action, "no batch planned yet" + (
            "; in-flight leftovers are moved aside" if move else ""), findings, move), table, None)
    if not restart_points:
        return _rebuild(location, findings, table, "no intact committed batch to restart from")
    keep = restart_points[-1]
    pending = keep + 1 if keep + 1 in good_offsets else None
    newest_kept = pending if pending is not None else keep
    tail = [f"offsets/{b}" for b in offset_ids if b > newest_kept] + [f"commits/{b}" for b in commit_ids if b > keep]
    for finding in findings:
        # What blocks a restart is in the tail Spark would read first; older damage is never read again.
        batch = finding.path.rsplit("/", 1)[-1]
        if finding.path in tail or (finding.problem == "gap" and int(batch) > keep):
            finding.blocking = True
    move += tail
    if move:
        what = f"keep batches up to {keep}" + (f" and the planned batch {pending} (re-run idempotently)"
                                               if pending is not None else "")
        plan = RepairPlan(location, "drop-tail", f"{what}; move aside {len(move)} damaged, uncommitted or "
                          f"leftover file(s)", findings, move, keep)
    else:
        plan = RepairPlan(location, "none", "checkpoint is intact" if not findings else
                          "only old entries are damaged; Spark never reads them again", findings, [], keep)
    state = CheckpointState(lineage, keep, _end(fs, location, keep), newest_kept, _end(fs, location, newest_kept))
    return _finish(plan, table, state)


def _end(fs: FileOps, location: str, batch: int) -> Offsets:
    return parse_offset_file(fs.read_text(f"{location}/offsets/{batch}"))


def _rebuild(location: str, findings: list[Finding], table: CommitRecord | None, why: str) -> RepairPlan:
    for finding in findings:
        finding.blocking = True
    plan = RepairPlan(location, "rebuild", f"{why}: move the whole checkpoint aside; the next start rebuilds it "
                      "from the offsets recorded in the table", findings)
    return _finish(plan, table, None)


def _finish(plan: RepairPlan, table: CommitRecord | None, state: CheckpointState | None) -> RepairPlan:
    start = plan_start(table, state)
    plan.next_start = f"{start.action}: {start.reason}"
    if start.starting_offsets:
        plan.next_start += " (starting at " + ", ".join(
            f"{t}[{p}]={o}" for (t, p), o in sorted(start.starting_offsets.items())[:8]) + ")"
    return plan


def apply(fs: FileOps, plan: RepairPlan, now: datetime | None = None) -> str | None:
    """Carry out `plan`; returns where the moved files went (None when there was nothing to do)."""
    if plan.action == "rebuild":
        return move_aside(fs, plan.location)
    if not plan.move:
        return None
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    target = f"{plan.location}.repaired-{stamp}-{uuid.uuid4().hex[:4]}"
    for rel in plan.move:
        fs.rename(f"{plan.location}/{rel}", f"{target}/{rel}")
    return target
