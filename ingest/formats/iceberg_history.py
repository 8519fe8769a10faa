"""Iceberg snapshot history bounded by the running pipeline, off the commit path.

Every Iceberg commit rewrites the table's `metadata.json` whole, and that file lists every snapshot the table
keeps: about 1.4 KB each on Lakeline's tables. A stream commits every second or so, so a table whose snapshots only
`lakeline retain` expires (168 h by default, daily) would carry hundreds of thousands of them, and each commit would
write hundreds of MB (bench.commit_cost --iceberg-history: 4,000 snapshots, a 5.6 MB file, made a commit 0.11 s
slower on the local stack). So the pipeline expires its table's snapshots itself, after the first commit of a
process and then after every EXPIRE_EVERY-th, on a thread of its own, by the table's own properties:
`history.expire.max-snapshot-age-ms` and `history.expire.min-snapshots-to-keep` (Iceberg's), and
`lakeline.history.max-snapshots` (a cap on the count, which is what a commit's cost follows). Tables Lakeline
creates keep at most 2,000 snapshots and none older than 6 h: time travel reaches back that far, about half an hour
for a stream committing every second. `lakeline retain` still removes files.

Why this is safe: it only edits metadata (`cleanExpiredFiles(false)`): no data file, manifest or manifest list is
deleted here. Files no snapshot references any more become orphans, which `lakeline retain` removes past its
`orphan_older_than`, dry-run first, as before. The current snapshot is never expired (Iceberg's rule), and the
cutoff stops at the snapshot holding the pipeline's newest commit record (its resume offsets), as retention's does.
The expiry is one Iceberg commit through the same catalog as the stream's: a conflict with the stream's next append
is retried by whichever commits second. It carries no commit record, so the fence lets a fenced-out driver's expiry
through: it expires only what the table's limits allow and keeps the newest commit record, whoever wrote it. A table
that does not set the max age (one made by an earlier release, or elsewhere) is left alone: conf/README.md gives the
ALTER that hands it over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ingest.errors import ConfigError
from ingest.formats.background import CountingUpkeep

log = logging.getLogger(__name__)

MAX_SNAPSHOT_AGE_KEY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_KEY = "history.expire.min-snapshots-to-keep"
MAX_SNAPSHOTS_KEY = "lakeline.history.max-snapshots"
STREAM_MAX_SNAPSHOT_AGE_MS = 6 * 3600 * 1000  # on tables Lakeline creates: at most 6 h of time travel
STREAM_MAX_SNAPSHOTS = 2000  # and at most 2,000 snapshots (a metadata.json of about 3 MB)
STREAM_MIN_SNAPSHOTS = 100
EXPIRE_EVERY = 100  # commits by this process between two expiries


def takes_over(table_max_age: str | None) -> bool:
    """Whether the pipeline expires a table's snapshots: only where the table sets its own max snapshot age (tables
    Lakeline creates do); Iceberg's 5-day default on a stream's table is not a choice anyone made."""
    if table_max_age is None:
        return False
    try:
        return int(table_max_age) > 0
    except ValueError:
        return False


def history_limits(properties: Mapping[str, str]) -> tuple[int, int, int]:
    """(max age ms, snapshots to keep at least, max snapshots or 0 for no cap) from a table's properties;
    ConfigError naming the property when one is not a positive whole number."""
    values = []
    for key, default in ((MAX_SNAPSHOT_AGE_KEY, None), (MIN_SNAPSHOTS_KEY, "1"), (MAX_SNAPSHOTS_KEY, "0")):
        raw = properties.get(key) or default
        try:
            value = int(raw)
            if value < 0 or (value == 0 and key != MAX_SNAPSHOTS_KEY):
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"the table property {key} is {raw!r}: set a positive whole number with ALTER TABLE "
                              f"... SET TBLPROPERTIES ('{key}' = '...')") from None
        values.append(value)
    if values[2] and values[1] > values[2]:
        log.warning("the table property %s (%d) is above %s (%d): at least %d snapshots are kept", MIN_SNAPSHOTS_KEY,
                    values[1], MAX_SNAPSHOTS_KEY, values[2], values[1])
    return values[0], values[1], values[2]


def expiry_cutoff_ms(now_ms: int, max_age_ms: int, nth_newest_ms: int | None) -> int:
    """Expire snapshots older than this: past the max age, and (where the table keeps more than its max count)
    older than the newest `max count` snapshots, whose oldest committed at `nth_newest_ms`."""
    cutoff = now_ms - max_age_ms
    return cutoff if nth_newest_ms is None else max(cutoff, nth_newest_ms)


class SnapshotExpirer(CountingUpkeep):
    """Runs `expire()` (which returns how many snapshots it expired) on the EveryNCommits cadence."""

    what = "snapshot expiry"
    consequence = "The table keeps more snapshots until then: each commit writes a larger metadata.json."

    def __init__(self, name: str, expire: Callable[[], int], every: int = EXPIRE_EVERY):
        super().__init__(name, expire, every)
        from py4j.protocol import Py4JError  # heavy, and the pure limits above are unit-tested without them
        from pyspark.errors import PySparkException

        # ConfigError: a table property to fix, named; PySparkException: the snapshots query's own errors
        self.retryable = (Py4JError, PySparkException, OSError, ConfigError)

    @property
    def expired(self) -> int:
        """Snapshots expired by this process so far."""
        return self.total
