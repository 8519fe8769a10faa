"""Iceberg manifest merging by the running pipeline, off the commit path.

Each append adds one manifest to the table. Iceberg's default is to merge them inside the commit that reaches
`commit.manifest.min-count-to-merge` (100): that commit reads every manifest first, so one commit in a hundred took
0.9-1.6 s instead of 0.15-0.2 s on the local stack, with 104 GETs and 108 HEADs (bench.commit_cost). Tables Lakeline
creates turn that off (`commit.manifest-merge.enabled` = false) and set `lakeline.manifests.max-count` (100); the
pipeline then merges them itself, on a thread of its own (ingest.formats.background), once the current snapshot
holds that many manifests with added files (the appends' since the last merge): those, and only those, are
rewritten into manifests of `commit.manifest.target-size-bytes`, by Iceberg's RewriteManifests on the driver (its
worker pool reads them; no Spark job competes with the stream's batches). Manifests merged before, and the
partition-clustered ones `lakeline compact` writes, are left as they are, so a merge reads about 100 small manifests
however large the table; the next compaction's manifest rewrite consolidates the merged ones.

Why this is safe: a manifest rewrite lists the same data files (Iceberg checks the counts match) in fewer manifests,
under a `replace` snapshot that carries no commit record (marked `lakeline.upkeep` = `manifest-merge`), so the
exactly-once argument does not change: the newest commit record is found on a parent, as after compaction. Within
the driver the merge's commit takes turns with the stream's appends (the table's commit lock); a conflict with a
commit from another process (compaction, retention) is retried by whichever commits second. A table that does not
set `lakeline.manifests.max-count` (one made by an earlier release, or elsewhere) is left to Iceberg: conf/README.md
gives the ALTER that hands it over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ingest.errors import ConfigError
from ingest.formats.background import CountingUpkeep

MERGE_ENABLED_KEY = "commit.manifest-merge.enabled"
MAX_MANIFESTS_KEY = "lakeline.manifests.max-count"
STREAM_MAX_MANIFESTS = 100  # Iceberg's own commit.manifest.min-count-to-merge default
UPKEEP_KEY = "lakeline.upkeep"  # in the summary of a snapshot the pipeline's upkeep made (not a compaction)


def max_manifests(properties: Mapping[str, str]) -> int | None:
    """The manifest count at which the pipeline merges a table's manifests, or None when the pipeline leaves them to
    Iceberg (the table does not set lakeline.manifests.max-count). ConfigError naming the property for a value that
    is not a whole number above 1."""
    raw = properties.get(MAX_MANIFESTS_KEY)
    if raw is None:
        return None
    try:
        value = int(raw)
        if value < 2:
            raise ValueError
    except ValueError:
        raise ConfigError(f"the table property {MAX_MANIFESTS_KEY} is {raw!r}: set a whole number of 2 or more with "
                          f"ALTER TABLE ... SET TBLPROPERTIES ('{MAX_MANIFESTS_KEY}' = '100'), or unset it to leave "
                          f"manifest merging to Iceberg ({MERGE_ENABLED_KEY} = true)") from None
    return value


def check_every(limit: int) -> int:
    """Commits between two looks at the manifest count: half the limit, so while merges succeed a table holds about
    1.5x it at most."""
    return max(1, limit // 2)


class ManifestMerger(CountingUpkeep):
    """Runs `merge()` (which returns how many manifests it replaced, 0 when under the limit) on the EveryNCommits
    cadence."""

    what = "manifest merge"
    consequence = "Readers plan over more manifests until then; commits are not slowed."

    def __init__(self, name: str, merge: Callable[[], int], every: int):
        super().__init__(name, merge, every)
        from py4j.protocol import Py4JError  # heavy, and the pure limits above are unit-tested without it

        self.retryable = (Py4JError, OSError, ConfigError)

    @property
    def replaced(self) -> int:
        """Manifests replaced by this process's merges so far."""
        return self.total
