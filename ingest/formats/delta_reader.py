"""Delta Lake read without Spark, through delta-rs: the table's state at a version or time, the rows its appends
added since a version (from the log's add actions, no change data feed needed), versions and commit records from
the log, counts from the add actions' statistics. A table whose reader features delta-rs cannot read is refused
with ingest.compatibility's explanation, not delta-rs' protocol error."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote

from ingest.commits import CommitRecord
from ingest.compatibility import check_readable
from ingest.errors import ConfigError, ReaderLockedOut
from ingest.formats import utc_from_millis
from ingest.formats.table_reader import (AsOf, TableCounts, TableReader, Version, fragments_dataset,
                                         partition_text)
from ingest.partitioning import partition_key

if TYPE_CHECKING:
    from ingest.formats.table_maintenance import TableFiles
    from ingest.settings import Settings

# The reader ingest.compatibility knows these reads by: `lakeline query` and the notebook API are DuckDB over
# delta-rs' Arrow dataset (the same features as delta-rs alone).
READER = "duckdb-delta"
_RECENT = 100  # history entries read first by last_commit(), before the whole log
_COMMIT_FILE = re.compile(r"^\d{20}\.json$")  # not N.M.compacted.json or checkpoint files


class DeltaTableReader(TableReader):
    format_name = "delta"

    def __init__(self, ref: str, settings: "Settings", hint: str = "", count_files: bool = False):
        from ingest.formats.delta import delta_rs_uri, delta_storage_options

        super().__init__(ref, f"delta:{ref}", hint, count_files)
        self.settings = settings
        self.uri, self.options = delta_rs_uri(ref), delta_storage_options(settings)
        self._table = None

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri, storage_options=self.options)

    def table(self, as_of: AsOf | None = None):
        """The delta-rs table at its current version (cached), or as of a version or time."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaProtocolError, TableNotFoundError

        if as_of is None and self._table is not None:
            return self._table
        if isinstance(as_of, datetime):
            as_of = self._version_at(as_of)
        try:
            table = DeltaTable(self.uri, storage_options=self.options, version=as_of)
        except TableNotFoundError:
            raise self.not_found() from None
        except DeltaProtocolError as exc:
            raise self._locked_out(exc) from None
        except ValueError as exc:  # delta-rs: a version the log no longer has, or a time before the first commit
            raise ConfigError(f"{self.display_name}: no state as of {as_of}: {exc}") from None
        if as_of is None:
            self._table = table
        return table

    def _version_at(self, moment: datetime) -> int:
        """The newest version committed at or before `moment`, by the commit times `versions()` shows (delta-rs'
        own time travel goes by the log files' modification times, which an object store keeps to the second)."""
        found = [v.version for v in self._history() if v.committed_at <= moment]
        if not found:
            raise ConfigError(f"{self.display_name} has no version as of {moment.isoformat()} (its history starts "
                              "later or was cleaned up)")
        return max(found)

    def _locked_out(self, exc: Exception) -> ReaderLockedOut:
        """delta-rs' protocol error as ingest.compatibility's explanation (the same one check-config gives)."""
        try:
            features = self.features()
        except Exception:  # noqa: BLE001 - the protocol itself unreadable: keep delta-rs' words
            features = set()
        check_readable(self.display_name, self.format_name, features, READER)
        return ReaderLockedOut(f"{self.display_name}: {exc}; read it with Spark SQL or the SQL endpoint "
                               "(docs/readers.md)")

    def features(self) -> set[str]:
        protocol = self.table().protocol()
        return set(protocol.reader_features or ())

    def current_version(self) -> int:
        return self.table().version()

    def _history(self, limit: int | None = None) -> list[Version]:
        """Newest first."""
        return [Version(int(entry["version"]), utc_from_millis(entry["timestamp"]), str(entry.get("operation", "")),
                        CommitRecord.from_json(entry.get("userMetadata")))
                for entry in self.table().history(limit)]

    def versions(self) -> list[Version]:
        return list(reversed(self._history()))

    def last_commit(self, pipeline: str) -> Version | None:
        return self._newest(lambda v: v.record is not None and v.record.pipeline == pipeline)

    def _newest(self, wanted) -> Version | None:
        """The newest version `wanted(version)` accepts: the recent history first, then the whole log."""
        for limit in (_RECENT, None):
            history = self._history(limit)
            found = next((v for v in history if wanted(v)), None)
            if found or limit is None or len(history) < limit:
                return found
        return None

    def counts(self, as_of: AsOf | None = None) -> TableCounts:
        import pyarrow as pa

        actions = pa.table(self.table(as_of).get_add_actions(flatten=True))
        rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None]
        return TableCounts(None if None in rows else sum(rows), actions.num_rows,
                           sum(actions.column("size_bytes").to_pylist()))

    def measure(self, partitioning: list) -> "TableFiles | None":
        import pyarrow as pa

        from ingest.adapters.object_store import S3Files, is_s3_uri
        from ingest.formats.table_maintenance import TableFiles

        if not is_s3_uri(self.ref):
            return None
        table = self.table()
        actions = pa.table(table.get_add_actions(flatten=True))
        columns = [field.column for field in partitioning]
        if actions.num_rows and any(f"partition.{column}" not in actions.column_names for column in columns):
            return None  # not partitioned as declared: Spark's measure says how
        values = [actions.column(f"partition.{column}").to_pylist() if actions.num_rows else [] for column in columns]
        times = actions.column("modification_time").cast(pa.int64()).to_pylist()  # epoch ms
        sizes = actions.column("size_bytes").to_pylist()
        files = [(partition_key([(column, partition_text(value[i]))
                                 for column, value in zip(columns, values, strict=True)]),
                  int(size), utc_from_millis(times[i])) for i, size in enumerate(sizes)]
        log = S3Files(self.settings).list_status(f"{self.ref.rstrip('/')}/_delta_log")
        commits = [modified for name, _, modified in log if _COMMIT_FILE.match(name)]
        # A version's time in Delta's history is its commit file's modification time, as listed here.
        optimized = self._newest(lambda v: v.operation == "OPTIMIZE")
        return TableFiles(self.ref.rstrip("/"), files, len(commits), table.version(),
                          sum(size for _, size, _ in log), utc_from_millis(min(commits, default=None)),
                          optimized.committed_at if optimized else None)

    def _filesystem(self, table):
        from deltalake.fs import DeltaStorageHandler
        import pyarrow.fs as pafs

        # What DeltaTable.to_pyarrow_dataset builds itself, wrapped to count the files a scan opens if asked.
        handler = DeltaStorageHandler.from_table(table._table, self.options,  # noqa: SLF001 - delta-rs' own handle
                                                 table._table.get_add_file_sizes())  # noqa: SLF001
        return self.counting(pafs.PyFileSystem(handler))

    def _check(self, table) -> None:
        check_readable(self.display_name, self.format_name, set(table.protocol().reader_features or ()), READER)

    def dataset(self, as_of: AsOf | None = None):
        from deltalake.exceptions import DeltaProtocolError

        table = self.table(as_of)
        self._check(table)
        try:
            return table.to_pyarrow_dataset(filesystem=self._filesystem(table))
        except DeltaProtocolError as exc:
            raise self._locked_out(exc) from None

    def changes_since(self, version: int):
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self.table()
        self._check(table)
        current = table.version()
        if version > current:
            raise ConfigError(f"{self.display_name} is at version {current}: no changes since version {version} yet")
        schema = pa.schema(table.schema().to_arrow())
        filesystem = self._filesystem(table)
        files: list[tuple[str, object]] = []
        for v in range(version + 1, current + 1):
            log_file = f"_delta_log/{v:020d}.json"
            try:
                with filesystem.open_input_stream(log_file) as stream:
                    lines = stream.read().decode().splitlines()
            except (FileNotFoundError, OSError):
                raise ConfigError(f"{self.display_name} no longer keeps the log of version {v} (log retention): "
                                  "read the whole table, or a later --since") from None
            for line in filter(None, lines):
                add = json.loads(line).get("add")
                if add and add.get("dataChange", True):
                    expression = None
                    for column, value in (add.get("partitionValues") or {}).items():
                        field = schema.field(column)
                        term = (pc.field(column).is_null() if value is None
                                else pc.field(column) == pa.scalar(value).cast(field.type))
                        expression = term if expression is None else expression & term
                    files.append((unquote(add["path"]), expression))
        # Some of these files may be gone from the current state (a later compaction removed them); they stay
        # readable until VACUUM deletes them.
        return fragments_dataset(schema, files, filesystem)
