"""Commit-visible latency from a Delta table's own log, the same way for every system that writes the table.

For each commit `_delta_log/N.json`: its commitInfo timestamp and the data files it added. A row's latency is the
timestamp of the commit that added its file minus the row's intended send time (`event_time`, stamped by
bench.load). The commit timestamp is the writer's clock just before it writes N.json (Spark's Delta and delta-rs
alike), so it is a few milliseconds before the commit is visible; no clock inside the pipeline's own processing
is read. All processes share one machine clock.
"""

from __future__ import annotations

import json
import re

from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.settings import Settings

_COMMIT_FILE = re.compile(r"^\d{20}\.json$")


class DeltaLogReader:
    """Reads a Delta table's JSON commits, each once: a later call lists only what came after the last key seen
    (a drain loop polls this every second; re-reading the whole log each time would load the S3 under test)."""

    def __init__(self, location: str, settings: Settings):
        self.client = s3_client(settings)
        self.bucket, self.prefix = split_s3_uri(location.rstrip("/") + "/_delta_log/")
        self._commits: dict[int, dict] = {}
        self._last_key = ""

    def commits(self) -> list[dict]:
        """[{version, timestamp_ms, files: [relative path], records}] for every JSON commit, in version order."""
        extra = {"StartAfter": self._last_key} if self._last_key else {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix,
                                                                         **extra):
            for item in page.get("Contents", []):
                name = item["Key"].rsplit("/", 1)[1]
                if _COMMIT_FILE.match(name):  # not N.M.compacted.json, .crc, checkpoints or _-prefixed files
                    self._commits[int(name[:20])] = self._parse(int(name[:20]), item["Key"])
                    # Only commit keys move the listing start: other log files (e.g. _last_checkpoint, _commits/)
                    # sort after every N.json and would hide the commits still to come.
                    self._last_key = max(self._last_key, item["Key"])
        return [self._commits[v] for v in sorted(self._commits)]

    def _parse(self, version: int, key: str) -> dict:
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()
        commit = {"version": version, "timestamp_ms": None, "files": [], "records": 0}
        for line in body.splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                commit["timestamp_ms"] = action["commitInfo"].get("timestamp")
            elif "add" in action and action["add"].get("dataChange", True):
                commit["files"].append(action["add"]["path"])
                stats = action["add"].get("stats")
                if stats:
                    commit["records"] += json.loads(stats).get("numRecords", 0)
        return commit


def commits(location: str, settings: Settings) -> list[dict]:
    """Every JSON commit of the table at `location` (see DeltaLogReader.commits)."""
    return DeltaLogReader(location, settings).commits()


def row_latencies(location: str, settings: Settings, since_ms: int, until_ms: int
                  ) -> tuple[list[float], int, int]:
    """(latency seconds of every row whose intended send time is in [since_ms, until_ms), rows in the table,
    distinct event ids in the table)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from urllib.parse import unquote

    s3 = s3_filesystem(settings)
    bucket, key = split_s3_uri(location.rstrip("/"))
    latencies: list[float] = []
    total = 0
    ids: set[str] = set()
    for commit in commits(location, settings):
        if commit["timestamp_ms"] is None:
            continue
        for path in commit["files"]:
            table = pq.read_table(f"{bucket}/{key}/{unquote(path)}", columns=["event_id", "event_time"],
                                  filesystem=s3)
            total += table.num_rows
            ids.update(table.column("event_id").to_pylist())
            sent_ms = pc.cast(pc.cast(table.column("event_time"), pa.timestamp("ms", tz="UTC")), pa.int64())
            for value in sent_ms.to_pylist():
                if value is not None and since_ms <= value < until_ms:
                    latencies.append((commit["timestamp_ms"] - value) / 1000)
    return latencies, total, len(ids)


def s3_filesystem(settings: Settings):
    """A pyarrow S3 filesystem on the settings' endpoint and credentials."""
    from pyarrow import fs

    credentials = settings.aws_credentials()
    return fs.S3FileSystem(endpoint_override=settings.s3_endpoint, region=settings.aws_region,
                           access_key=credentials.get("access_key_id"),
                           secret_key=credentials.get("secret_access_key"),
                           session_token=credentials.get("session_token"),
                           scheme="http" if (settings.s3_endpoint or "").startswith("http://") else "https")


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "max": round(ordered[-1], 3)}
