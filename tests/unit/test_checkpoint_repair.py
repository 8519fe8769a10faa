"""`checkpoint repair` on a local copy of a Spark checkpoint: every kind of damage it claims to detect is found,
explained, fixed by moving files aside (never deleting), and the repaired checkpoint reads back cleanly."""

from pathlib import Path

import pytest

from ingest.checkpoint import read_checkpoint
from ingest.commits import CommitRecord
from maintenance.checkpoint_repair import apply, diagnose
from tests.helpers import LocalFS

T = "orders"


def _offsets(end: int) -> str:
    return 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"%s":{"0":%d}}' % (T, end)


def _checkpoint(root: Path, batches: int = 4, pending: bool = False) -> str:
    """offsets/0..batches-1 and commits/0..batches-1 (each batch 10 offsets), plus offsets/<batches> if pending."""
    loc = root / "ckpt"
    (loc / "offsets").mkdir(parents=True)
    (loc / "commits").mkdir()
    (loc / "_lakeline").mkdir()
    (loc / "metadata").write_text('{"id":"6f1c0a1e-0000-4000-8000-000000000000"}')
    (loc / "_lakeline" / "lineage").write_text("L1\n")
    for batch in range(batches):
        (loc / "offsets" / str(batch)).write_text(_offsets(10 * (batch + 1)))
        (loc / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    if pending:
        (loc / "offsets" / str(batches)).write_text(_offsets(10 * (batches + 1)))
    return str(loc)


def table_at(end: int, batch: int = 3) -> CommitRecord:
    return CommitRecord("p", "L1", batch, {}, {(T, 0): end}, 0, 0)


def test_intact_checkpoint_needs_nothing(tmp_path):
    loc = _checkpoint(tmp_path, pending=True)
    plan = diagnose(LocalFS(), loc, table_at(40))
    assert plan.healthy and plan.findings == [] and plan.move == []
    assert plan.next_start.startswith("resume")
    assert apply(LocalFS(), plan) is None


@pytest.mark.parametrize("content,problem", [("", "truncated"), ("v1\n", "truncated"),
                                             ('v1\n{"nextBatchWaterm', "truncated"),
                                             ("\x00\x13garbage{{", "garbage")])
def test_damaged_newest_commit_is_dropped_and_its_batch_rerun(tmp_path, content, problem):
    loc = _checkpoint(tmp_path)
    Path(loc, "commits", "3").write_text(content)
    fs = LocalFS()
    with pytest.raises(ValueError, match="commits/3"):
        read_checkpoint(fs, loc)  # what a pipeline start would trip over
    plan = diagnose(fs, loc, table_at(40))
    assert plan.action == "drop-tail" and plan.keep_through == 2
    assert plan.move == ["commits/3"]  # offsets/3 is intact: Spark re-runs batch 3, the tables filter it out
    finding = next(f for f in plan.findings if f.path == "commits/3")
    assert finding.problem == problem and finding.blocking
    assert plan.next_start.startswith("resume")
    moved_to = apply(fs, plan)
    assert Path(moved_to, "commits", "3").read_text() == content  # kept for forensics
    state = read_checkpoint(fs, loc)
    assert (state.last_committed, state.last_planned) == (2, 3)
    assert diagnose(fs, loc, table_at(40)).healthy


def test_truncated_newest_offsets_drops_the_uncommitted_tail(tmp_path):
    loc = _checkpoint(tmp_path, pending=True)
    Path(loc, "offsets", "4").write_text('v1\n{"batchWatermarkMs":0}')
    fs = LocalFS()
    plan = diagnose(fs, loc, table_at(40))
    assert plan.action == "drop-tail" and plan.keep_through == 3 and plan.move == ["offsets/4"]
    assert [(f.path, f.problem) for f in plan.findings] == [("offsets/4", "truncated")]
    apply(fs, plan)
    state = read_checkpoint(fs, loc)
    assert (state.last_committed, state.last_planned) == (3, 3)


def test_garbage_offsets_and_commit_of_the_newest_batch(tmp_path):
    loc = _checkpoint(tmp_path)
    Path(loc, "offsets", "3").write_text("garbage")
    Path(loc, "commits", "3").write_text("garbage")
    fs = LocalFS()
    plan = diagnose(fs, loc, table_at(40))
    assert plan.action == "drop-tail" and plan.keep_through == 2
    assert sorted(plan.move) == ["commits/3", "offsets/3"]
    # the table already holds batch 3 (end 40) but the kept checkpoint ends at 30: the next start rebuilds
    assert plan.next_start.startswith("rebuild") and f"{T}[0]=40" in plan.next_start
    apply(fs, plan)
    assert read_checkpoint(fs, loc).last_committed == 2


def test_gap_between_offsets_and_commits_spark_38033(tmp_path):
    loc = _checkpoint(tmp_path, batches=3)
    Path(loc, "offsets", "5").write_text(_offsets(60))  # offsets/3 and /4 missing: Spark cannot restart
    fs = LocalFS()
    with pytest.raises(ValueError, match="offsets/4: missing"):
        read_checkpoint(fs, loc)
    plan = diagnose(fs, loc, table_at(30, batch=2))
    gap = next(f for f in plan.findings if f.problem == "gap")
    assert gap.path == "offsets/3" and gap.blocking and "offsets/3..4 missing" in gap.detail
    assert plan.action == "drop-tail" and plan.move == ["offsets/5"]
    apply(fs, plan)
    assert read_checkpoint(fs, loc).last_planned == 2


def test_old_damage_is_reported_but_left_alone(tmp_path):
    loc = _checkpoint(tmp_path, batches=6)
    Path(loc, "offsets", "1").write_text("garbage")
    plan = diagnose(LocalFS(), loc, table_at(60, batch=5))
    assert plan.healthy and plan.move == []
    assert [(f.path, f.blocking) for f in plan.findings] == [("offsets/1", False)]


def test_no_intact_committed_batch_rebuilds_from_the_table(tmp_path):
    loc = _checkpoint(tmp_path, batches=1)
    Path(loc, "commits", "0").write_text("")
    fs = LocalFS()
    plan = diagnose(fs, loc, table_at(10, batch=0))
    assert plan.action == "rebuild" and plan.move == []
    assert plan.next_start.startswith("rebuild") and f"{T}[0]=10" in plan.next_start
    moved_to = apply(fs, plan)
    assert not Path(loc).exists() and Path(moved_to, "commits", "0").exists()


def test_garbage_metadata_and_temp_leftovers_are_moved_aside(tmp_path):
    loc = _checkpoint(tmp_path)
    Path(loc, "metadata").write_text("{not json")
    Path(loc, "offsets", ".4.0b1c.tmp").write_text("half")
    fs = LocalFS()
    plan = diagnose(fs, loc, table_at(40))
    assert plan.action == "drop-tail" and sorted(plan.move) == ["metadata", "offsets/.4.0b1c.tmp"]
    assert {f.problem for f in plan.findings} == {"garbage", "temp-leftover"}
    apply(fs, plan)
    assert not Path(loc, "metadata").exists() and read_checkpoint(fs, loc).last_committed == 3


def test_missing_checkpoint_is_not_damage(tmp_path):
    plan = diagnose(LocalFS(), str(tmp_path / "none"), table_at(40))
    assert plan.healthy and plan.next_start.startswith("rebuild")
