"""Apache Iceberg read without Spark, through pyiceberg: pyiceberg plans the scan (snapshot, manifests, the
incremental append scan), and the planned data files become a pyarrow dataset whose fragments carry each file's
column bounds, so the filters DuckDB pushes skip files. A scan with delete files goes through pyiceberg's own
reader instead (Lakeline's appends and compactions write none)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.commits import COMMIT_KEY, CommitRecord
from ingest.errors import ConfigError
from ingest.formats import utc_from_millis
from ingest.formats.table_reader import (AsOf, TableCounts, TableReader, Version, fragments_dataset,
                                         partition_text)
from ingest.partitioning import partition_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from ingest.formats.table_maintenance import TableFiles
    from ingest.settings import Settings


def partition_keyer(table, partitioning: list) -> "Callable[[dict | None], str] | None":
    """The Lakeline partition key ('col=value/...', as on Delta) of a file's partition values as pyiceberg's
    `inspect.files()` gives them, for the table's current spec; None when that spec is not the pipeline's
    `partitioning` (one field each)."""
    from ingest.formats.iceberg_maintenance import shown_value

    names = [field.name for field in table.spec().fields]
    if len(names) != len(partitioning):
        return None

    def key(partition: dict | None) -> str:
        return partition_key([(field.column, shown_value(field, partition_text((partition or {}).get(name))))
                              for name, field in zip(names, partitioning, strict=True)])

    return key


def _aware(moment: datetime | None) -> datetime | None:
    """pyiceberg's metadata tables give UTC times without a zone."""
    return None if moment is None else moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


