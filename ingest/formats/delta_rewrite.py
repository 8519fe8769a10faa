"""Compaction of a Delta table's partitions without a JVM: delta-rs OPTIMIZE (bin-packing), then the commit's
checksum file (`N.crc`) written beside it.

Why: beside a live stream a Spark compaction task costs minutes on a small box (a JVM start, the table's state, a
Spark job), while the stream adds a file per partition per batch; the hot partition's bound
(`max_files_per_partition`) needs it rewritten every minute or so. delta-rs does that in seconds and commits with
a put-if-absent of `N.json` (S3 conditional writes, as Lakeline's own LogStore commits), and its OPTIMIZE conflicts
with nothing the stream does: it reads no predicate, so appends never invalidate it, and the stream removes no
files.

The checksum: delta-rs writes no `N.crc`, and the next delta-spark commit after a version without one derives its
own from a full state rebuild (seconds of the stream's batch; the S3 LogStore waits for a checksum a moment before
giving up). This writes it from the version before's checksum and the commit's own actions: files and bytes
removed and added, nothing else changes in an OPTIMIZE. Where that is not known exactly (no checksum before, a
remove without its size, a commit with metadata), no checksum is written and the stream rebuilds, as before.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from ingest.adapters.object_store import S3Files, is_s3_uri
from ingest.errors import CommitConflict
from ingest.formats.rewrite_locks import PartitionLocks
from ingest.formats.table_maintenance import Layout, Rewrite, RewriteNeedsSpark
from ingest.partitioning import parse_key

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ingest.settings import Settings

log = logging.getLogger(__name__)

REWRITE_KEY = "lakeline.rewrite"  # commitInfo key carrying this rewrite's token: how its version is found
# A checksum's optional figures an OPTIMIZE would change in ways its actions do not show (histograms, deletion
# vector counts, the file list): left out of the derived checksum, as delta-spark allows.
_UNKNOWN_AFTER_REWRITE = ("histogramOpt", "deletedRecordCountsHistogramOpt", "allFiles", "numDeletedRecordsOpt",
                          "numDeletionVectorsOpt")
PREVIOUS_CHECKSUM_WAIT_S = 1.0  # the version before's writer puts its N.crc a moment after its N.json
_POLL_S = 0.05


def derived_checksum(previous: dict, commit_actions: list[dict]) -> dict | None:
    """The checksum of a version that only removes and adds files (an OPTIMIZE), from the version before's
    checksum and the version's own actions; None when that cannot be exact."""
    removed = [a["remove"] for a in commit_actions if "remove" in a]
    added = [a["add"] for a in commit_actions if "add" in a]
    if any(key in a for a in commit_actions for key in ("metaData", "protocol", "txn", "domainMetadata", "cdc")):
        return None
    if any(r.get("size") is None for r in removed) or any(a.get("deletionVector") for a in added + removed):
        return None
    if not isinstance(previous.get("numFiles"), int) or not isinstance(previous.get("tableSizeBytes"), int):
        return None
    checksum = {key: value for key, value in previous.items() if key not in _UNKNOWN_AFTER_REWRITE}
    checksum["txnId"] = str(uuid.uuid4())
    checksum["numFiles"] = previous["numFiles"] - len(removed) + len(added)
    checksum["tableSizeBytes"] = (previous["tableSizeBytes"] - sum(int(r["size"]) for r in removed)
                                  + sum(int(a["size"]) for a in added))
    if previous.get("inCommitTimestampOpt") is not None:
        info = next((a["commitInfo"] for a in commit_actions if "commitInfo" in a), {})
        if info.get("inCommitTimestamp") is None:
            return None
        checksum["inCommitTimestampOpt"] = info["inCommitTimestamp"]
    return checksum


def partition_filters(partition: str) -> list[tuple[str, str, str | None]]:
    """delta-rs partition filters selecting one partition key ('col=value/...')."""
    return [(column, "=", value) for column, value in parse_key(partition)]


