"""A Spark-free rewrite's commit turn: the stream's append waits while a live turn is held, never for ever."""

from __future__ import annotations

import pytest

from ingest.adapters.object_store import S3Files
from ingest.formats.commit_turn import TURN_S, CommitTurn, NoTurn, commit_turn
from tests.unit.test_rewrite_locks import ConditionalStore

LOCATION = "s3a://bucket/warehouse/ns/orders"


class Clock:
    """Time that moves only when the code under test sleeps, and a hook that runs at each sleep."""

    def __init__(self):
        self.now, self.slept, self.at_sleep = 1_000.0, 0, None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1
        if self.at_sleep:
            self.at_sleep()


def _turn(store, clock) -> CommitTurn:
    return CommitTurn(S3Files(None, client=store), LOCATION, clock=clock, sleep=clock.sleep)


def test_no_turn_costs_the_stream_one_read_and_no_wait():
    store, clock = ConditionalStore(), Clock()
    assert _turn(store, clock).wait() == 0 and clock.slept == 0


def test_the_stream_waits_until_the_rewrite_commit_ends_and_the_turn_is_gone_after():
    store, clock = ConditionalStore(), Clock()
    rewrite, stream = _turn(store, clock), _turn(store, clock)
    with rewrite.taken():
        assert list(store.objects) == ["warehouse/ns/orders/_lakeline/commit-turn.json"]

        def commit_lands_at_the_fourth_poll():
            if clock.slept == 4:
                store.objects.clear()

        clock.at_sleep = commit_lands_at_the_fourth_poll
        waited = stream.wait()
    assert waited == pytest.approx(0.2) and clock.slept == 4
    assert store.objects == {}


def test_a_turn_whose_rewriter_died_stops_the_stream_at_most_once_until_it_expires():
    store, clock = ConditionalStore(), Clock()
    dead, stream = _turn(store, clock), _turn(store, clock)
    held = dead.taken()
    held.__enter__()  # killed mid-commit: never released
    assert stream.wait() == pytest.approx(TURN_S, abs=0.1)
    assert stream.wait() == 0  # expired: appends go on without waiting again
    clock.now += 3600
    assert stream.wait() == 0


def test_a_rewrite_never_ends_another_rewrites_turn():
    store, clock = ConditionalStore(), Clock()
    first, second = _turn(store, clock), _turn(store, clock)
    with first.taken():
        with second.taken():  # the second took the turn over: the first's end must not remove it
            pass
        assert store.objects == {}  # the second released its own
    with first.taken():
        second_turn = second.taken()
        second_turn.__enter__()
    assert list(store.objects)  # the first's release left the second's turn in place
    second_turn.__exit__(None, None, None)
    assert store.objects == {}


def test_tables_not_on_s3_take_no_turn():
    assert isinstance(commit_turn("/tmp/warehouse/ns/orders", None), NoTurn)
    assert NoTurn().wait() == 0


def test_an_object_store_that_fails_never_fails_a_batch_or_a_rewrite():
    class Failing(ConditionalStore):
        def get_object(self, Bucket, Key):  # noqa: N803
            raise self._refuse("InternalError", 500)

        def put_object(self, *args, **kwargs):
            raise self._refuse("SlowDown", 503)

    store, clock = Failing(), Clock()
    assert _turn(store, clock).wait() == 0
    ran = []
    with _turn(store, clock).taken():
        ran.append(True)
    assert ran == [True]


def test_a_batch_reports_its_tables_wait_for_a_turn_as_its_turn_phase():
    from types import SimpleNamespace

    from ingest.batch import BatchCommitter, BatchReport

    report = BatchReport(batch_id=7)
    committer = SimpleNamespace(main=SimpleNamespace(turn_wait_s=0.0))
    BatchCommitter._report_turn_wait(committer, report)
    assert "turn" not in report.phases  # no wait: no phase
    committer.main.turn_wait_s = 1.25
    BatchCommitter._report_turn_wait(committer, report)
    assert report.phases["turn"] == 1.25
