"""The Spark-free rewrite of an Iceberg partition (pyiceberg over a local SQLite catalog): one `replace` commit
with the same rows in fewer files, through a concurrent append, and never twice for the same files."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from ingest.errors import CommitConflict
from ingest.formats.iceberg_rewrite import IcebergRewriter, rewriter_for
from ingest.formats.table_maintenance import Layout, RewriteNeedsSpark

LAYOUT = Layout(64 * 1024 ** 2, 32 * 1024 ** 2)
DAY_20 = "event_time_day=2026-11-20"


def _settings(tmp_path):
    from ingest.settings import Settings

    return Settings(warehouse=f"file://{tmp_path}/warehouse", iceberg_catalog_uri=f"sqlite:///{tmp_path}/cat.db")


def _partitioning():
    from pyspark.sql.types import TimestampType

    from ingest.partitioning import PartitionField, Transform

    return [PartitionField("event_time", Transform("day"), "event_time_day", TimestampType())]


def _rows(start: int, day: int = 20, count: int = 5):
    import pyarrow as pa

    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "event_time": pa.array([datetime(2026, 11, day, 1, i // 60 % 60, i % 60, tzinfo=UTC)
                                             for i in range(count)], pa.timestamp("us", "UTC"))})


def _table(tmp_path, appends: int = 6, rows: int = 5):
    """A table partitioned by day(event_time) with `appends` one-file appends of `rows` rows to 2026-11-20 and one
    to the 21st."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    from ingest.formats.iceberg import iceberg_catalog

    catalog = iceberg_catalog(_settings(tmp_path))
    catalog.create_namespace("lake")
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "event_time", TimestamptzType(), required=False))
    table = catalog.create_table("lake.events", schema, location=f"file://{tmp_path}/warehouse/events",
                                 partition_spec=PartitionSpec(PartitionField(2, 1000, DayTransform(),
                                                                             "event_time_day")))
    for n in range(appends):
        table.append(_rows(n * rows, count=rows))
    table.append(_rows(appends * rows, day=21))
    return catalog


def _state(catalog):
    table = catalog.load_table("lake.events")
    files = {}
    for task in table.scan().plan_files():
        day = task.file.partition[0]
        files[day] = files.get(day, 0) + 1
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    return table, files, ids


def test_a_partition_is_rewritten_into_one_file_in_a_replace_commit_with_the_same_rows(tmp_path):
    catalog = _table(tmp_path)
    _, files_before, ids_before = _state(catalog)
    rewriter = rewriter_for("lakeline.lake.events", _settings(tmp_path), LAYOUT, _partitioning())
    outcome = rewriter.rewrite_partitions([DAY_20], LAYOUT)
    assert (outcome.files_removed, outcome.files_added) == (6, 1) and outcome.bytes_rewritten > 0
    table, files_after, ids_after = _state(catalog)
    assert ids_after == ids_before and len(ids_after) == len(set(ids_after)) == 35
    assert sorted(files_before.values()) == [1, 6] and sorted(files_after.values()) == [1, 1]  # the 21st untouched
    summary = table.current_snapshot().summary
    assert summary.operation.value == "replace" and summary["lakeline.rewrite"] == DAY_20
    assert (summary["deleted-data-files"], summary["added-data-files"], summary["total-data-files"]) == ("6", "1", "2")
    assert summary["total-records"] == "35"
    # A partition of one file is left alone.
    assert rewriter.rewrite_partitions([DAY_20], LAYOUT).files_removed == 0


def test_files_already_compacted_are_not_rewritten_again(tmp_path):
    catalog = _table(tmp_path)
    rewriter = rewriter_for("lakeline.lake.events", _settings(tmp_path), LAYOUT, _partitioning())
    assert rewriter.rewrite_partitions([DAY_20], LAYOUT).files_removed == 6
    compacted = {task.file.file_path: task.file.file_size_in_bytes  # one file a day now
                 for task in catalog.load_table("lake.events").scan().plan_files()}
    table = catalog.load_table("lake.events")
    for n in range(3):  # the stream goes on writing the partition
        table.append(_rows(1000 + 5 * n))
    _, _, ids_before = _state(catalog)
    # A file at or over the small threshold (what the previous run wrote) stays; only the stream's three are read.
    layout = Layout(LAYOUT.target_bytes, small_below=max(compacted.values()))
    outcome = rewriter.rewrite_partitions([DAY_20], layout)
    assert (outcome.files_removed, outcome.files_added) == (3, 1), outcome
    table, files_after, ids_after = _state(catalog)
    assert ids_after == ids_before and sorted(files_after.values()) == [1, 2]
    assert set(compacted) <= {task.file.file_path for task in table.scan().plan_files()}


