"""Measured table health: per partition file count, bytes, small files and size histogram, plus table-level
versions/snapshots, log or metadata size, oldest retained version and time since the last compaction.

Thin adapters over Spark: Delta through the snapshot's add files and the `_delta_log` folder, Iceberg through its
metadata tables (`files`, `partitions`, `snapshots`). The decisions live in maintenance.policy.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from maintenance.policy import MaintainedTable, PartitionHealth, TableHealth, format_size, size_histogram

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.settings import Settings


_COMMIT_FILE = re.compile(r"^\d{20}\.json$")  # not N.M.compacted.json or checkpoint files


def table_ref(table: MaintainedTable, settings: "Settings") -> str:
    """Delta: the table location; Iceberg: catalog.namespace.table."""
    name = table.sink_table()
    if table.format == "delta":
        return table.pipeline.delta_location(settings, name)
    return table.pipeline.iceberg_identifier(settings, name)


def list_status(spark: "SparkSession", path: str) -> list[tuple[str, int, int]]:
    """(name, size, modification time ms) of the files directly in `path`; [] if it does not exist."""
    jvm = spark._jvm  # noqa: SLF001 - py4j gateway is the only way to reach Hadoop FS from Python
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = jpath.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001
    if not fs.exists(jpath):
        return []
    return [(str(s.getPath().getName()), int(s.getLen()), int(s.getModificationTime()))
            for s in fs.listStatus(jpath) if s.isFile()]


def _utc(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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


def collect_health(spark: "SparkSession", table: MaintainedTable, settings: "Settings",
                   now: datetime | None = None) -> TableHealth:
    """Measure the table now (`now` only stamps the report)."""
    measured = now or datetime.now(UTC)
    ref = table_ref(table, settings)
    if table.format == "delta":
        return _delta_health(spark, table, ref, measured)
    return _iceberg_health(spark, table, ref, measured)


def _delta_health(spark: "SparkSession", table: MaintainedTable, location: str, now: datetime) -> TableHealth:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    jvm = spark._jvm  # noqa: SLF001
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, location)  # noqa: SLF001
    snapshot = pair._2()  # noqa: SLF001
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    column = table.partition_column
    part = F.concat(F.lit(f"{column}="), F.col("partitionValues")[column]) if column else F.lit("")
    rows = [(r["p"], r["size"], _utc(r["modificationTime"]))
            for r in files.select(part.alias("p"), "size", "modificationTime").collect()]
    log = list_status(spark, f"{location}/_delta_log")
    versions = [int(name[:20]) for name, _, _ in log if _COMMIT_FILE.match(name)]
    history = DeltaTable.forPath(spark, location).history().select("version", "timestamp", "operation")
    # Timestamps leave Spark as epoch millis: collect() would give naive local times, wrong off a UTC host.
    oldest = history.agg(F.min(F.unix_millis("timestamp"))).first()[0]
    optimized = history.where("operation = 'OPTIMIZE'").agg(F.max(F.unix_millis("timestamp"))).first()[0]
    compaction = table.policy.compaction
    return TableHealth(table.name, "delta", location, column, compaction.target_bytes, compaction.small_below,
                       _partitions(rows, table), len(versions), int(snapshot.version()),
                       sum(size for _, size, _ in log), _utc(oldest), _utc(optimized), now,
                       sorted(size for _, size, _ in rows))


def _iceberg_health(spark: "SparkSession", table: MaintainedTable, ident: str, now: datetime) -> TableHealth:
    from pyspark.sql import functions as F

    column = table.partition_column
    files = spark.table(f"{ident}.files").where("content = 0")
    part = F.concat(F.lit(f"{column}="), F.col(f"partition.{column}").cast("string")) if column else F.lit("")
    sizes = [(r["p"], r["file_size_in_bytes"]) for r in files.select(part.alias("p"), "file_size_in_bytes").collect()]
    updated: dict[str, datetime | None] = {}
    for r in spark.table(f"{ident}.partitions").select(
            (F.concat(F.lit(f"{column}="), F.col(f"partition.{column}").cast("string")) if column else F.lit(""))
            .alias("p"), F.unix_millis("last_updated_at").alias("updated_ms")).collect():
        updated[r["p"]] = _utc(r["updated_ms"])
    rows = [(p, s, updated.get(p)) for p, s in sizes]
    snapshots = spark.table(f"{ident}.snapshots")
    committed_ms = F.unix_millis("committed_at")
    stats = snapshots.agg(F.count("*").alias("n"), F.min(committed_ms).alias("oldest"),
                          F.max(F.when(F.col("operation") == "replace", committed_ms)).alias("replaced")).first()
    current = spark.sql(f"SELECT snapshot_id FROM {ident}.history WHERE is_current_ancestor "
                        f"ORDER BY made_current_at DESC LIMIT 1").collect()
    location = _iceberg_location(spark, ident)
    metadata = list_status(spark, f"{location}/metadata")
    compaction = table.policy.compaction
    return TableHealth(table.name, "iceberg", location, column, compaction.target_bytes, compaction.small_below,
                       _partitions(rows, table), int(stats["n"]), int(current[0][0]) if current else None,
                       sum(size for _, size, _ in metadata), _utc(stats["oldest"]), _utc(stats["replaced"]), now,
                       sorted(s for _, s in sizes))


def _iceberg_location(spark: "SparkSession", ident: str) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {ident}").collect():
        if row[0] == "Location":
            return row[1].rstrip("/")
    raise AssertionError(f"{ident}: DESCRIBE TABLE EXTENDED has no Location")


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


def format_health(health: TableHealth) -> str:
    since = "never" if health.last_compaction_at is None else \
        f"{(health.measured_at - health.last_compaction_at).total_seconds() / 3600:.1f}h ago"
    kind = "versions" if health.format == "delta" else "snapshots"
    lines = [
        f"{health.table} ({health.format}) {health.location}",
        f"  {health.files} files, {format_size(health.bytes)}, {health.small_files} small "
        f"(< {format_size(health.small_below)}; target {format_size(health.target_file_size)})",
        f"  {health.versions} {kind} retained (current {health.current_version}), "
        f"{'log' if health.format == 'delta' else 'metadata'} {format_size(health.metadata_bytes)}, oldest "
        f"{health.oldest_version_at.isoformat(timespec='seconds') if health.oldest_version_at else '-'}, "
        f"last compaction {since}",
        f"  {'partition':<28} {'files':>6} {'bytes':>10} {'small':>6} {'ratio':>6}  histogram (share of target)",
    ]
    for part in sorted(health.partitions, key=lambda p: p.partition, reverse=True):
        hist = " ".join(f"{k}:{v}" for k, v in part.size_histogram.items() if v)
        lines.append(f"  {part.partition or '(unpartitioned)':<28} {part.files:>6} {format_size(part.bytes):>10} "
                     f"{part.small_files:>6} {part.small_ratio:>6.2f}  {hist}")
    return "\n".join(lines)


def plot_sizes(path: str, runs: list[tuple[str, list[int]]], target: int) -> None:
    """PNG of the data-file size distribution on a log scale (small files are KB, the target is ~100 MB); two
    runs (e.g. before/after compaction) side by side."""
    import matplotlib

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
