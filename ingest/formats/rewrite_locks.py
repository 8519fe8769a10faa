"""Per-partition rewrite locks of a Delta table on S3: one compaction at a time rewrites a partition.

Why: delta-rs (1.6) lets two commits that both remove the same files with `dataChange = false` through its
conflict check (two compactions of one partition), and each adds its own rewrite of those rows: the rows are
then in the table twice. Seen on bench.steady: the files-bound run and the compaction run both rewrote the live
partition within seconds, and 1.17M rows were duplicated. Spark's own check refuses the second such commit
(ConcurrentDeleteDeleteException), but not when delta-rs commits second. So every Lakeline rewrite of a Delta
partition, delta-rs' or Spark's, holds that partition's lock from before it reads the files until its commit
lands; a partition held by another rewrite is skipped (CommitConflict: retried, then left for the next run).

A lock is one object, `<table>/_lakeline/rewrite-locks/<sha1 of the partition key>.json` (hidden from Delta and its
VACUUM by the leading underscore), created with `If-None-Match: *`, so one holder wins; it names its holder and
expires after TTL_S (a holder killed mid-rewrite blocks that partition's compaction until then); an expired lock
is taken over with `If-Match` on its ETag, so two takers cannot both win.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ingest.adapters.object_store import precondition_failed
from ingest.errors import CommitConflict

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ingest.adapters.object_store import S3Files

TTL_S = 2 * 3600  # longer than any one rewrite commit group takes beside a stream


class PartitionLocks:
    def __init__(self, files: "S3Files", table_location: str, ttl_s: float = TTL_S):
        self.files, self.ttl_s = files, ttl_s
        self.root = f"{table_location.rstrip('/')}/_lakeline/rewrite-locks"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def _path(self, partition: str) -> str:
        return f"{self.root}/{hashlib.sha1(partition.encode()).hexdigest()}.json"

    def _key(self, partition: str) -> tuple[str, str]:
        return self.files._split(self._path(partition))  # noqa: SLF001 - the same store's bucket and key

    def _body(self, partition: str) -> bytes:
        return json.dumps({"partition": partition, "owner": self.owner, "expires_at": time.time() + self.ttl_s}
                          ).encode()

    def _take(self, partition: str) -> str | None:
        """None when taken; else who holds it."""
        from botocore.exceptions import ClientError

        if self.files.put_if_absent(self._path(partition), self._body(partition)):
            return None
        bucket, key = self._key(partition)
        s3 = self.files.s3
        try:
            current = s3.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:  # released meanwhile: the next run takes it
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return "another rewrite (just released)"
            raise
        held = json.loads(current["Body"].read())
        if held.get("expires_at", 0) > time.time():
            return f"{held.get('owner')} until {time.strftime('%H:%M:%S', time.gmtime(held['expires_at']))} UTC"
        try:  # expired: its holder died mid-rewrite
            s3.put_object(Bucket=bucket, Key=key, Body=self._body(partition), IfMatch=current["ETag"])
            return None
        except ClientError as exc:
            if precondition_failed(exc):
                return "another rewrite (taken over meanwhile)"
            raise

    def _release(self, partition: str) -> None:
        bucket, key = self._key(partition)
        try:
            held = json.loads(self.files.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except Exception:  # noqa: BLE001 - gone already, or unreadable: it expires by itself
            return
        if held.get("owner") == self.owner:
            self.files.s3.delete_object(Bucket=bucket, Key=key)

    @contextmanager
    def holding(self, partitions: "Sequence[str]") -> "Iterator[None]":
        """All of `partitions` locked for the block (in key order), or CommitConflict naming one held elsewhere."""
        taken: list[str] = []
        try:
            for partition in sorted(set(partitions)):
                holder = self._take(partition)
                if holder is not None:
                    raise CommitConflict(f"partition {partition or '(table)'} is being rewritten by {holder}")
                taken.append(partition)
            yield
        finally:
            for partition in taken:
                self._release(partition)


class NoLocks:
    """Where no Spark-free rewrite can run beside (a table not on S3): Spark's own conflict check suffices."""

    @contextmanager
    def holding(self, partitions: "Sequence[str]") -> "Iterator[None]":
        yield
