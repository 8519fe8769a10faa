"""Delta Lake maintenance: file stats from the snapshot and `_delta_log`, OPTIMIZE for compaction, VACUUM for
retention. delta-spark and pyspark are imported inside the methods: they need a running Spark session anyway."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.formats import utc_from_millis
from ingest.formats.table_maintenance import Layout, RetentionOutcome, Rewrite, TableFiles, TableMaintenance
from ingest.partitioning import parse_key, partition_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from ingest.formats.delta import DeltaLakeTable

_COMMIT_FILE = re.compile(r"^\d{20}\.json$")  # not N.M.compacted.json or checkpoint files
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(week|day|hour|minute|second)s?\s*$", re.IGNORECASE)
_UNIT = {"week": 604800, "day": 86400, "hour": 3600, "minute": 60, "second": 1}
DEFAULT_DELETED_RETENTION = timedelta(weeks=1)
DELETED_RETENTION_KEY = "delta.deletedFileRetentionDuration"


def vacuum_hours(interval: timedelta) -> int:
    """The whole hours VACUUM is given for `interval`, rounded up: Delta rounds RETAIN to the nearest whole hour
    (VacuumCommand's math.round), so 1h20m would keep only 1h of history and 10m would become 0."""
    return math.ceil(interval.total_seconds() / 3600)


def parse_interval(value: str | None) -> timedelta | None:
    """Delta table property values such as 'interval 1 week' / 'interval 168 hours'."""
    match = _INTERVAL.match(value) if value else None
    if not match:
        return None
    return timedelta(seconds=int(match.group(1)) * _UNIT[match.group(2).lower()])


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class DeltaMaintenance(TableMaintenance):
    def __init__(self, table: "DeltaLakeTable"):
        self.table = table
        self.spark, self.location = table.spark, table.location

    def measure(self) -> TableFiles:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        snapshot, files, columns, values = self._files()
        rows = [(partition_key([(column, r[f"p{i}"]) for i, column in enumerate(columns)]), int(r["size"]),
                 utc_from_millis(r["modificationTime"]))
                for r in files.select(*values, "size", "modificationTime").collect()]
        log = HadoopFS(self.spark).list_status(f"{self.location}/_delta_log")
        versions = [int(name[:20]) for name, _, _ in log if _COMMIT_FILE.match(name)]
        history = DeltaTable.forPath(self.spark, self.location).history().select("version", "timestamp", "operation")
        # Timestamps leave Spark as epoch millis: collect() would give naive local times, wrong off a UTC host.
        oldest = history.agg(F.min(F.unix_millis("timestamp"))).first()[0]
        optimized = history.where("operation = 'OPTIMIZE'").agg(F.max(F.unix_millis("timestamp"))).first()[0]
        return TableFiles(self.location, rows, len(versions), int(snapshot.version()),
                          sum(size for _, size, _ in log), utc_from_millis(oldest), utc_from_millis(optimized))

    def _files(self):
        """A fresh snapshot, its live files, and their partition values as columns p0, p1, ..."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        snapshot = self.table.snapshot()
        files = DataFrame(snapshot.allFiles().toDF(), self.spark)
        columns = [field.column for field in self.table.partitioning]
        values = [F.col("partitionValues")[column].alias(f"p{i}") for i, column in enumerate(columns)]
        return snapshot, files, columns, values

    def file_counts(self) -> dict[str, int]:
        _, files, columns, values = self._files()
        return {partition_key([(column, r[f"p{i}"]) for i, column in enumerate(columns)]): int(r["count"])
                for r in files.select(*values).groupBy(*(f"p{i}" for i in range(len(columns)))).count().collect()}

    def rewrite_partitions(self, partitions: "Sequence[str] | None", layout: Layout) -> Rewrite:
        with self._locks().holding(partitions or [""]):  # see rewrite_locks: a delta-rs rewrite may run beside
            return self._rewrite(partitions, layout)

    def _locks(self):
        """The table's partition rewrite locks, where a Spark-free rewrite may run beside this one (on S3)."""
        from ingest.adapters.object_store import S3Files, is_s3_uri
        from ingest.formats.rewrite_locks import NoLocks, PartitionLocks

        settings = self.table.settings
        if settings is None or not is_s3_uri(self.location):
            return NoLocks()
        return PartitionLocks(S3Files(settings), self.location)

    def _rewrite(self, partitions: "Sequence[str] | None", layout: Layout) -> Rewrite:
        from delta.tables import DeltaTable

        self.spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(layout.target_bytes))
        self.spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(layout.small_below))
        builder = DeltaTable.forPath(self.spark, self.location).optimize()
        if partitions:
            builder = builder.where(" OR ".join("(" + " AND ".join(
                f"`{column}` IS NULL" if value is None else f"`{column}` = {_sql_string(value)}"
                for column, value in parse_key(partition)) + ")" for partition in partitions))
        metrics = (builder.executeZOrderBy(*layout.zorder_by) if layout.zorder_by
                   else builder.executeCompaction()).select("metrics").first()["metrics"]
        return Rewrite(int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]),
                       int(metrics["filesRemoved"]["totalSize"] or 0))

    # tidy_metadata: the default (nothing): Delta's log needs no rewrite after OPTIMIZE (it checkpoints itself)

    def retention_floor(self) -> tuple[timedelta | None, str]:
        from delta.tables import DeltaTable

        props = DeltaTable.forPath(self.spark, self.location).detail().select("properties").first()["properties"]
        floor = parse_interval((props or {}).get(DELETED_RETENTION_KEY))
        return (DEFAULT_DELETED_RETENTION if floor is None else floor), DELETED_RETENTION_KEY

    def remove_expired(self, retain: timedelta, orphan_older_than: timedelta, now: datetime,
                       dry_run: bool) -> RetentionOutcome:
        """VACUUM deletes files no version within `retain` references, including orphans older than `retain`;
        Delta has a single interval for both, so the orphan interval used is max(retain, orphan_older_than)."""
        asked = max(retain, orphan_older_than)
        hours = vacuum_hours(asked)
        listed = [r[0] for r in self.spark.sql(
            f"VACUUM delta.`{self.location}` RETAIN {hours} HOURS DRY RUN").collect()]
        if not dry_run and listed:
            self.spark.sql(f"VACUUM delta.`{self.location}` RETAIN {hours} HOURS")
        notes = [f"Delta VACUUM uses one interval for unreferenced and orphan files: max(retain, orphan_older_than) "
                 f"= {asked.total_seconds() / 3600:g}h"]
        if timedelta(hours=hours) != asked:
            notes.append(f"Delta VACUUM keeps whole hours: applied as {hours}h (rounded up, never shorter)")
        return RetentionOutcome(timedelta(hours=hours), files_deleted=listed, notes=notes)

    def replace_rows(self, frame: "DataFrame") -> None:
        (self.table.with_partition_values(frame).write.format("delta").mode("overwrite")
         .partitionBy(*(field.column for field in self.table.partitioning)).save(self.location))

    def drop(self) -> None:
        HadoopFS(self.spark).delete(self.location)
