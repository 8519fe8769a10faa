"""The Spark-free reader facet of a table (`TableFormat.reader(ref, settings)`): what an analyst, a notebook or a
BI extract reads, through the format's own library (delta-rs for Delta, pyiceberg for Iceberg) into Arrow and
DuckDB. Callers never branch on the format.

Every scan is a pyarrow dataset whose fragments carry what the table's metadata knows about each file (Delta's
partition values and column statistics, Iceberg's column bounds), so a filter DuckDB pushes into the scan skips
files without opening them; the dataset's file system counts the files a scan opened (`files_opened`), which is
how `lakeline query --stats` shows that pruning. pyarrow, duckdb and the format libraries are imported inside
functions: the command's help imports this module.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.commits import CommitRecord
from ingest.errors import ConfigError, TableNotFound

if TYPE_CHECKING:
    import pyarrow
    import pyarrow.dataset

    from ingest.formats.table_maintenance import TableFiles

AsOf = int | datetime  # a Delta version / Iceberg snapshot id, or a moment (the state current then)


@dataclass(frozen=True)
class Version:
    """One version (Delta) or snapshot (Iceberg) of a table."""
    version: int
    committed_at: datetime
    operation: str
    record: CommitRecord | None  # Lakeline's commit record, when a pipeline made this commit

    def to_json(self) -> dict:
        return {"version": self.version, "committed_at": self.committed_at.isoformat(), "operation": self.operation,
                "pipeline": self.record.pipeline if self.record else None,
                "batch_id": self.record.batch_id if self.record else None}


@dataclass(frozen=True)
class TableCounts:
    """Rows, data files and bytes of a table's state, from its metadata (no scan). rows is None when the metadata
    lacks a file's row count."""
    rows: int | None
    files: int
    bytes: int


def partition_text(value) -> str | None:
    """A partition value as Spark shows it as text (Delta's partitionValues, Iceberg's partition cast to string):
    dates and times in ISO form with a space, booleans in lower case."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ")
    if hasattr(value, "isoformat"):  # a date
        return value.isoformat()
    return str(value)


def parse_as_of(text: str) -> AsOf:
    """`--as-of` / `--since`: a version or snapshot id (digits), or an ISO-8601 time (UTC when no zone given)."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{text!r} is neither a version/snapshot id nor an ISO-8601 time "
                          "(e.g. 12, 6624402113127650000 or 2026-11-20T10:00:00+00:00)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class TableReader(ABC):
    """One table read without Spark. `hint` says what to do when the table does not exist yet (TableNotFound)."""

    format_name: str

    def __init__(self, ref: str, display_name: str, hint: str = "", count_files: bool = False):
        self.ref, self.display_name, self.hint = ref, display_name, hint
        self.count_files = count_files  # count the data files scans open (files_opened): a Python file system layer
        self._opened: set[str] = set()

    # ---- state -----------------------------------------------------------------------------------------------
    @abstractmethod
    def exists(self) -> bool:
        """Whether the table has been created."""

    def require(self) -> None:
        """TableNotFound (naming the table and what to do) unless it exists."""
        if not self.exists():
            raise self.not_found()

    def not_found(self) -> TableNotFound:
        return TableNotFound(f"{self.display_name} does not exist yet: "
                             f"{self.hint or 'run its pipeline (`lakeline ingest --pipeline FILE`) first'}")

    @abstractmethod
    def current_version(self) -> int:
        """The current Delta version / Iceberg snapshot id."""

    @abstractmethod
    def versions(self) -> list[Version]:
        """The versions/snapshots the table keeps, oldest first, with their commit times."""

    @abstractmethod
    def last_commit(self, pipeline: str) -> Version | None:
        """The newest commit carrying `pipeline`'s commit record (its record and commit time), or None."""

    @abstractmethod
    def counts(self, as_of: AsOf | None = None) -> TableCounts:
        """Rows, files and bytes from the metadata, without scanning data."""

    @abstractmethod
    def measure(self, partitioning: list) -> "TableFiles | None":
        """The table's live data files per partition and its version history, as `TableMaintenance.measure` gives
        them through Spark (the same partition keys, sizes and times), or None when only Spark can tell (a
        table not on S3). `partitioning`: the pipeline's declared fields (ingest.partitioning)."""

    @abstractmethod
    def features(self) -> set[str]:
        """The table features a reader must support (Delta's protocol reader features; Iceberg's format version)."""

    # ---- scans -----------------------------------------------------------------------------------------------
    @abstractmethod
    def dataset(self, as_of: AsOf | None = None) -> "pyarrow.dataset.Dataset":
        """The table's current state (or its state `as_of` a version, snapshot or time) as a lazy Arrow dataset."""

    @abstractmethod
    def changes_since(self, version: int) -> "pyarrow.dataset.Dataset":
        """The rows appended after `version` (a version / snapshot id this table had) up to the current state, read
        from the appends' own data files: an hourly extract reads only what arrived since its last run. Rewrites
        (compaction) add no rows here."""

    @property
    def files_opened(self) -> int:
        """Data files the scans of this reader have opened since it was made or `count_files_afresh()` (a file
        skipped by pruning is never opened); with `count_files` only."""
        return len(self._opened)

    def count_files_afresh(self) -> None:
        self._opened.clear()

    def to_arrow(self, columns: list[str] | None = None, filter=None, as_of: AsOf | None = None) -> "pyarrow.Table":
        """Rows as an Arrow table: `columns` to read, `filter` a pyarrow expression (prunes files)."""
        return self.dataset(as_of).to_table(columns=columns, filter=filter)

    def register(self, connection, name: str, as_of: AsOf | None = None, since: int | None = None) -> None:
        """Register the table in a DuckDB `connection` as `name` (a lazy scan DuckDB pushes filters and columns
        into); `since`: only the rows appended after that version/snapshot."""
        connection.register(name, self.changes_since(since) if since is not None else self.dataset(as_of))

    def query(self, sql: str, name: str = "t") -> list[tuple]:
        """Run `sql` in a fresh DuckDB session with this table registered as `name`."""
        import duckdb

        connection = duckdb.connect()
        try:
            self.register(connection, name)
            return connection.execute(sql).fetchall()
        finally:
            connection.close()

    # ---- helpers for the formats -----------------------------------------------------------------------------
    def counting(self, filesystem):
        """`filesystem` (pyarrow), wrapped with `count_files` so that the files scans open are counted in
        `files_opened`."""
        import pyarrow.fs as pafs

        if not self.count_files:
            return filesystem
        return pafs.PyFileSystem(_counting_handler()(filesystem, self._opened))


