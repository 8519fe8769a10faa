"""Measured table health: per partition file count, bytes, small files and size histogram, plus table-level
versions/snapshots, log or metadata size, oldest retained version and time since the last compaction.

The measuring is the table format's: through Spark (`table.maintenance.measure`: Delta's snapshot files and
`_delta_log`, Iceberg's metadata tables), or without a JVM through the format's own library where it can
(`measure_without_spark`, what `lakeline health` and the compaction DAG's decide use); this module groups it per
partition. The decisions live in maintenance.policy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.formats import LakeTable, format_for
from ingest.formats.table_maintenance import TableFiles
from maintenance.policy import MaintainedTable, PartitionHealth, TableHealth, format_size, size_histogram

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings


def table_ref(table: MaintainedTable, settings: "Settings") -> str:
    """Delta: the table location; Iceberg: catalog.namespace.table."""
    return format_for(table.format).ref(table.pipeline, settings, table.sink_table())


def open_table(spark: "SparkSession", table: MaintainedTable, settings: "Settings") -> LakeTable:
    """The maintained table (main or dead letters), opened in `spark`."""
    fmt = format_for(table.format)
    return fmt.open(spark, table_ref(table, settings), None, table.partitioning, table.pipeline.pipeline, settings)


def _partitions(rows: list[tuple[str, int, datetime | None]], table: MaintainedTable) -> list[PartitionHealth]:
    compaction = table.policy.compaction
    grouped: dict[str, list[tuple[int, datetime | None]]] = defaultdict(list)
    for partition, size, modified in rows:
        grouped[partition].append((size, modified))
    out = []
    for partition, files in sorted(grouped.items()):
        sizes = [s for s, _ in files]
        times = [t for _, t in files if t is not None]
        out.append(PartitionHealth(partition, len(sizes), sum(sizes),
                                   sum(1 for s in sizes if s < compaction.small_below),
                                   max(times) if times else None,
                                   size_histogram(sizes, compaction.target_bytes)))
    return out


def measure_without_spark(table: MaintainedTable, settings: "Settings") -> TableFiles | None:
    """The table measured by its format's own library (delta-rs, pyiceberg) and boto3, keyed as Spark keys it;
    None when only Spark can (not on S3, an Iceberg JDBC catalog, table features the library cannot read)."""
    from ingest.errors import ReaderLockedOut

    uri = settings.iceberg_catalog_uri or ""
    if table.format == "iceberg" and (not uri or uri.startswith("jdbc:")):
        return None
    fmt = format_for(table.format)
    try:
        return fmt.reader(table_ref(table, settings), settings).measure(table.partitioning)
    except ReaderLockedOut:
        return None


def collect_health(spark: "SparkSession | None", table: MaintainedTable, settings: "Settings",
                   now: datetime | None = None, measured: TableFiles | None = None) -> TableHealth:
    """Measure the table now (`now` only stamps the report), or take what `measure_without_spark` measured."""
    if measured is None:
        measured = open_table(spark, table, settings).maintenance.measure()
    compaction = table.policy.compaction
    partitioning = table.partitioning
    return TableHealth(table.name, table.format, measured.location, [f.column for f in partitioning],
                       [f.column for f in partitioning if f.transform.is_time], compaction.target_bytes,
                       compaction.small_below, _partitions(measured.files, table), measured.versions,
                       measured.current_version, measured.metadata_bytes, measured.oldest_version_at,
                       measured.last_compaction_at, now or datetime.now(UTC),
                       sorted(size for _, size, _ in measured.files))


# ---- output ------------------------------------------------------------------------------------------------
def health_json(health: TableHealth) -> dict:
    data = asdict(health)
    for key in ("oldest_version_at", "last_compaction_at", "measured_at"):
        data[key] = data[key].isoformat(timespec="seconds") if data[key] else None
    for part in data["partitions"]:
        part["newest_file_at"] = part["newest_file_at"].isoformat(timespec="seconds") \
            if part["newest_file_at"] else None
        part["small_ratio"] = round(part["small_files"] / part["files"], 4) if part["files"] else 0.0
    data["files"], data["bytes"], data["small_files"] = health.files, health.bytes, health.small_files
    since = (health.measured_at - health.last_compaction_at).total_seconds() if health.last_compaction_at else None
    data["seconds_since_last_compaction"] = since
    data.pop("file_sizes")
    return data


def plot_sizes(path: str, runs: list[tuple[str, list[int]]], target: int) -> None:
    """PNG of the data-file size distribution on a log scale (small files are KB, the target is ~100 MB); two
    runs (e.g. before/after compaction) side by side."""
    import matplotlib  # heavy, and only `--plot` draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    everything = [s for _, sizes in runs for s in sizes if s > 0] or [1]
    low, high = max(1, min(everything)) / 1.5, max(max(everything), target) * 1.5
    bins = np.geomspace(low, high, 50)
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False)
    for ax, (label, sizes) in zip(axes[0], runs, strict=True):
        ax.hist([s for s in sizes if s > 0] or [low], bins=bins, color="#4477aa")
        ax.set_xscale("log")
        ax.axvline(target, color="#cc3311", linestyle="--", label=f"target {format_size(target)}")
        ax.set_title(f"{label}: {len(sizes)} files, {format_size(sum(sizes))}")
        ax.set_xlabel("file size (bytes, log scale)")
        ax.set_ylabel("files")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
