"""Compaction of an Iceberg table's partitions without a JVM: pyiceberg reads a partition's data files and writes
them again as fewer files, committed as one `replace` snapshot.

Why: as for Delta (delta_rewrite.py), the files bound (`max_files_per_partition`) needs the partition the stream
writes rewritten every few minutes, and a Spark compaction task beside the stream costs minutes of a small box.

Why it is safe beside the stream: the commit is Iceberg's RewriteFiles, as Spark's `rewrite_data_files` makes it.
It names the files it removes, and at commit time (and at each retry after a concurrent commit) it checks that
every one of them is still in the table and has no new delete file; the stream's appends never touch them, so it
retries through them, and a second compaction of the same files fails that check instead of committing the rows
twice. The snapshot is `replace` (the table's rows unchanged), carries no commit record, and the exactly-once
argument finds the newest record on a parent, as after any compaction.

pyiceberg 0.12 has no rewrite of its own (apache/iceberg-python#3130 proposes one): `_ReplaceFiles` is its
overwrite producer with Java's RewriteFiles validation and the `replace` operation.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING

from ingest.errors import CommitConflict
from ingest.formats.commit_turn import commit_turn
from ingest.formats.table_maintenance import Layout, Rewrite, RewriteNeedsSpark

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ingest.partitioning import PartitionField
    from ingest.settings import Settings

REWRITE_KEY = "lakeline.rewrite"  # summary key naming the partition a Lakeline rewrite compacted, for the history
# The Parquet bytes one commit reads at most: the rows are held in memory (Arrow, several times their Parquet size)
# until written. A hot partition at its bound holds far less; past this, its smallest files are taken first.
MAX_INPUT_BYTES = 256 * 1024 ** 2


def _replace_files_class():
    """pyiceberg's overwrite producer as Iceberg's RewriteFiles: a `replace` snapshot, validated as Java validates
    a rewrite (the removed files still there, no new deletes for them), not as an overwrite (which also refuses
    any file appended meanwhile: every stream batch)."""
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles
    from pyiceberg.table.update.validate import _validate_data_files_exist, _validate_no_new_deletes_for_data_files

    class _ReplaceFiles(_OverwriteFiles):
        def _summary(self, snapshot_properties=None) -> Summary:
            # pyiceberg totals only the operations it writes itself; the totals of a rewrite are an overwrite's.
            summary = super()._summary(snapshot_properties or {})
            return Summary(Operation.REPLACE, **summary.additional_properties)

        def _validate_concurrency(self) -> None:
            window = self._commit_window
            if window is None or window.is_empty() or window.head is None:
                return
            table = self._transaction._table
            _validate_data_files_exist(table, window.head, self._deleted_data_files, window.base)
            _validate_no_new_deletes_for_data_files(table, window.head, None, self._deleted_data_files, window.base)

    return _ReplaceFiles


class IcebergRewriter:
    """Bin-packing compaction of chosen partitions of the Iceberg table `ref` (catalog.namespace.table), one
    `replace` commit per partition, through the shared catalog."""

    def __init__(self, ref: str, settings: "Settings", partitioning: "list[PartitionField]"):
        self.ref = ref
        self.identifier = ref.split(".", 1)[1]  # the catalog's own name for it: namespace.table
        self.settings = settings
        self.partitioning = partitioning

    def rewrite_partitions(self, partitions: "Sequence[str]", layout: Layout,
                           committing: "Callable[[], AbstractContextManager]" = nullcontext) -> Rewrite:
        """Compact each partition in a commit of its own (counts summed). CommitConflict when a commit could not
        land (its files were rewritten by another compaction, or the retries ran out); RewriteNeedsSpark when the
        table has what this does not write (delete files, a partition spec it cannot key)."""
        import pyarrow as pa

        from ingest.formats.iceberg import iceberg_catalog

        pa.set_cpu_count(1)  # one core for decoding and encoding: the stream keeps the others (as delta-rs' rewrite)
        catalog = iceberg_catalog(self.settings)
        return sum((self._rewrite(catalog.load_table(self.identifier), partition, layout, committing)
                    for partition in partitions), Rewrite(0, 0, 0))

    def _rewrite(self, table, partition: str, layout: Layout,
                 committing: "Callable[[], AbstractContextManager]") -> Rewrite:
        from pyiceberg.exceptions import CommitFailedException, ValidationException
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
        from pyiceberg.table import TableProperties
        from pyiceberg.table.snapshots import Operation

        tasks = self._partition_tasks(table, partition, layout.small_below)
        if len(tasks) < 2:
            return Rewrite(0, 0, 0)
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
        # pyiceberg cuts files by the rows' size in memory, several times their Parquet size: the target scaled by
        # what these files expanded by, so the files written come out near `target_bytes` on disk.
        expansion = max(1.0, rows.nbytes / max(1, sum(task.file.file_size_in_bytes for task in tasks)))
        target = table.metadata.model_copy(update={"properties": {
            **table.metadata.properties,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(int(layout.target_bytes * expansion))}})
        written = list(_dataframe_to_data_files(table_metadata=target, df=rows, io=table.io,
                                                write_uuid=uuid.uuid4()))
        del rows  # the partition's rows in memory: not held through the commit and its retries
        removed = [task.file for task in tasks]
        transaction = _transaction_class()(table)
        try:
            with committing(), _manifest_entries_read_once():
                # OVERWRITE: the producer's manifests; the snapshot says `replace` (_ReplaceFiles._summary).
                with _replace_files_class()(operation=Operation.OVERWRITE, transaction=transaction,
                                            io=table.io, snapshot_properties={REWRITE_KEY: partition or "(table)"}
                                            ) as rewrite:
                    for data_file in removed:
                        rewrite.delete_data_file(data_file)
                    for data_file in written:
                        rewrite.append_data_file(data_file)
                # The turn, for the commit's attempts only: the stream's swaps wait for them, which would lose most
                # races to it. Under it, the first attempt starts from the table as it is now.
                with commit_turn(table.metadata.location, self.settings).taken():
                    transaction.rebase()
                    transaction.commit_transaction()
        except (CommitFailedException, ValidationException) as exc:
            # Nothing landed (pyiceberg removed its manifests): the files written for it go too.
            for data_file in written:
                table.io.delete(data_file.file_path)
            raise CommitConflict(str(exc).splitlines()[0][:200]) from exc
        return Rewrite(len(removed), len(written), sum(f.file_size_in_bytes for f in removed))

    def _partition_tasks(self, table, partition: str, small_below: int) -> list:
        """The scan tasks of `partition`'s small data files (under `small_below` bytes) in the current spec;
        RewriteNeedsSpark where this cannot rewrite them. Files already compacted stay as they are (as Spark's
        rewrite leaves files over its min-file-size): taking them too rewrote the whole hot partition at every
        run, the work growing with the partition up to MAX_INPUT_BYTES a run."""
        import pyarrow as pa
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        from ingest.formats.iceberg_reader import partition_keyer

        key = partition_keyer(table, self.partitioning)
        if key is None:
            raise RewriteNeedsSpark("the table's partition spec is not the pipeline's")
        spec = table.spec()
        tasks = [task for task in table.scan().plan_files() if task.file.spec_id == spec.spec_id]
        if not tasks:
            return []
        # The partition values as `inspect.files()` gives them (dates, not day ordinals), so they key the same way
        # the files were counted (IcebergTableReader.measure).
        struct = schema_to_pyarrow(table.metadata.specs_struct(spec_ids=[spec.spec_id]))
        raw = [{field.name: task.file.partition[pos] for pos, field in enumerate(spec.fields)} for task in tasks]
        keys = [key(values) for values in pa.array(raw, type=struct).to_pylist()]
        chosen = [task for task, task_key in zip(tasks, keys, strict=True)
                  if task_key == partition and task.file.file_size_in_bytes < small_below]
        if any(task.delete_files for task in chosen):
            raise RewriteNeedsSpark("the partition has delete files")
        return within_input_bound(chosen)


def within_input_bound(tasks: list, max_bytes: int = MAX_INPUT_BYTES) -> list:
    """All of `tasks` when their files fit in `max_bytes`, else the smallest ones that do (at least two, or
    RewriteNeedsSpark: files that large are Spark's to rewrite)."""
    if sum(task.file.file_size_in_bytes for task in tasks) <= max_bytes:
        return tasks
    taken, total = [], 0
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        if total + task.file.file_size_in_bytes > max_bytes:
            break
        taken.append(task)
        total += task.file.file_size_in_bytes
    if len(taken) < 2:
        raise RewriteNeedsSpark(f"its files are too large to rewrite without Spark (over {max_bytes} bytes)")
    return taken


def _transaction_class():
    """pyiceberg's Transaction, its staged metadata computed once per change of the table's metadata or of what is
    staged, and its staged snapshot rebased on the table's newest metadata before the first attempt (`rebase`).

    Why: the snapshot producer reads `transaction.table_metadata` about ten times per commit attempt, and each read
    deep-copies the whole table metadata (a stream's table keeps up to 2,000 snapshots): 2.3 s of a 3.1 s attempt
    on bench.steady's table, against a stream that commits every second or two."""
    from pyiceberg.table import Transaction

    class _Transaction(Transaction):
        _staged: tuple | None = None

        def rebase(self) -> None:
            """Stage the snapshot again on the table as it is now, where appends landed since it was staged: what
            pyiceberg's retry does after an attempt lost to them, without that attempt (a read of the catalog's
            whole metadata) and its back-off. The commit window still starts where the rewrite read its files, so
            the validation covers every commit since. On a refusal, the manifests staged go, as at a lost retry."""
            producers = self._snapshot_producers
            try:
                self._table.refresh()
                if producers and self._table.metadata.current_snapshot_id != producers[0]._parent_snapshot_id:
                    self._rebuild_snapshot_updates()
            except Exception:
                for producer in producers:
                    producer._clean_all_uncommitted()
                self._failed = True
                raise

        @property
        def table_metadata(self):
            base, updates = self._table.metadata, self._updates
            if self._staged is None or self._staged[0] is not base or self._staged[1] is not updates:
                self._staged = (base, updates, super().table_metadata)
            return self._staged[2]

    return _Transaction


@contextmanager
def _manifest_entries_read_once() -> "Iterator[None]":
    """Each manifest's entries read once for a commit and all its retries.

    Why: pyiceberg's producer reads every manifest holding the partition again at each attempt (twice: the deletes,
    then the manifests to keep), where Java's keeps what it filtered; beside a stream that commits every second,
    an attempt that reads a hundred manifests loses every race. A manifest file never changes, so its entries
    read once stand; the new manifests of the stream's appends are the only ones read at a retry."""
    from pyiceberg.manifest import ManifestFile

    read = ManifestFile.fetch_manifest_entry
    entries: dict[tuple[str, bool], list] = {}

    def read_once(manifest, io, discard_deleted: bool = True) -> list:
        key = (manifest.manifest_path, discard_deleted)
        if key not in entries:
            entries[key] = read(manifest, io, discard_deleted=discard_deleted)
        return list(entries[key])

    ManifestFile.fetch_manifest_entry = read_once
    try:
        yield
    finally:
        ManifestFile.fetch_manifest_entry = read


def rewriter_for(ref: str, settings: "Settings", layout: Layout,
                 partitioning: "list[PartitionField]") -> IcebergRewriter | None:
    """A Spark-free rewriter for the Iceberg table `ref`, or None where only Spark compacts it (a sort or Z-order
    layout)."""
    if layout.zorder_by or layout.sort_by:
        return None
    return IcebergRewriter(ref, settings, partitioning)
