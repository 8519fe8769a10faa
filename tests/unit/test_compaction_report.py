"""Compaction reports beside a live stream: the counts are measured (the plan's count, the commit's own metrics, a
fresh count after the run), never derived from each other, so they stay true while the stream adds files."""

from __future__ import annotations

from types import SimpleNamespace

from ingest.errors import CommitConflict
from ingest.formats.table_maintenance import Rewrite
from maintenance import metrics
from maintenance.compaction import (CommitResult, CompactionResult, PartitionResult, _commit, commit_groups,
                                    count_after, files_added_meanwhile)
from maintenance.policy import PartitionChoice


def _lake(rewrite):
    return SimpleNamespace(ref="t", maintenance=SimpleNamespace(rewrite_partitions=rewrite))


def _never_conflicts(_exc):
    return None


def test_a_commit_that_rewrote_more_than_the_plan_saw_reports_no_negative_count():
    # The case: 190 files planned; by the time OPTIMIZE / rewrite_data_files ran the stream had added more,
    # and the commit rewrote 200 of them into 1. The old derived figure was 190 - 200 + 1 = -9.
    commit = _commit(_lake(lambda partitions, layout: Rewrite(200, 1, 5_000_000)), None, ["d=1"], _never_conflicts,
                     sleep=lambda _s: None)
    part = PartitionResult("d=1", commit.status, commit.reason, 190, commit=0)
    assert (part.status, part.files_before, commit.files_rewritten, commit.files_written) == ("compacted", 190, 200, 1)
    assert part.files_now is None  # not derived: only a count after the run sets it
    count_after([part], {"d=1": 12, "d=2": 3})
    assert part.files_now == 12
    assert files_added_meanwhile(190, 200, 1, 12) == 21  # 190 + 21 - 200 + 1 = 12


def test_table_figures_json_text_and_metrics_name_each_count():
    result = CompactionResult("orders", "iceberg", dry_run=False, seconds=10.0, partitions=[
        PartitionResult("d=2", "compacted", "", 190, commit=0),
        PartitionResult("d=1", "skipped", "conflict after 4 attempts", 30, commit=1)], commits=[
        CommitResult(["d=2"], "compacted", "", 200, 1, 10 * 1024 ** 2),
        CommitResult(["d=1"], "skipped", "conflict after 4 attempts")])
    count_after(result.partitions, {"d=2": 12, "d=1": 31})
    data = result.to_json()
    assert {k: data[k] for k in ("files_before", "files_rewritten", "files_written", "files_now")} == {
        "files_before": 220, "files_rewritten": 200, "files_written": 1, "files_now": 43}
    assert "files_after" not in data and all(p["files_now"] >= 0 for p in data["partitions"])
    text = result.summary()
    assert "1 partition(s) in 1 commit(s), rewrote 200 files into 1" in text
    assert "220 when planned, 43 there now (22 added by the stream" in text
    assert "-" not in text.split("files in them:")[1].split(";")[0]
    figures = metrics.compaction_figures(result)
    assert (figures["files_compacted"], figures["files_written"], figures["files_now"]) == (200, 1, 43)


def test_no_count_after_the_run_says_so_and_pushes_no_guess():
    result = CompactionResult("orders", "delta", dry_run=False, partitions=[
        PartitionResult("d=1", "compacted", "", 5, commit=0)], commits=[CommitResult(["d=1"], "compacted", "", 5, 1)])
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
    def conflicting(partitions, layout):
        raise RuntimeError("CommitFailedException: Cannot commit, found new snapshot")

    commit = _commit(_lake(conflicting), None, ["d=1"], lambda exc: CommitConflict, sleep=lambda _s: None)
    assert (commit.status, commit.files_rewritten, commit.files_written, commit.attempts) == ("skipped", 0, 0, 4)
    assert commit.reason.startswith("conflict after 4 attempts")


def _choices(*names):
    return [PartitionChoice(name, "compact", "", 5, 100, 5) for name in names]


def test_settled_partitions_share_a_commit_and_each_hot_one_has_its_own_first():
    chosen = _choices("h=12", "h=11", "h=10", "h=09", "h=08", "h=07")
    groups = commit_groups(chosen, hot={"h=12", "h=09"}, per_commit=3)
    assert [[c.partition for c in group] for group in groups] == [
        ["h=12"], ["h=09"], ["h=11", "h=10", "h=08"], ["h=07"]]
    assert commit_groups([], hot=set()) == []


def test_the_format_is_asked_for_all_the_settled_partitions_in_one_call_and_the_whole_table_as_none():
    asked = []

    def rewrite(partitions, layout):
        asked.append(partitions)
        return Rewrite(12, 2, 1_000)

    commit = _commit(_lake(rewrite), None, ["h=11", "h=10"], _never_conflicts, sleep=lambda _s: None)
    _commit(_lake(rewrite), None, [""], _never_conflicts, sleep=lambda _s: None)
    assert asked == [["h=11", "h=10"], None]
    assert (commit.partitions, commit.files_rewritten, commit.files_written) == (["h=11", "h=10"], 12, 2)


def test_a_rewrite_without_spark_retries_its_conflicts_then_skips_and_says_it_used_no_spark():
    from maintenance.compaction import _commit_without_spark

    class Conflicting:
        calls = 0

        def rewrite_partitions(self, partitions, layout, committing=None):
            Conflicting.calls += 1
            raise CommitConflict("Commit failed: a concurrent transaction deleted the same data")

    commit = _commit_without_spark(Conflicting(), None, ["d=1"], sleep=lambda _s: None)
    assert (commit.status, commit.spark, Conflicting.calls) == ("skipped", False, 4)
    assert commit.reason.startswith("conflict after 4 attempts")

    class Rewriting:
        def rewrite_partitions(self, partitions, layout, committing=None):
            return Rewrite(61, 1, 9_000_000)

    done = _commit_without_spark(Rewriting(), None, ["d=1"], sleep=lambda _s: None)
    assert (done.status, done.files_rewritten, done.files_written, done.spark) == ("compacted", 61, 1, False)


def test_a_table_the_library_cannot_write_goes_back_to_spark():
    from ingest.formats.table_maintenance import RewriteNeedsSpark
    from maintenance.compaction import _commit_without_spark

    class Unsupported:
        def rewrite_partitions(self, partitions, layout, committing=None):
            raise RewriteNeedsSpark("writer feature typeWidening")

    assert _commit_without_spark(Unsupported(), None, ["d=1"], sleep=lambda _s: None) is None


def test_the_counts_of_several_commits_add_up():
    assert Rewrite(61, 1, 9_000) + Rewrite(40, 2, 5_000) == Rewrite(101, 3, 14_000)
