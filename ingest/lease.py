"""One driver per pipeline across hosts: a lease object beside the checkpoint on S3, and the fencing token.

The lease is `<checkpoint location>.lease.json`, written only with S3 conditional PUTs: created with
`If-None-Match: *`, renewed, taken over and released with `If-Match: <the ETag read>`, so of two drivers racing
for it exactly one wins. Its age is measured by the store's own clock (the GET's `Date` less the object's
`Last-Modified`), so clock skew between hosts does not matter. A lease is free when it was released, when it has
not been renewed for `ttl` seconds, or when its holder ran on this host and its process is gone (kill -9: a standby
on the same host need not wait the ttl out).

Every acquisition takes a token one higher than the last: the fencing token. The driver raises each table's fence
(`lakeline.fence.<pipeline>`) to it before it reads where the tables stand, and every commit checks it inside the
table's own atomic commit (ingest.formats, ARCHITECTURE.md), so a driver that lost the lease (paused, partitioned)
cannot commit once the next one has started, even if it never notices that it lost it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from ingest.errors import ConfigError, LeaseHeld

log = logging.getLogger(__name__)

LEASE_SUFFIX = ".lease.json"
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class LeaseState:
    """The lease object as read: its holder, token, and how long ago it was last written (store clock)."""

    token: int
    owner: str
    host: str
    pid: int
    released: bool
    age: float
    etag: str


def host_id(settings) -> str:
    """This host's name in leases (LAKELINE_HOST_ID, default the hostname): two state folders with different ids
    are two hosts to the lease."""
    return settings.host_id or socket.gethostname()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_free(state: LeaseState | None, ttl: float, host: str, alive: Callable[[int], bool] = _process_alive) -> bool:
    """Whether a driver may take the lease now (pure: the decision every acquisition makes)."""
    return (state is None or state.released or state.age > ttl
            or (state.host == host and not alive(state.pid)))


def lease_uri(checkpoint_location: str) -> str | None:
    """Where a pipeline's lease lives, or None when its checkpoint is not on S3 (then only the host lock holds)."""
    return checkpoint_location + LEASE_SUFFIX if checkpoint_location.startswith(("s3a://", "s3://")) else None