def fragments_dataset(schema, files: list[tuple[str, object]], filesystem) -> "pyarrow.dataset.Dataset":
    """A parquet dataset of `files` ((path, partition expression or None)) over `filesystem`, read as `schema`
    (files written before a column was added read it as null)."""
    import pyarrow.dataset as ds

    fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True))
    fragments = [fmt.make_fragment(path, filesystem=filesystem, partition_expression=expression)
                 if expression is not None else fmt.make_fragment(path, filesystem=filesystem)
                 for path, expression in files]
    return ds.FileSystemDataset(fragments, schema, fmt, filesystem)


@cache
def _counting_handler():
    """A pyarrow FileSystemHandler over another file system that records each file opened for reading (the class
    is made on first use: pyarrow is not imported with this module)."""
    import pyarrow.fs as pafs

    class CountingHandler(pafs.FileSystemHandler):
        def __init__(self, inner, opened: set[str]):
            self.inner, self.opened = inner, opened

        def __eq__(self, other):
            return self is other

        def __ne__(self, other):
            return self is not other

        def get_type_name(self):
            return "lakeline-counting+" + self.inner.type_name

        def normalize_path(self, path):
            return self.inner.normalize_path(path)

        def get_file_info(self, paths):
            return self.inner.get_file_info(paths)

        def get_file_info_selector(self, selector):
            return self.inner.get_file_info(selector)

        def create_dir(self, path, recursive):
            self.inner.create_dir(path, recursive=recursive)

        def delete_dir(self, path):
            self.inner.delete_dir(path)

        def delete_dir_contents(self, path, missing_dir_ok=False):
            self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

        def delete_root_dir_contents(self):
            self.inner.delete_dir_contents("/", accept_root_dir=True)

        def delete_file(self, path):
            self.inner.delete_file(path)

        def move(self, src, dest):
            self.inner.move(src, dest)

        def copy_file(self, src, dest):
            self.inner.copy_file(src, dest)

        def open_input_stream(self, path):
            return self.inner.open_input_stream(path)

        def open_input_file(self, path):
            self.opened.add(path)
            return self.inner.open_input_file(path)

        def open_output_stream(self, path, metadata):
            return self.inner.open_output_stream(path, metadata=metadata)

        def open_append_stream(self, path, metadata):
            return self.inner.open_append_stream(path, metadata=metadata)

    return CountingHandler