class IcebergTableReader(TableReader):
    format_name = "iceberg"

    def __init__(self, ref: str, settings: "Settings", hint: str = "", count_files: bool = False):
        super().__init__(ref, f"iceberg:{ref}", hint, count_files)
        self.settings = settings
        self.identifier = ref.split(".", 1)[1]  # the catalog's own name for it: namespace.table
        self._table = None
        self._filesystems: dict[tuple[str, str], object] = {}

    def catalog(self):
        from ingest.formats.iceberg import iceberg_catalog

        return iceberg_catalog(self.settings)

    def exists(self) -> bool:
        return self.catalog().table_exists(self.identifier)

    def table(self):
        from pyiceberg.exceptions import NoSuchTableError

        if self._table is None:
            try:
                self._table = self.catalog().load_table(self.identifier)
            except NoSuchTableError:
                raise self.not_found() from None
        return self._table

    def snapshot(self, as_of: AsOf | None = None):
        """The current snapshot, or the one `as_of` names (id) or was current at (time); None: an empty table."""
        table = self.table()
        if as_of is None:
            return table.current_snapshot()
        if isinstance(as_of, datetime):
            found = table.snapshot_as_of_timestamp(int(as_of.timestamp() * 1000))
            if found is None:
                raise ConfigError(f"{self.display_name} has no snapshot as of {as_of.isoformat()} (its history "
                                  "starts later or was expired)")
            return found
        found = table.snapshot_by_id(as_of)
        if found is None:
            raise ConfigError(f"{self.display_name} has no snapshot {as_of} (`lakeline query --versions` lists "
                              "the ones it keeps)")
        return found

    def features(self) -> set[str]:
        return {f"format-version-{self.table().format_version}"}

    def current_version(self) -> int:
        snapshot = self.table().current_snapshot()
        return snapshot.snapshot_id if snapshot else 0

    @staticmethod
    def _version(snapshot) -> Version:
        summary = snapshot.summary
        return Version(snapshot.snapshot_id, utc_from_millis(snapshot.timestamp_ms),
                       summary.operation.value if summary else "",
                       CommitRecord.from_json(summary.get(COMMIT_KEY) if summary else None))

    def _lineage(self) -> list:
        """The current snapshot and its ancestors, newest first."""
        from pyiceberg.table.snapshots import ancestors_of

        table = self.table()
        current = table.current_snapshot()
        return [] if current is None else list(ancestors_of(current, table.metadata))

    def versions(self) -> list[Version]:
        return [self._version(s) for s in reversed(self._lineage())]

    def last_commit(self, pipeline: str) -> Version | None:
        for snapshot in self._lineage():
            version = self._version(snapshot)
            if version.record and version.record.pipeline == pipeline:
                return version
        return None

    def counts(self, as_of: AsOf | None = None) -> TableCounts:
        snapshot = self.snapshot(as_of)
        if snapshot is None or snapshot.summary is None:
            return TableCounts(0, 0, 0)
        summary = snapshot.summary
        return TableCounts(int(summary.get("total-records") or 0), int(summary.get("total-data-files") or 0),
                           int(summary.get("total-files-size") or 0))

    def measure(self, partitioning: list) -> "TableFiles | None":
        from pyiceberg.table.snapshots import Operation

        from ingest.adapters.object_store import S3Files, is_s3_uri
        from ingest.formats.iceberg_manifests import UPKEEP_KEY
        from ingest.formats.table_maintenance import TableFiles

        table = self.table()
        location = table.location().rstrip("/")
        if not is_s3_uri(location):
            return None
        key = partition_keyer(table, partitioning)
        if key is None:
            return None  # Spark's measure explains the mismatch
        files = table.inspect.files()
        data = [(key(row["partition"]), int(row["file_size_in_bytes"]))
                for row in files.select(["content", "partition", "file_size_in_bytes"]).to_pylist()
                if row["content"] == 0]
        updated = {key(row.get("partition")): row["last_updated_at"]
                   for row in table.inspect.partitions().to_pylist()}
        snapshots = table.metadata.snapshots
        replaced = [s.timestamp_ms for s in snapshots if s.summary is not None
                    and s.summary.operation == Operation.REPLACE and UPKEEP_KEY not in s.summary.additional_properties]
        metadata = S3Files(self.settings).list_status(f"{location}/metadata")
        current = table.current_snapshot()
        return TableFiles(location, [(p, size, _aware(updated.get(p))) for p, size in data], len(snapshots),
                          current.snapshot_id if current else None, sum(size for _, size, _ in metadata),
                          utc_from_millis(min((s.timestamp_ms for s in snapshots), default=None)),
                          utc_from_millis(max(replaced, default=None)))

    # ---- scans -----------------------------------------------------------------------------------------------
    def dataset(self, as_of: AsOf | None = None):
        table = self.table()
        snapshot = self.snapshot(as_of)
        schema = table.schemas()[snapshot.schema_id] if snapshot and snapshot.schema_id is not None \
            else table.schema()
        if snapshot is None:
            return self._files_dataset(schema, [])
        return self._scan_dataset(table.scan(snapshot_id=snapshot.snapshot_id), schema)

    def changes_since(self, version: int):
        table = self.table()
        current = table.current_snapshot()
        if current is None or current.snapshot_id == version:
            return self._files_dataset(table.schema(), [])
        if table.snapshot_by_id(version) is None:
            raise ConfigError(f"{self.display_name} has no snapshot {version} (expired, or another table's)")
        try:
            scan = table.incremental_append_scan(from_snapshot_id_exclusive=version,
                                                 to_snapshot_id_inclusive=current.snapshot_id)
            return self._scan_dataset(scan, table.schema())
        except ValueError as exc:  # pyiceberg: not an ancestor of the current snapshot
            raise ConfigError(f"{self.display_name}: no appends since snapshot {version}: {exc}") from None

    def _scan_dataset(self, scan, schema):
        import pyarrow.dataset as ds

        tasks = list(scan.plan_files())
        if any(task.delete_files for task in tasks):
            return ds.dataset(scan.to_arrow())  # pyiceberg applies the deletes; no file pruning then
        return self._files_dataset(schema, [task.file for task in tasks])

    def _files_dataset(self, schema, data_files: list):
        import pyarrow.fs as pafs
        from pyiceberg.io.pyarrow import PyArrowFileIO, schema_to_pyarrow

        arrow_schema = schema_to_pyarrow(schema, include_field_ids=False)
        io = self.table().io
        files, filesystem = [], None
        for data_file in data_files:
            scheme, netloc, path = PyArrowFileIO.parse_location(data_file.file_path)
            if filesystem is None:
                filesystem = self.counting(io.fs_by_scheme(scheme, netloc))
            files.append((path, _bounds_expression(schema, arrow_schema, data_file)))
        if filesystem is None:
            return fragments_dataset(arrow_schema, [], self.counting(pafs.LocalFileSystem()))
        return fragments_dataset(arrow_schema, files, filesystem)


def _bounds_expression(schema, arrow_schema, data_file):
    """What a data file's column bounds say about its rows, as a pyarrow expression (top-level numbers, strings,
    dates and timestamps; a column with nulls in the file keeps them possible)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import (DateType, DecimalType, IntegerType, LongType, StringType, TimestampType,
                                 TimestamptzType)

    kinds = (DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType)
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    nulls = data_file.null_value_counts or {}
    expression = None
    for field in schema.fields:
        if not isinstance(field.field_type, kinds) or field.field_id not in lower or field.field_id not in upper:
            continue
        arrow_type = arrow_schema.field(field.name).type
        low = pa.scalar(from_bytes(field.field_type, lower[field.field_id]), arrow_type)
        high = pa.scalar(from_bytes(field.field_type, upper[field.field_id]), arrow_type)
        column = pc.field(field.name)
        term = (column >= low) & (column <= high)
        if nulls.get(field.field_id, 1) != 0:
            term = column.is_null() | term
        expression = term if expression is None else expression & term
    return expression
