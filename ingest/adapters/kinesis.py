"""A small boto3 Kinesis adapter: client from plain options, retries with exponential backoff and full jitter,
shard listing, and record pages that survive expired iterators.

Used on the driver (planning) and inside Python workers (reading), so it takes plain option dicts, never
Settings, and never logs credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from ingest.errors import KinesisError, KinesisThrottled, StreamNotFound
from ingest.retry import retrying
from ingest.kinesis_offsets import AFTER, AT_TIMESTAMP, TRIM_HORIZON, ShardInfo

RETRYABLE = {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException",
             "InternalFailure", "InternalFailureException", "ServiceUnavailable", "ServiceUnavailableException",
             "KMSThrottlingException", "RequestTimeout", "RequestTimeoutException"}
CREDENTIAL_ERRORS = {"UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException",
                     "AccessDeniedException", "InvalidClientTokenId", "MissingAuthenticationToken"}


def client_options(settings: Any) -> dict[str, str]:
    """Connection options for the data source (they travel to Python workers as reader options)."""
    out = {"region": settings.aws_region, **settings.aws_credentials()}
    if settings.kinesis_endpoint:
        out["endpoint"] = settings.kinesis_endpoint
    return out


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or type(exc).__name__


# Backoff for throttled calls: full jitter, the first wait below 0.1 s, doubling, never above 5 s.
BACKOFF_FIRST, BACKOFF_CAP = 0.1, 5.0


class KinesisClient:
    def __init__(self, options: dict[str, str], attempts: int = 8, sleep: Callable[[float], None] = time.sleep,
                 client: Any = None):
        self.attempts, self.sleep = attempts, sleep
        if client is None:
            import boto3
            from botocore.config import Config

            kwargs: dict[str, Any] = {"region_name": options.get("region") or "us-east-1",
                                      "config": Config(retries={"max_attempts": 1, "mode": "standard"},
                                                       connect_timeout=10, read_timeout=30)}
            if options.get("endpoint"):
                kwargs["endpoint_url"] = options["endpoint"]
            if options.get("access_key_id"):
                kwargs["aws_access_key_id"] = options["access_key_id"]
                kwargs["aws_secret_access_key"] = options.get("secret_access_key")
                if options.get("session_token"):
                    kwargs["aws_session_token"] = options["session_token"]
            client = boto3.client("kinesis", **kwargs)
        self.client = client

    def call(self, name: str, **kwargs: Any) -> dict:
        """One API call; throttling and dropped connections are retried up to `attempts` times."""
        try:
            for attempt in retrying((KinesisThrottled,), self.attempts + 1, first=BACKOFF_FIRST, cap=BACKOFF_CAP,
                                    jitter=True, sleep=self.sleep):
                with attempt:
                    return self._call_once(name, kwargs)
        except KinesisThrottled as exc:
            raise KinesisError(f"Kinesis {name} still failing after {self.attempts} retries: {exc}") from exc
        raise AssertionError("unreachable")

    def _call_once(self, name: str, kwargs: dict[str, Any]) -> dict:
        """The call, its failure put in the taxonomy: KinesisThrottled (retry), KinesisError (a fix is needed) or
        the SDK's own error (ExpiredIteratorException, which the reader handles, and anything unknown)."""
        try:
            return getattr(self.client, name)(**kwargs)
        except Exception as exc:  # botocore ClientError / EndpointConnectionError, classified below
            code = _code(exc)
            stream = kwargs.get("StreamName", "")
            if code == "ResourceNotFoundException":
                raise StreamNotFound(f"Kinesis stream {stream!r} not found ({exc}); create it or fix "
                                   "source.stream / AWS_REGION / LAKELINE_KINESIS_ENDPOINT") from exc
            if code in CREDENTIAL_ERRORS or type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
                raise KinesisError(f"Kinesis refused the credentials ({code}); check AWS_ACCESS_KEY_ID / "
                                   "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN") from exc
            if code in RETRYABLE or type(exc).__name__ in ("EndpointConnectionError", "ConnectionClosedError",
                                                           "ReadTimeoutError", "ConnectTimeoutError"):
                raise KinesisThrottled(code) from exc
            raise

    # ---- shards -----------------------------------------------------------------------------------------------
    def list_shards(self, stream: str) -> list[ShardInfo]:
        shards: list[ShardInfo] = []
        response = self.call("list_shards", StreamName=stream)
        while True:
            for s in response.get("Shards", []):
                shards.append(ShardInfo(
                    shard_id=s["ShardId"], parent=s.get("ParentShardId"),
                    adjacent_parent=s.get("AdjacentParentShardId"),
                    ending_sequence=s.get("SequenceNumberRange", {}).get("EndingSequenceNumber")))
            token = response.get("NextToken")
            if not token:
                return shards
            response = self.call("list_shards", NextToken=token)

    def split_shard(self, stream: str, shard_id: str) -> list[str]:
        """Split open shard `shard_id` at the middle of its hash key range (drills); returns the children's ids once
        the stream is active again."""
        response, shards = self.call("list_shards", StreamName=stream), []
        while True:
            shards += response.get("Shards", [])
            if not response.get("NextToken"):
                break
            response = self.call("list_shards", NextToken=response["NextToken"])
        keys = next(s for s in shards if s["ShardId"] == shard_id)["HashKeyRange"]
        middle = (int(keys["StartingHashKey"]) + int(keys["EndingHashKey"])) // 2
        self.call("split_shard", StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str(middle))
        deadline = time.monotonic() + 60
        while self.call("describe_stream_summary", StreamName=stream)["StreamDescriptionSummary"][
                "StreamStatus"] != "ACTIVE":
            if time.monotonic() > deadline:
                raise KinesisError(f"Kinesis stream {stream!r} not active 60 s after splitting {shard_id}")
            self.sleep(1.0)
        return [s.shard_id for s in self.list_shards(stream) if s.parent == shard_id]

    def stream_exists(self, stream: str) -> bool:
        try:
            self.call("describe_stream_summary", StreamName=stream)
        except StreamNotFound:
            return False
        return True

    def delete_stream(self, stream: str) -> bool:
        """Delete `stream` (drill copies); False when it did not exist."""
        try:
            self.call("delete_stream", StreamName=stream, EnforceConsumerDeletion=True)
        except StreamNotFound:
            return False
        return True

    def iterator(self, stream: str, shard_id: str, position: str) -> str:
        kwargs: dict[str, Any] = {"StreamName": stream, "ShardId": shard_id}
        if position.startswith(AFTER):
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                          StartingSequenceNumber=position[len(AFTER):])
        elif position.startswith(AT_TIMESTAMP):
            kwargs.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=float(position[len(AT_TIMESTAMP):]))
        elif position == TRIM_HORIZON:
            kwargs.update(ShardIteratorType="TRIM_HORIZON")
        else:
            raise ValueError(f"cannot start a shard iterator at {position!r}")
        return self.call("get_shard_iterator", **kwargs)["ShardIterator"]

    def pages(self, stream: str, shard_id: str, position: str, page_limit: int = 10_000,
              max_empty_pages: int = 5) -> Iterator[tuple[list[dict], bool, bool]]:
        """Yield (records, shard_ended, caught_up) pages from `position` until the shard is caught up or ended.

        Caught up: an empty page with MillisBehindLatest == 0, or `max_empty_pages` empty pages in a row.
        Ended: NextShardIterator is null (a closed shard read to its end). An expired iterator is re-acquired
        after the last sequence number yielded. The caller stops iterating when it has what it needs.
        """
        last: str | None = None
        iterator = self.iterator(stream, shard_id, position)
        empty = 0
        while True:
            try:
                response = self.call("get_records", ShardIterator=iterator, Limit=min(page_limit, 10_000))
            except Exception as exc:
                if _code(exc) != "ExpiredIteratorException":
                    raise
                iterator = self.iterator(stream, shard_id, AFTER + last if last is not None else position)
                continue
            records = response.get("Records", [])
            nxt = response.get("NextShardIterator")
            if records:
                last = records[-1]["SequenceNumber"]
                empty = 0
            else:
                empty += 1
            caught_up = not records and response.get("MillisBehindLatest", 0) == 0
            yield records, nxt is None, caught_up
            if nxt is None or caught_up or empty >= max_empty_pages:
                return
            iterator = nxt
