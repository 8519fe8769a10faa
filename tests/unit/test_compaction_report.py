"""Compaction reports beside a live stream: the counts are measured (the plan's count, the commit's own metrics, a
fresh count after the run), never derived from each other, so they stay true while the stream adds files."""

from __future__ import annotations

from types import SimpleNamespace

from ingest.errors import CommitConflict
from ingest.formats.table_maintenance import Rewrite
from maintenance import metrics
from maintenance.compaction import (CompactionResult, PartitionResult, _compact_partition, count_after,
                                    files_added_meanwhile)


def _lake(rewrite):
    return SimpleNamespace(ref="t", maintenance=SimpleNamespace(rewrite_partition=rewrite))


def _never_conflicts(_exc):
    return None


def test_a_commit_that_rewrote_more_than_the_plan_saw_reports_no_negative_count():
    # The case: 190 files planned; by the time OPTIMIZE / rewrite_data_files ran the stream had added more,
    # and the commit rewrote 200 of them into 1. The old derived figure was 190 - 200 + 1 = -9.
    part = _compact_partition(_lake(lambda partition, layout: Rewrite(200, 1, 5_000_000)), None, "d=1", 190,
                              _never_conflicts, sleep=lambda _s: None)
    assert (part.status, part.files_before, part.files_rewritten, part.files_written) == ("compacted", 190, 200, 1)
    assert part.files_now is None  # not derived: only a count after the run sets it
    count_after([part], {"d=1": 12, "d=2": 3})
    assert part.files_now == 12
    assert files_added_meanwhile(190, 200, 1, 12) == 21  # 190 + 21 - 200 + 1 = 12


def test_table_figures_json_text_and_metrics_name_each_count():
    result = CompactionResult("orders", "iceberg", dry_run=False, seconds=10.0, partitions=[
        PartitionResult("d=2", "compacted", "", 190, 200, 1, bytes_rewritten=10 * 1024 ** 2),
        PartitionResult("d=1", "skipped", "conflict after 4 attempts", 30)])
    count_after(result.partitions, {"d=2": 12, "d=1": 31})
    data = result.to_json()
    assert {k: data[k] for k in ("files_before", "files_rewritten", "files_written", "files_now")} == {
        "files_before": 220, "files_rewritten": 200, "files_written": 1, "files_now": 43}
    assert "files_after" not in data and all(p["files_now"] >= 0 for p in data["partitions"])
    text = result.summary()
    assert "rewrote 200 files into 1" in text and "220 when planned, 43 there now (22 added by the stream" in text
    assert "-" not in text.split("files in them:")[1].split(";")[0]
    figures = metrics.compaction_figures(result)
    assert (figures["files_compacted"], figures["files_written"], figures["files_now"]) == (200, 1, 43)


def test_no_count_after_the_run_says_so_and_pushes_no_guess():
    result = CompactionResult("orders", "delta", dry_run=False, partitions=[
        PartitionResult("d=1", "compacted", "", 5, 5, 1)])
    count_after(result.partitions, None)
    assert result.files_now is None and result.to_json()["files_now"] is None
    assert "not counted after the run" in result.summary()
    assert "files_now" not in metrics.compaction_figures(result)


def test_dry_run_reports_the_plan_only():
    result = CompactionResult("orders", "delta", dry_run=True, partitions=[
        PartitionResult("d=1", "planned", "", 8), PartitionResult("d=2", "planned", "", 6)])
    assert result.files_now is None and result.files_rewritten == 0
    assert result.summary().startswith("orders: would compact 2 partition(s) holding 14 files")


def test_a_partition_given_up_after_conflicts_rewrote_nothing():
    def conflicting(partition, layout):
        raise RuntimeError("CommitFailedException: Cannot commit, found new snapshot")

    part = _compact_partition(_lake(conflicting), None, "d=1", 9, lambda exc: CommitConflict,
                              sleep=lambda _s: None)
    assert (part.status, part.files_rewritten, part.files_written, part.attempts) == ("skipped", 0, 0, 4)
    assert part.reason.startswith("conflict after 4 attempts")