class DeltaRsRewriter:
    """Bin-packing compaction of chosen partitions of the Delta table at `ref` (s3://), one delta-rs commit per
    partition, each followed by its checksum."""

    def __init__(self, ref: str, settings: "Settings", files: S3Files | None = None):
        from ingest.formats.delta import delta_rs_uri, delta_storage_options

        self.ref = ref.rstrip("/")
        self.uri = delta_rs_uri(self.ref)
        # Commits put N.json only if absent (S3 conditional writes), so the stream and this never overwrite each
        # other's version.
        self.options = {**delta_storage_options(settings), "aws_conditional_put": "etag"}
        self.files = files if files is not None else S3Files(settings)
        self.locks = PartitionLocks(self.files, self.ref)
        self.checksums_written = 0

    def rewrite_partitions(self, partitions: "Sequence[str]", layout: Layout,
                           urgent: "Callable[[], AbstractContextManager]" = nullcontext) -> Rewrite:
        """Compact each partition in a commit of its own (counts summed). CommitConflict when another rewrite holds
        the partition or delta-rs refused the commit. The checksum is written under `urgent`: the stream's LogStore
        waits for it (2 s) before rebuilding the state itself."""
        total = Rewrite(0, 0, 0)
        for partition in partitions:
            one = self._rewrite(partition, layout, urgent)
            total = Rewrite(total.files_removed + one.files_removed, total.files_added + one.files_added,
                            total.bytes_rewritten + one.bytes_rewritten)
        return total

    def _rewrite(self, partition: str, layout: Layout, urgent: "Callable[[], AbstractContextManager]") -> Rewrite:
        with self.locks.holding([partition]):  # delta-rs lets a second compaction of it commit (rewrite_locks)
            return self._rewrite_locked(partition, layout, urgent)

    def _rewrite_locked(self, partition: str, layout: Layout,
                        urgent: "Callable[[], AbstractContextManager]") -> Rewrite:
        from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
        from deltalake.exceptions import CommitFailedError, DeltaProtocolError

        table = DeltaTable(self.uri, storage_options=self.options)
        token = uuid.uuid4().hex
        read_version = table.version()
        try:
            metrics = table.optimize.compact(
                partition_filters=partition_filters(partition) or None, target_size=layout.target_bytes,
                max_concurrent_tasks=1,  # one core: the stream keeps the others
                commit_properties=CommitProperties(custom_metadata={REWRITE_KEY: token}),
                # The pipeline writes the log checkpoints and cleans the log (ingest.formats.delta_checkpoints).
                post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                    cleanup_expired_logs=False))
        except CommitFailedError as exc:
            raise CommitConflict(str(exc).splitlines()[0][:200]) from exc
        except DeltaProtocolError as exc:  # table features delta-rs does not write
            raise RewriteNeedsSpark(str(exc).splitlines()[0][:200]) from exc
        if metrics["numFilesRemoved"]:
            with urgent():
                self._write_checksum(read_version, token)
        removed = metrics.get("filesRemoved") or {}
        removed = json.loads(removed) if isinstance(removed, str) else removed  # delta-rs 1.6 gives it as JSON text
        return Rewrite(int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]),
                       int(removed.get("totalSize") or 0))

    def _log(self, name: str) -> str:
        return f"{self.ref}/_delta_log/{name}"

    def _write_checksum(self, read_version: int, token: str) -> None:
        version, actions = self._find_commit(read_version, token)
        if version is None:
            log.warning("%s: the rewrite's commit was not found after version %d; no checksum written (the next "
                        "stream commit derives one)", self.ref, read_version)
            return
        previous = self._previous_checksum(version - 1)
        checksum = derived_checksum(previous, actions) if previous is not None else None
        if checksum is None:
            log.info("%s: version %d written without a checksum (none derivable); the next stream commit derives "
                     "one", self.ref, version)
            return
        # Put only if absent: a checksum someone else wrote for this version stands.
        if self.files.put_if_absent(self._log(f"{version:020d}.crc"), json.dumps(checksum).encode()):
            self.checksums_written += 1

    def _find_commit(self, read_version: int, token: str) -> tuple[int | None, list[dict]]:
        version = read_version + 1
        while True:
            try:
                text = self.files.read_text(self._log(f"{version:020d}.json"))
            except FileNotFoundError:
                return None, []
            if token in text:
                return version, [json.loads(line) for line in text.splitlines() if line.strip()]
            version += 1

    def _previous_checksum(self, version: int) -> dict | None:
        deadline = time.monotonic() + PREVIOUS_CHECKSUM_WAIT_S
        while True:
            try:
                return json.loads(self.files.read_text(self._log(f"{version:020d}.crc")))
            except FileNotFoundError:
                if time.monotonic() >= deadline:
                    return None
            time.sleep(_POLL_S)


def rewriter_for(ref: str, settings: "Settings", layout: Layout) -> DeltaRsRewriter | None:
    """A Spark-free rewriter for the table at `ref`, or None where only Spark compacts it (not on S3, or a
    Z-order layout). Table features delta-rs does not write show at the rewrite (RewriteNeedsSpark)."""
    if not is_s3_uri(ref) or layout.zorder_by or layout.sort_by:
        return None
    return DeltaRsRewriter(ref, settings)
