"""A Spark-free rewrite's turn to commit to an Iceberg table that a stream appends to every second.

Why: every Iceberg commit swaps the table's whole metadata in the catalog, and an attempt of pyiceberg's commit
(refresh, the rewrite's manifests again, a new metadata.json, the swap) takes about 0.3 s on an idle 2-core box
and 1-1.5 s beside the stream and a Spark compaction, while the stream commits every 1-2 s. Seen on bench.steady:
a files-bound rewrite lost ten attempts in a row, three times over, for six minutes, while the live partition grew
to 299 files. So the rewrite takes a turn for its commit: it writes `<table>/_lakeline/commit-turn.json` (its
owner and an expiry) before the commit and deletes it after. The stream's side is in the JVM
(`io.lakeline.iceberg.CommitTurn`, in the FencingCatalog's commit): each commit, just before its swap, waits while a
live turn is there. The stream writes its data files and manifests meanwhile, so it waits only for what is left of
the rewrite's attempt when its own swap comes. A commit that began its swap before the turn was written may still
beat the rewrite once; the rewrite's retry then lands before the stream's next swap.

The cost to the stream: one small read per commit, and a wait of at most what is left of one rewrite commit per
files-bound run. A rewriter killed mid-commit leaves a turn that holds the stream's commits for at most TURN_S,
once: they then ignore it. The turn is only an ordering aid: correctness never depends on it (each commit still
checks what it replaces).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ingest.adapters.object_store import S3Files

log = logging.getLogger(__name__)

TURN_S = 10.0  # the longest a stream waits for one turn: several commit attempts beside a busy stream (TURN_MS in
# the JVM's CommitTurn)


class CommitTurn:
    """The commit turn of the table at `table_location` (s3:// or s3a://)."""

    def __init__(self, files: "S3Files", table_location: str, turn_s: float = TURN_S,
                 clock: "Callable[[], float]" = time.time):
        self.files, self.turn_s, self.clock = files, turn_s, clock
        self.path = f"{table_location.rstrip('/')}/_lakeline/commit-turn.json"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def _held(self) -> dict | None:
        """The turn as written, or None when there is none."""
        try:
            return json.loads(self.files.read_bytes(self.path))
        except FileNotFoundError:
            return None

    @contextmanager
    def taken(self) -> "Iterator[None]":
        """The block is this rewrite's turn: the stream's next swaps wait until it ends (or TURN_S passes). A
        turn that cannot be written leaves the commit to race the stream, as it would without one."""
        try:
            self.files.write_bytes(self.path, json.dumps(
                {"owner": self.owner, "expires_at": self.clock() + self.turn_s}).encode())
        except Exception as exc:  # noqa: BLE001 - an ordering aid, never a reason to fail the rewrite
            log.warning(f"commit turn {self.path} not taken ({exc}); committing without it")
        try:
            yield
        finally:
            try:
                if (self._held() or {}).get("owner") == self.owner:  # another rewrite's turn is not ours to end
                    bucket, key = self.files._split(self.path)  # noqa: SLF001 - one object, not S3Files.delete's tree
                    self.files.s3.delete_object(Bucket=bucket, Key=key)
            except Exception as exc:  # noqa: BLE001 - it expires by itself; the rewrite's outcome stands
                log.warning(f"commit turn {self.path} not released ({exc}); it expires within {self.turn_s:.0f}s")


class NoTurn:
    """Where no Spark-free rewrite commits beside the stream (a table not on S3): nothing is written."""

    @contextmanager
    def taken(self) -> "Iterator[None]":
        yield


def commit_turn(table_location: str, settings) -> "CommitTurn | NoTurn":
    """The commit turn of a table on S3, or NoTurn elsewhere."""
    from ingest.adapters.object_store import S3Files, is_s3_uri

    return CommitTurn(S3Files(settings), table_location) if is_s3_uri(table_location) else NoTurn()