def test_a_rewrite_commits_through_the_streams_appends_in_between(tmp_path, monkeypatch):
    catalog = _table(tmp_path)
    planned = IcebergRewriter._partition_tasks

    def planned_then_appended(self, table, partition, small_below):
        tasks = planned(self, table, partition, small_below)
        catalog.load_table("lake.events").append(_rows(500))  # the stream's batch lands before the commit
        return tasks

    monkeypatch.setattr(IcebergRewriter, "_partition_tasks", planned_then_appended)
    from collections import Counter

    from pyiceberg.manifest import ManifestFile

    reads, read = Counter(), ManifestFile.fetch_manifest_entry

    def counted(manifest, io, discard_deleted=True):
        reads[(manifest.manifest_path, discard_deleted)] += 1
        return read(manifest, io, discard_deleted=discard_deleted)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counted)
    from pyiceberg.catalog.sql import SqlCatalog

    attempts, attempt = [], SqlCatalog.commit_table

    def counted_attempt(self, table, requirements, updates):
        attempts.extend(u.snapshot.summary.operation.value for u in updates if hasattr(u, "snapshot"))
        return attempt(self, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", counted_attempt)
    commits, during_commit = [], Counter()

    @contextmanager
    def committing():
        commits.append("started")
        reads.clear()  # the planning's reads before it are the scan's
        yield
        during_commit.update(reads)
        commits.append("done")

    outcome = IcebergRewriter("lakeline.lake.events", _settings(tmp_path), _partitioning()).rewrite_partitions(
        [DAY_20], LAYOUT, committing)
    assert (outcome.files_removed, outcome.files_added) == (6, 1) and commits == ["started", "done"]
    _, files, ids = _state(catalog)
    assert len(ids) == len(set(ids)) == 40  # the appended batch kept, nothing twice
    assert sorted(files.values()) == [1, 2]  # the rewrite's file and the batch's, beside the 21st's
    # Staged again on the append before the first attempt, which landed; that read only what the append added:
    # each manifest once.
    assert attempts == ["append", "replace"], attempts  # the stream's batch, then one attempt of the rewrite
    assert during_commit and max(during_commit.values()) == 1, during_commit
    assert ManifestFile.fetch_manifest_entry is counted  # the library's own method is back after the commit


def test_a_second_rewrite_of_the_same_files_is_refused_and_leaves_no_files_behind(tmp_path, monkeypatch):
    catalog = _table(tmp_path)
    settings = _settings(tmp_path)
    planned = IcebergRewriter._partition_tasks
    first = {"done": False}

    def planned_then_rewritten_by_another(self, table, partition, small_below):
        tasks = planned(self, table, partition, small_below)
        if not first["done"]:
            first["done"] = True  # another compaction rewrites the same files meanwhile, and commits first
            IcebergRewriter("lakeline.lake.events", settings, _partitioning()).rewrite_partitions([partition], LAYOUT)
        return tasks

    monkeypatch.setattr(IcebergRewriter, "_partition_tasks", planned_then_rewritten_by_another)
    data = tmp_path / "warehouse" / "events" / "data"
    with pytest.raises(CommitConflict):
        IcebergRewriter("lakeline.lake.events", settings, _partitioning()).rewrite_partitions([DAY_20], LAYOUT)
    table, files, ids = _state(catalog)
    assert len(ids) == len(set(ids)) == 35  # the rows once, not twice
    assert sorted(files.values()) == [1, 1]
    referenced = {task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()}
    written = {str(p) for p in data.rglob("*.parquet")}
    old = written - referenced
    assert len(old) == 6  # the first rewrite's inputs (retention removes them), and none of the refused one's


def test_what_it_cannot_rewrite_goes_to_spark(tmp_path):
    assert rewriter_for("lakeline.lake.events", _settings(tmp_path), Layout(1, 1, sort_by=("id",)),
                        _partitioning()) is None
    catalog = _table(tmp_path, appends=2)
    del catalog
    with pytest.raises(RewriteNeedsSpark, match="partition spec"):
        IcebergRewriter("lakeline.lake.events", _settings(tmp_path), []).rewrite_partitions([DAY_20], LAYOUT)


def test_a_partition_over_the_input_bound_rewrites_its_smallest_files_first():
    from types import SimpleNamespace

    from ingest.formats.iceberg_rewrite import within_input_bound

    def task(size):
        return SimpleNamespace(file=SimpleNamespace(file_size_in_bytes=size))

    tasks = [task(size) for size in (50, 10, 30, 20)]
    assert within_input_bound(tasks, max_bytes=110) is tasks
    assert [t.file.file_size_in_bytes for t in within_input_bound(tasks, max_bytes=65)] == [10, 20, 30]
    with pytest.raises(RewriteNeedsSpark, match="too large"):
        within_input_bound([task(100), task(100)], max_bytes=150)


def test_the_files_written_are_cut_by_their_size_on_disk_not_in_memory(tmp_path):
    catalog = _table(tmp_path, appends=12, rows=20_000)
    _, _, ids = _state(catalog)
    # A target of three input files' worth of Parquet: in memory the rows are several times that, which would cut
    # a file per input file or more without the scaling.
    table = catalog.load_table("lake.events")
    sizes = sorted(task.file.file_size_in_bytes for task in table.scan().plan_files())
    layout = Layout(target_bytes=3 * sizes[-1], small_below=3 * sizes[-1] // 2)
    outcome = IcebergRewriter("lakeline.lake.events", _settings(tmp_path), _partitioning()).rewrite_partitions(
        [DAY_20], layout)
    assert outcome.files_removed == 12 and outcome.files_added <= 6, outcome
    assert _state(catalog)[2] == ids


def test_the_transactions_staged_metadata_is_computed_once_per_change(tmp_path):
    from ingest.formats.iceberg_rewrite import _transaction_class

    catalog = _table(tmp_path, appends=1)
    table = catalog.load_table("lake.events")
    transaction = _transaction_class()(table)
    first = transaction.table_metadata
    assert transaction.table_metadata is first  # read ten times an attempt: not copied each time
    catalog.load_table("lake.events").append(_rows(100))
    table.refresh()  # a retry's refresh: the new metadata, and the append in it
    assert transaction.table_metadata is not first
    assert transaction.table_metadata.current_snapshot_id == table.metadata.current_snapshot_id != \
        first.current_snapshot_id
