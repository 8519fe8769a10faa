import pytest

from ingest.checkpoint import CheckpointState, parse_offset_file, plan_start, read_checkpoint
from ingest.commits import CommitRecord
from ingest.reconcile import check_ranges

T = "orders"


def record(end, batch=5, lineage="L1", start=None):
    return CommitRecord("p", lineage, batch, start or {}, {(T, p): o for p, o in end.items()}, 0, 0)


def ckpt(committed, planned, lineage="L1", last_committed=5, last_planned=None):
    return CheckpointState(lineage, last_committed, {(T, p): o for p, o in committed.items()},
                           last_planned if last_planned is not None else last_committed,
                           {(T, p): o for p, o in planned.items()})


def test_fresh_when_nothing_exists():
    plan = plan_start(None, None, new_lineage="N")
    assert (plan.action, plan.lineage, plan.starting_offsets) == ("fresh", "N", None)


def test_resume_when_checkpoint_matches_table():
    plan = plan_start(record({0: 100, 1: 50}), ckpt({0: 100, 1: 50}, {0: 100, 1: 50}))
    assert plan.action == "resume" and plan.lineage == "L1"


def test_resume_when_crash_came_between_table_commit_and_checkpoint_commit():
    # table has batch 6, checkpoint committed 5 and planned 6: Spark replays 6, the offset filter drops it all
    plan = plan_start(record({0: 120}, batch=6), ckpt({0: 100}, {0: 120}, last_planned=6))
    assert plan.action == "resume"


def test_rebuild_from_table_when_checkpoint_lost():
    plan = plan_start(record({0: 100, 1: 50}), None, new_lineage="N")
    assert plan.action == "rebuild" and plan.lineage == "N"
    assert plan.starting_offsets == {(T, 0): 100, (T, 1): 50}


def test_rebuild_when_checkpoint_is_stale():
    plan = plan_start(record({0: 500}), ckpt({0: 100}, {0: 200}))
    assert plan.action == "rebuild" and "behind" in plan.reason
    assert plan.starting_offsets == {(T, 0): 500}


def test_rebuild_when_checkpoint_is_ahead_of_table():
    plan = plan_start(record({0: 100}), ckpt({0: 300}, {0: 300}))
    assert plan.action == "rebuild" and "ahead" in plan.reason


def test_rebuild_when_checkpoint_consumed_a_partition_the_table_never_saw():
    plan = plan_start(record({0: 100}), ckpt({0: 100, 1: 40}, {0: 100, 1: 40}))
    assert plan.action == "rebuild"
    assert (T, 1) not in plan.starting_offsets  # read from earliest


def test_rebuild_when_checkpoint_has_no_lakeline_lineage():
    plan = plan_start(record({0: 100}), ckpt({0: 100}, {0: 100}, lineage=None))
    assert plan.action == "rebuild" and "not written by Lakeline" in plan.reason


def test_table_without_commits_but_checkpoint_with_committed_batches_rebuilds_from_earliest():
    plan = plan_start(None, ckpt({0: 100}, {0: 100}))
    assert plan.action == "rebuild" and plan.starting_offsets == {}


def test_resume_first_planned_batch_never_committed():
    plan = plan_start(None, CheckpointState("L1", None, {}, 0, {(T, 0): 10}))
    assert plan.action == "resume"


class FakeFS:
    def __init__(self, files):
        self.files = files

    def exists(self, path):
        return any(f == path or f.startswith(path + "/") for f in self.files)

    def list_names(self, path):
        return sorted({f[len(path) + 1:].split("/")[0] for f in self.files if f.startswith(path + "/")})

    def read_text(self, path):
        return self.files[path]


def _offsets(o0):
    return 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"orders":{"0":%d}}' % o0


def test_read_checkpoint_committed_and_pending_batches():
    fs = FakeFS({"c/offsets/0": _offsets(10), "c/offsets/1": _offsets(20), "c/commits/0": "v1\n{}",
                 "c/_lakeline/lineage": "L9\n", "c/metadata": "{}"})
    state = read_checkpoint(fs, "c")
    assert state.lineage == "L9" and state.last_committed == 0 and state.last_planned == 1
    assert state.committed_end == {(T, 0): 10} and state.planned_end == {(T, 0): 20}


def test_read_checkpoint_without_offsets_is_none():
    assert read_checkpoint(FakeFS({"c/metadata": "{}"}), "c") is None


def test_garbage_offset_file_is_an_error():
    with pytest.raises(ValueError):
        parse_offset_file("garbage")


