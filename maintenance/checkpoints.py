"""Checkpoint backup, verify and restore.

A backup is a copy of the committed part of a Structured Streaming checkpoint (metadata, lineage, sources,
offsets/ and commits/ up to the last committed batch, state/ if any) under
<backup root>/<last committed batch, 12 digits>-<UTC time>/, with a manifest of sizes and SHA-256 checksums.
Spark writes each log entry once and never edits it, so copying the commits first and only the offsets up to
the last committed batch gives a consistent copy while the stream runs.

File access goes through the FileOps protocol (HadoopFS for s3a:// in production; tests use a local one).
"""

from __future__ import annotations

import logging
import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, UTC
from collections.abc import Callable
from typing import Protocol

from ingest.checkpoint import LINEAGE_FILE, CheckpointState, move_aside, parse_offset_file, plan_start
from ingest.commits import CommitRecord, offsets_to_json
from ingest.errors import BackupError, PipelineRunning
from ingest.checkpoint import HEARTBEAT_FILE

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"




class BackupFS(Protocol):
    def exists(self, path: str) -> bool: ...
    def list_names(self, path: str) -> list[str]: ...
    def list_files(self, path: str) -> list[str]: ...  # relative to `path`
    def read_bytes(self, path: str) -> bytes: ...
    def write_bytes(self, path: str, data: bytes) -> None: ...
    def read_text(self, path: str) -> str: ...
    def write_text(self, path: str, text: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def delete(self, path: str) -> None: ...


@dataclass
class Manifest:
    backup_id: str
    pipeline: str
    source: str
    lineage: str | None
    last_committed_batch: int
    created_at: str
    files: list[dict]
    table_end: dict = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(f["size"] for f in self.files)


@dataclass
class VerifyReport:
    backup_id: str
    ok: bool
    problems: list[str]
    files: int
    last_committed_batch: int | None
    consistency: str  # what the pipeline would do if started from this backup


def _committed_files(fs: BackupFS, location: str) -> tuple[int, list[str]]:
    """(last committed batch, relative paths of the files a consistent backup needs)."""
    commits = sorted(int(n) for n in fs.list_names(f"{location}/commits") if n.isdigit())
    if not commits:
        raise BackupError(f"{location}: no committed batch yet (commits/ is empty); nothing to back up")
    last = commits[-1]
    keep: list[str] = []
    for rel in fs.list_files(location):
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") or rel.startswith(HEARTBEAT_FILE):
            continue  # Spark's in-flight temp files; our heartbeat
        top = rel.split("/", 1)[0]
        if top in ("offsets", "commits"):
            if not name.isdigit() or int(name) > last:
                continue  # a planned but uncommitted batch is not part of a consistent backup
        elif top not in ("metadata", "sources", "state", "_lakeline"):
            continue
        keep.append(rel)
    return last, sorted(keep)


def backup(fs: BackupFS, checkpoint: str, backup_root: str, pipeline: str, table: CommitRecord | None,
           keep: int, now: datetime | None = None,
           on_progress: Callable[[int, int], None] | None = None) -> Manifest:
    """Copy the committed part of `checkpoint` to a new backup and prune to the newest `keep` backups."""
    if not fs.exists(checkpoint):
        raise BackupError(f"{checkpoint}: no checkpoint to back up")
    last, files = _committed_files(fs, checkpoint)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    backup_id = f"{last:012d}-{stamp}"
    target = f"{backup_root}/{backup_id}"
    entries = []
    for index, rel in enumerate(files, start=1):
        try:
            data = fs.read_bytes(f"{checkpoint}/{rel}")
        except FileNotFoundError:
            # Spark purges old log entries while it runs; anything it removed mid-copy is older than what it keeps.
            continue
        fs.write_bytes(f"{target}/{rel}", data)
        entries.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        if on_progress is not None:
            on_progress(index, len(files))
        if index % 200 == 0:
            log.info(f"  copied {index}/{len(files)} files")
    lineage_path = f"{checkpoint}/{LINEAGE_FILE}"
    lineage = fs.read_text(lineage_path).strip() if fs.exists(lineage_path) else None
    manifest = Manifest(backup_id, pipeline, checkpoint, lineage, last,
                        datetime.now(UTC).isoformat(timespec="seconds"), entries,
                        offsets_to_json(table.end) if table else {})
    # The manifest is written last: a backup without one is incomplete and never listed.
    fs.write_text(f"{target}/{MANIFEST}", json.dumps(asdict(manifest), indent=1))
    for old in list_backups(fs, backup_root)[:-keep]:
        fs.delete(f"{backup_root}/{old}")
        log.info(f"  pruned old backup {old}")
    return manifest


def list_backups(fs: BackupFS, backup_root: str) -> list[str]:
    """Complete backups (with a manifest), oldest first."""
    return sorted(name for name in fs.list_names(backup_root)
                  if not name.startswith(".") and fs.exists(f"{backup_root}/{name}/{MANIFEST}"))


def load_manifest(fs: BackupFS, backup_root: str, backup_id: str | None) -> Manifest:
    backups = list_backups(fs, backup_root)
    if not backups:
        raise BackupError(f"{backup_root}: no complete backup found")
    chosen = backup_id or backups[-1]
    if chosen not in backups:
        raise BackupError(f"backup {chosen!r} not found under {backup_root}; available: {', '.join(backups)}")
    try:
        return Manifest(**json.loads(fs.read_text(f"{backup_root}/{chosen}/{MANIFEST}")))
    except (json.JSONDecodeError, TypeError) as exc:
        raise BackupError(f"{backup_root}/{chosen}/{MANIFEST}: unreadable manifest ({exc})") from None


def verify(fs: BackupFS, backup_root: str, backup_id: str | None, table: CommitRecord | None) -> VerifyReport:
    """Structure and checksums of a backup, and what a start from it would do given the table's offsets."""
    manifest = load_manifest(fs, backup_root, backup_id)
    base = f"{backup_root}/{manifest.backup_id}"
    problems = []
    present = set(fs.list_files(base))
    for entry in manifest.files:
        path = entry["path"]
        if path not in present:
            problems.append(f"{base}/{path}: missing")
            continue
        data = fs.read_bytes(f"{base}/{path}")
        if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            problems.append(f"{base}/{path}: checksum mismatch (size {len(data)}, manifest {entry['size']})")
    names = {e["path"] for e in manifest.files}
    last = manifest.last_committed_batch
    for required in ("metadata", f"offsets/{last}", f"commits/{last}"):
        if required not in names:
            problems.append(f"{base}: manifest lacks {required}")
    consistency = "unknown"
    if f"offsets/{last}" in names and f"{base}/offsets/{last}: missing" not in problems:
        try:
            end = parse_offset_file(fs.read_text(f"{base}/offsets/{last}"))
        except ValueError as exc:
            problems.append(f"{base}/offsets/{last}: {exc}")
        else:
            plan = plan_start(table, CheckpointState(manifest.lineage, last, end, last, end))
            consistency = ("consistent with the table: the pipeline would resume from it" if plan.action == "resume"
                           else f"a start from it would rebuild: {plan.reason}")
    return VerifyReport(manifest.backup_id, not problems, problems, len(manifest.files), last, consistency)


def heartbeat_age(fs: BackupFS, checkpoint: str, now: datetime | None = None) -> float | None:
    """Seconds since the running pipeline's last heartbeat; None if there is none."""
    path = f"{checkpoint}/{HEARTBEAT_FILE}"
    if not fs.exists(path):
        return None
    try:
        at = datetime.fromisoformat(json.loads(fs.read_text(path))["at"])
    except (json.JSONDecodeError, KeyError, ValueError):
        return 0.0  # unreadable: treat as fresh, refuse rather than guess
    return ((now or datetime.now(UTC)) - at).total_seconds()


def ensure_not_running(fs: BackupFS, checkpoint: str, stale_after: float, force: bool = False) -> None:
    """Raise PipelineRunning while the pipeline's heartbeat is younger than `stale_after` seconds."""
    age = heartbeat_age(fs, checkpoint)
    if age is not None and age < stale_after and not force:
        raise PipelineRunning(f"{checkpoint}: the pipeline looks alive (heartbeat {age:.0f}s ago, limit "
                              f"{stale_after:.0f}s). Stop it first; if it was killed, wait {stale_after - age:.0f}s "
                              f"or pass --force.")


def restore(fs: BackupFS, backup_root: str, backup_id: str | None, checkpoint: str, stale_after: float,
            force: bool = False) -> Manifest:
    """Replace the checkpoint with a verified backup. The current checkpoint is moved aside, never deleted.
    Refuses while the pipeline's heartbeat is younger than `stale_after` seconds (unless `force`)."""
    ensure_not_running(fs, checkpoint, stale_after, force)
    manifest = load_manifest(fs, backup_root, backup_id)
    report = verify(fs, backup_root, manifest.backup_id, None)
    if not report.ok:
        raise BackupError(f"backup {manifest.backup_id} failed verification: " + "; ".join(report.problems[:5]))
    moved = move_aside(fs, checkpoint)
    if moved:
        log.info(f"current checkpoint moved aside to {moved}")
    base = f"{backup_root}/{manifest.backup_id}"
    for entry in manifest.files:
        fs.write_bytes(f"{checkpoint}/{entry['path']}", fs.read_bytes(f"{base}/{entry['path']}"))
    log.info(f"restored backup {manifest.backup_id} (last committed batch {manifest.last_committed_batch}, "
             f"{len(manifest.files)} files) to {checkpoint}")
    return manifest