class PipelineLease:
    """The lease of one pipeline, held by this process once `acquire` returned its token."""

    def __init__(self, pipeline: str, uri: str, client, ttl: float, host: str | None = None):
        from ingest.adapters.object_store import split_s3_uri

        if ttl < 3:
            raise ConfigError(f"LAKELINE_LEASE_SECONDS={ttl:g}: use 3 seconds or more (the lease is renewed every "
                              f"third of it)")
        self.pipeline, self.uri, self.ttl = pipeline, uri, ttl
        self.bucket, self.key = split_s3_uri(uri)
        self._s3 = client
        self.owner, self.host, self.pid = uuid.uuid4().hex, host or socket.gethostname(), os.getpid()
        self.token: int | None = None
        self._etag: str | None = None
        self._writes = 0
        self._renewer: threading.Thread | None = None
        self._done = threading.Event()
        # One write at a time: the renewer's and the starting driver's (raise_token) or the stopping one's (release),
        # each reading the token and ETag the previous write left.
        self._writing = threading.Lock()

    # ---- the store ------------------------------------------------------------------------------------------
    def read(self) -> LeaseState | None:
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=self.key)
        except self._s3.exceptions.NoSuchKey:
            return None
        body = json.loads(response["Body"].read())
        now = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
        age = max(0.0, (now - response["LastModified"]).total_seconds())
        return LeaseState(token=int(body.get("token", 0)), owner=body.get("owner", ""), host=body.get("host", ""),
                          pid=int(body.get("pid", 0)), released=bool(body.get("released")), age=age,
                          etag=response["ETag"])

    def _put(self, token: int, condition: dict, released: bool = False) -> bool:
        """Write the lease if `condition` (IfMatch / IfNoneMatch) holds; False when the store refused (412), unless
        the store shows the lease still ours as this write would leave it (`_landed`)."""
        from botocore.exceptions import ClientError

        self._writes += 1
        body = {"pipeline": self.pipeline, "token": token, "owner": self.owner, "host": self.host, "pid": self.pid,
                "released": released, "ttl_s": self.ttl, "write": self._writes}
        try:
            response = self._s3.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(body).encode(),
                                           ContentType="application/json", **condition)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or exc.response.get("Error", {}).get("Code") in (
                    "PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return self._landed(token, released)
            raise
        self.token, self._etag = token, response["ETag"]
        return True

    def _landed(self, token: int, released: bool) -> bool:
        """A refused conditional write can still have succeeded: a try that timed out may have landed, and the
        client's retry is then refused by that very write. The outcome is read, never guessed: True (and the ETag
        adopted) only when the store holds this lease's owner and `token` (no other driver wrote since: each
        writes its own owner) and the `released` flag this write meant to set."""
        state = self.read()
        if state is None or (state.owner, state.token, state.released) != (self.owner, token, released):
            return False
        log.info(f"pipeline {self.pipeline}: a lease write landed although its answer was lost; still held")
        self.token, self._etag = token, state.etag
        return True

    # ---- holding it -----------------------------------------------------------------------------------------
    def acquire(self, wait: threading.Event | None = None, on_wait: Callable[[LeaseState], None] | None = None,
                at_least: int = 0) -> int:
        """Take the lease and return its token (above `at_least`). Without `wait`, a lease held by a live driver
        is refused (LeaseHeld); with it, poll until the lease is free or `wait` is set (then LeaseHeld too)."""
        told = False
        while True:
            state = self.read()
            if is_free(state, self.ttl, self.host):
                token = max(state.token if state else 0, at_least) + 1
                condition = {"IfNoneMatch": "*"} if state is None else {"IfMatch": state.etag}
                if self._put(token, condition):
                    log.info(f"pipeline {self.pipeline}: lease {self.uri} taken with token {token}")
                    return token
                continue  # another driver wrote it first: look again
            if wait is None:
                raise LeaseHeld(f"pipeline {self.pipeline}: a driver on host {state.host} (pid {state.pid}) holds "
                                f"its lease {self.uri} (renewed {state.age:.0f}s ago; it lapses after {self.ttl:g}s "
                                f"without renewal). Stop that driver first, or start this one with --standby to take "
                                f"over when the lease lapses.")
            if not told and on_wait is not None:
                on_wait(state)
                told = True
            if wait.wait(POLL_SECONDS):
                raise LeaseHeld(f"pipeline {self.pipeline}: stopped while waiting for its lease {self.uri}")

    def raise_token(self, at_least: int) -> int:
        """Make the held token greater than `at_least` (a table fenced higher than the lease says: the lease object
        was deleted or restored); returns the token. LeaseHeld if the lease was lost meanwhile."""
        with self._writing:
            if self.token is not None and self.token > at_least:
                return self.token
            if not self._put(at_least + 1, {"IfMatch": self._etag}):
                raise LeaseHeld(f"pipeline {self.pipeline}: lost its lease {self.uri} while starting")
            return self.token

    def renew(self) -> bool:
        """Write the lease again (same token): False once another driver has changed it."""
        with self._writing:
            return self._put(self.token, {"IfMatch": self._etag})

    def lost_to(self) -> str | None:
        """Why this driver no longer holds the lease (another driver's token or owner is on it, or it is gone), or
        None while it does. Only reads the store; an unreachable store raises."""
        state = self.read()
        if state is None:
            return f"the lease {self.uri} was deleted"
        if state.owner != self.owner or state.token != self.token:
            return f"another driver took over the lease {self.uri} (host {state.host}, token {state.token})"
        return None

    def keep_renewed(self, on_lost: Callable[[str], None]) -> None:
        """Renew every third of the ttl on a thread of its own; call `on_lost(why)` once if it is taken over, or
        cannot be written for a whole ttl (the store unreachable: another driver may take it then)."""
        def renew_loop() -> None:
            last_written = time.monotonic()
            while not self._done.wait(self.ttl / 3):
                try:
                    if not self.renew():
                        if not self._done.is_set():  # released meanwhile: a clean stop, not a loss
                            on_lost(f"another driver took over the lease {self.uri}")
                        return
                    last_written = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - the store is unreachable: try again until the ttl is out
                    if time.monotonic() - last_written > self.ttl:
                        on_lost(f"the lease {self.uri} could not be renewed for {self.ttl:g}s ({exc})")
                        return
                    log.warning(f"pipeline {self.pipeline}: lease renewal failed, retrying: {exc}")

        self._renewer = threading.Thread(target=renew_loop, name="lakeline-lease", daemon=True)
        self._renewer.start()

    def release(self) -> None:
        """Stop renewing and mark the lease released, so that a waiting standby takes over at once (only if it is
        still ours)."""
        self._done.set()
        if self._renewer is not None:
            self._renewer.join(10)
        try:
            with self._writing:
                if self.token is not None and self._etag is not None:
                    self._put(self.token, {"IfMatch": self._etag}, released=True)
        except Exception as exc:  # noqa: BLE001 - the lease then lapses after its ttl instead
            log.warning(f"pipeline {self.pipeline}: could not release its lease {self.uri}: {exc}")


def pipeline_lease(pipeline: str, checkpoint_location: str, settings) -> PipelineLease | None:
    """The pipeline's lease, or None where the checkpoint is not on S3 (a local folder: the host lock suffices)."""
    from ingest.adapters.object_store import s3_client

    uri = lease_uri(checkpoint_location)
    # botocore's own timeouts and retries: a renewal that fails for a whole ttl loses the lease, so a short timeout
    # would turn a slow answer (a loaded store) into a false loss; a try that timed out but landed is recognised
    # by `_landed`.
    return None if uri is None else PipelineLease(pipeline, uri, s3_client(settings), settings.lease_seconds,
                                                    host_id(settings))