def test_ranges_contiguous_and_gaps_detected():
    commits = [record({0: 10}, batch=0, start={(T, 0): 0}), record({0: 25}, batch=1, start={(T, 0): 10})]
    assert check_ranges(commits, {(T, 0): 0}) == (True, True, [])
    gap = commits + [record({0: 40}, batch=2, start={(T, 0): 30})]
    contiguous, _, problems = check_ranges(gap, {(T, 0): 0})
    assert not contiguous and "gap on orders[0]" in problems[0]
    overlap = commits + [record({0: 40}, batch=2, start={(T, 0): 20})]
    _, non_overlapping, problems = check_ranges(overlap, {(T, 0): 0})
    assert not non_overlapping and "overlap" in problems[0]


def test_expired_history_may_start_after_the_oldest_offset_but_must_still_chain():
    kept = [record({0: 40}, batch=7, start={(T, 0): 30}), record({0: 55}, batch=8, start={(T, 0): 40})]
    contiguous, _, problems = check_ranges(kept, {(T, 0): 0})  # the whole history: batch 7 cannot start at 30
    assert not contiguous and "batch 7 starts at 30" in problems[0]
    assert check_ranges(kept, {(T, 0): 0}, history_complete=False) == (True, True, [])
    gap = kept + [record({0: 70}, batch=9, start={(T, 0): 60})]
    contiguous, _, problems = check_ranges(gap, {(T, 0): 0}, history_complete=False)
    assert not contiguous and "batch 9 starts at 60" in problems[0]


def test_commit_record_round_trip_and_foreign_metadata():
    rec = CommitRecord("p", "L", 3, {(T, 0): 1}, {(T, 0): 9, ("x", 2): 4}, 7, 1)
    assert CommitRecord.from_json(rec.to_json()) == rec
    assert CommitRecord.from_json('{"other": 1}') is None
    assert CommitRecord.from_json("not json") is None


def test_unreadable_checkpoint_rebuilds_from_table_and_names_the_file():
    fs = FakeFS({"c/offsets/0": _offsets(10), "c/offsets/1": "v1\n{}\n{trunc", "c/commits/0": "v1\n{}",
                 "c/_lakeline/lineage": "L9\n"})
    with pytest.raises(ValueError, match=r"c/offsets/1: unparsable source offsets"):
        read_checkpoint(fs, "c")
    plan = plan_start(record({0: 10}), None, unreadable="c/offsets/1: unparsable")
    assert plan.action == "rebuild" and "unreadable" in plan.reason and plan.starting_offsets == {(T, 0): 10}


def test_one_pass_batch_without_its_dead_letters_is_read_again_when_the_checkpoint_is_lost():
    """A one-pass batch commits the main table first (counts null) and its dead letters after: interrupted in
    between, a rebuild starts that batch's partitions at its start, so it runs again and only its dead letters
    land; the other partitions start at the table's end."""
    from ingest.batch import TableEnds

    last = CommitRecord("p", "L1", 7, {(T, 0): 100}, {(T, 0): 120, (T, 1): 50}, None, None)
    unsettled = TableEnds(dict(last.end), {}, last, CommitRecord("p", "L1", 3, {}, {(T, 0): 40}, 0, 2))
    assert not unsettled.dead_letters_settled
    plan = plan_start(last, None, new_lineage="N", dead_letters_settled=False)
    assert plan.action == "rebuild" and plan.starting_offsets == {(T, 0): 100, (T, 1): 50}
    # Settled: the dead-letter table's newest record is that batch's, or the batch was counted at commit.
    assert TableEnds(dict(last.end), {}, last, CommitRecord("p", "L1", 7, {}, {(T, 0): 120}, 0, 1)).dead_letters_settled
    counted = CommitRecord("p", "L1", 7, {(T, 0): 100}, {(T, 0): 120}, 20, 0)
    assert TableEnds(dict(counted.end), {}, counted).dead_letters_settled
    assert TableEnds({}, {}, None).dead_letters_settled
    assert plan_start(counted, None, new_lineage="N").starting_offsets == {(T, 0): 120}
    # A resume needs nothing more: Spark runs the uncommitted batch again.
    assert plan_start(last, ckpt({0: 100, 1: 50}, {0: 120, 1: 50}, last_planned=7),
                      dead_letters_settled=False).action == "resume"


def test_uncounted_commit_record_round_trips():
    record = CommitRecord("p", "L1", 7, {(T, 0): 100}, {(T, 0): 120}, None, None)
    assert CommitRecord.from_json(record.to_json()) == record and '"rows":null' in record.to_json()
