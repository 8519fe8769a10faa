"""A Spark-free rewrite's commit turn, as the rewrite takes and ends it. The commits' side (a commit waits for a
live turn before its swap, never for ever) is the JVM's: jvm/src/test/java/io/lakeline/iceberg/CommitTurnTest.java."""

from __future__ import annotations

import json

from ingest.adapters.object_store import S3Files
from ingest.formats.commit_turn import TURN_S, CommitTurn, NoTurn, commit_turn
from tests.unit.test_rewrite_locks import ConditionalStore

LOCATION = "s3a://bucket/warehouse/ns/orders"


class Clock:
    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _turn(store, clock) -> CommitTurn:
    return CommitTurn(S3Files(None, client=store), LOCATION, clock=clock)


def test_the_turn_names_its_owner_and_expiry_for_the_commits_and_is_gone_after():
    store, clock = ConditionalStore(), Clock()
    rewrite = _turn(store, clock)
    with rewrite.taken():
        (key, body), = store.objects.items()
        assert key == "warehouse/ns/orders/_lakeline/commit-turn.json"  # where the JVM's CommitTurn reads it
        held = json.loads(body[0])
        assert held == {"owner": rewrite.owner, "expires_at": clock.now + TURN_S}
    assert store.objects == {}


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


def test_an_object_store_that_fails_never_fails_a_batch_or_a_rewrite():
    class Failing(ConditionalStore):
        def get_object(self, Bucket, Key):  # noqa: N803
            raise self._refuse("InternalError", 500)

        def put_object(self, *args, **kwargs):
            raise self._refuse("SlowDown", 503)

    store, clock = Failing(), Clock()
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
