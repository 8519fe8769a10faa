"""Compaction of a Delta table's partitions without a JVM: delta-rs OPTIMIZE (bin-packing).

Why: beside a live stream a Spark compaction task costs minutes on a small box (a JVM start, the table's state, a
Spark job), while the stream adds a file per partition per batch; the hot partition's bound
(`max_files_per_partition`) needs it rewritten every minute or so. delta-rs does that in seconds and commits with
a put-if-absent of `N.json` (S3 conditional writes, as Lakeline's own LogStore commits), and its OPTIMIZE conflicts
with nothing the stream does: it reads no predicate, so appends never invalidate it, and the stream removes no
files.

The checksum: delta-rs writes no `N.crc`, and a delta-spark commit after a version without one rebuilds the table
state to derive its own. The stream's LogStore derives it instead, from `N-1.crc` and `N.json`'s adds and removes,
at the listing that first shows the version (`io.lakeline.delta.DerivedChecksum`): in the stream's own thread, not
here in a process that runs below the stream's priority.

What a run reads: delta-rs takes every file of the partition under the target size, not only the small ones
(Spark's `minFileSize`; delta-io/delta-rs#3820, open), and its first-fit bins fill each earlier run's output
(compressed below the target) with small files. So a run also rewrites what earlier runs compacted in that
partition. That costs I/O beside the stream, bounded by the partition's size. A selection of our own would mean
writing Delta commits by hand, which delta-rs' Python API does not offer for chosen files, so the library's rule
is kept.
"""

from __future__ import annotations

import json
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

REWRITE_KEY = "lakeline.rewrite"  # commitInfo key naming the partition a Lakeline rewrite compacted, for the history


def partition_filters(partition: str) -> list[tuple[str, str, str | None]]:
    """delta-rs partition filters selecting one partition key ('col=value/...')."""
    return [(column, "=", value) for column, value in parse_key(partition)]


class DeltaRsRewriter:
    """Bin-packing compaction of chosen partitions of the Delta table at `ref` (s3://), one delta-rs commit per
    partition."""

    def __init__(self, ref: str, settings: "Settings", files: S3Files | None = None):
        from ingest.formats.delta import delta_rs_uri, delta_storage_options

        self.ref = ref.rstrip("/")
        self.uri = delta_rs_uri(self.ref)
        # Commits put N.json only if absent (S3 conditional writes), so the stream and this never overwrite each
        # other's version.
        self.options = {**delta_storage_options(settings), "aws_conditional_put": "etag"}
        self.files = files if files is not None else S3Files(settings)
        self.locks = PartitionLocks(self.files, self.ref)

    def rewrite_partitions(self, partitions: "Sequence[str]", layout: Layout,
                           committing: "Callable[[], AbstractContextManager]" = nullcontext) -> Rewrite:
        """Compact each partition in a commit of its own (counts summed). CommitConflict when another rewrite holds
        the partition or delta-rs refused the commit. (`committing` is not used: delta-rs' OPTIMIZE reads,
        writes and commits in one call.)"""
        return sum((self._rewrite(partition, layout) for partition in partitions), Rewrite(0, 0, 0))

    def _rewrite(self, partition: str, layout: Layout) -> Rewrite:
        with self.locks.holding([partition]):  # delta-rs lets a second compaction of it commit (rewrite_locks)
            return self._rewrite_locked(partition, layout)

    def _rewrite_locked(self, partition: str, layout: Layout) -> Rewrite:
        from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
        from deltalake.exceptions import CommitFailedError, DeltaProtocolError

        table = DeltaTable(self.uri, storage_options=self.options)
        try:
            metrics = table.optimize.compact(
                partition_filters=partition_filters(partition) or None, target_size=layout.target_bytes,
                max_concurrent_tasks=1,  # one core: the stream keeps the others
                commit_properties=CommitProperties(custom_metadata={REWRITE_KEY: partition or "(table)"}),
                # The pipeline writes the log checkpoints and cleans the log (ingest.formats.delta_checkpoints).
                post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                    cleanup_expired_logs=False))
        except CommitFailedError as exc:
            raise CommitConflict(str(exc).splitlines()[0][:200]) from exc
        except DeltaProtocolError as exc:  # table features delta-rs does not write
            raise RewriteNeedsSpark(str(exc).splitlines()[0][:200]) from exc
        removed = metrics.get("filesRemoved") or {}
        removed = json.loads(removed) if isinstance(removed, str) else removed  # delta-rs 1.6 gives it as JSON text
        return Rewrite(int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]),
                       int(removed.get("totalSize") or 0))


def rewriter_for(ref: str, settings: "Settings", layout: Layout) -> DeltaRsRewriter | None:
    """A Spark-free rewriter for the table at `ref`, or None where only Spark compacts it (not on S3, or a
    Z-order layout). Table features delta-rs does not write show at the rewrite (RewriteNeedsSpark)."""
    if not is_s3_uri(ref) or layout.zorder_by or layout.sort_by:
        return None
    return DeltaRsRewriter(ref, settings)
