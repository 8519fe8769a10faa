"""Which readers Lakeline supports for analysts, and which table features each can open at the pinned versions.

Lakeline never turns on a table feature that locks a supported reader out without saying so: a start refuses it
(unless `sink.allow_features` opts in), and the Spark-free readers refuse such a table with the same explanation
rather than a protocol error.
"""

from __future__ import annotations

from ingest.errors import ReaderLockedOut

# Delta reader features (protocol readerFeatures) each Spark-free reader cannot open. Skeleton: the compatibility
# work fills in the whole matrix and the docs table from it.
DELTA_FEATURES_UNREADABLE_BY = {
    "typeWidening": ("delta-rs", "DuckDB over delta-rs", "polars", "pandas", "lakeline query"),
}


def check_readable(display_name: str, format_name: str, features: set[str], reader: str) -> None:
    """Raise ReaderLockedOut when `features` of the table `display_name` lock `reader` out."""
    if format_name != "delta":
        return
    blocking = sorted(f for f in features if reader in DELTA_FEATURES_UNREADABLE_BY.get(f, ()))
    if blocking:
        raise ReaderLockedOut(
            f"{display_name} has the Delta table feature(s) {', '.join(blocking)}, which {reader} cannot read; "
            "read it with Spark SQL or the SQL endpoint (docs/readers.md)")
