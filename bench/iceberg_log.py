"""An Iceberg table's commits read from its own snapshots (through the embedded catalog, with pyiceberg), in the
shape of `bench.delta_log.DeltaLogReader.commits()`, so the drain and latency harness treats both formats alike.

A snapshot's `timestamp_ms` is the writer's clock as it commits, like a Delta commit's timestamp. Only snapshots
that added data count as commits with files.
"""

from __future__ import annotations

from ingest.settings import Settings


def _table_name(identifier: str) -> str:
    """pyiceberg names a table namespace.table inside its catalog: drop Spark's catalog prefix."""
    parts = identifier.split(".")
    return ".".join(parts[-2:])


class IcebergLogReader:
    def __init__(self, identifier: str, settings: Settings):
        from ingest.formats.iceberg import iceberg_catalog

        self.catalog = iceberg_catalog(settings)
        self.name = _table_name(identifier)

    def commits(self) -> list[dict]:
        """[{version, timestamp_ms, files, records}] for every snapshot, oldest first (`files`: one placeholder
        per data file added; the Delta reader gives their paths)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self.catalog.load_table(self.name)
        except NoSuchTableError:
            return []
        commits = []
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number or 0):
            summary = snapshot.summary
            files = int(summary.get("added-data-files") or 0) if summary else 0
            commits.append({"version": snapshot.sequence_number, "timestamp_ms": snapshot.timestamp_ms,
                            "files": ["data file"] * files,
                            "records": int(summary.get("added-records") or 0) if summary else 0})
        return commits


def rows_and_ids(identifier: str, settings: Settings) -> tuple[int, int]:
    """(rows in the table, distinct event ids)."""
    from ingest.formats.iceberg import iceberg_catalog

    ids = iceberg_catalog(settings).load_table(_table_name(identifier)).scan(
        selected_fields=("event_id",)).to_arrow().column("event_id").to_pylist()
    return len(ids), len(set(ids))


def row_latencies(identifier: str, settings: Settings, since_ms: int, until_ms: int
                  ) -> tuple[list[float], int, int]:
    """As `bench.delta_log.row_latencies` for an Iceberg table: each live data file is read once, and its rows
    count as visible at the timestamp of the snapshot that added the file (from the table's manifest entries)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.formats.iceberg import iceberg_catalog

    table = iceberg_catalog(settings).load_table(_table_name(identifier))
    committed_at = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
    entries = table.inspect.entries().to_pylist()
    latencies: list[float] = []
    total = 0
    ids: set[str] = set()
    for entry in entries:
        if entry["status"] == 2 or entry["data_file"]["content"] != 0:  # deleted entries, delete files
            continue
        with table.io.new_input(entry["data_file"]["file_path"]).open() as stream:
            rows = pa.parquet.read_table(stream, columns=["event_id", "event_time"])
        total += rows.num_rows
        ids.update(rows.column("event_id").to_pylist())
        at_ms = committed_at[entry["snapshot_id"]]
        sent_ms = pc.cast(pc.cast(rows.column("event_time"), pa.timestamp("ms", tz="UTC")), pa.int64())
        latencies += [(at_ms - value) / 1000 for value in sent_ms.to_pylist()
                      if value is not None and since_ms <= value < until_ms]
    return latencies, total, len(ids)
