"""The supervisor of one pipeline among many (ingest.multi), without Spark: a failure is reported and the pipeline
started again with a growing backoff; a fenced pipeline is not started again; an available-now run gives up after a
few tries; a stop ends a backoff."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from ingest import multi
from ingest.errors import DriverFenced, LakelineError
from ingest.events import Events, PipelineFailed, Recorder


class _Config:
    pipeline = "p"
    trigger = "processing-time=1s"

    def checkpoint_location(self, settings):
        return "/tmp/checkpoint"


class _Spark:
    class sparkContext:  # noqa: N801 - the attribute PySpark has
        @staticmethod
        def setLocalProperty(key, value):  # noqa: N802
            pass


@pytest.fixture
def summaries() -> list[object]:
    """Called in turn by the pipeline runs that do not raise, for what they return (None once empty)."""
    return []


@pytest.fixture
def failing(monkeypatch, summaries):
    """Pipelines whose run raises the given errors in turn, then returns."""
    errors: list[BaseException] = []
    runs: list[int] = []

    class FakePipeline:
        def __init__(self, *args, **kwargs):
            pass

        def run(self, install_signal_handlers=True):
            runs.append(1)
            if errors:
                raise errors.pop(0)
            return summaries.pop(0)() if summaries else None

        def request_stop(self):
            pass

    @contextmanager
    def drive(pipeline, standby=False):
        yield True

    monkeypatch.setattr("ingest.pipeline.Pipeline", FakePipeline)
    monkeypatch.setattr("ingest.ownership.drive", drive)
    monkeypatch.setattr("ingest.lease.pipeline_lease", lambda *args: None)
    monkeypatch.setattr(multi, "RESTART_FIRST_SECONDS", 0.01)
    return errors, runs


def _supervise(trigger=None, stop=None):
    recorder = Recorder()
    supervisor = multi.Supervisor(_Config(), None, _Spark(), trigger, Events(recorder), stop or threading.Event())
    supervisor.run()
    return supervisor.outcome, [e for e in recorder.events if isinstance(e, PipelineFailed)]


def test_a_failing_pipeline_is_reported_and_started_again_with_a_growing_backoff(failing):
    errors, runs = failing
    errors += [LakelineError("topic gone"), LakelineError("still gone")]
    outcome, failed = _supervise()
    assert outcome.ok and outcome.failures == 2 and len(runs) == 3
    assert [e.retry_in for e in failed] == [0.01, 0.02]
    assert "topic gone" in failed[0].error


def test_a_fenced_pipeline_is_not_started_again(failing):
    errors, runs = failing
    errors.append(DriverFenced("another driver took over"))
    outcome, failed = _supervise()
    assert not outcome.ok and len(runs) == 1 and failed[0].retry_in is None


def test_available_now_gives_up_after_a_few_tries(failing):
    errors, runs = failing
    errors += [LakelineError(f"failure {i}") for i in range(10)]
    outcome, failed = _supervise(trigger="available-now")
    assert not outcome.ok and len(runs) == multi.AVAILABLE_NOW_TRIES and failed[-1].retry_in is None


def test_a_stop_ends_the_backoff(failing, monkeypatch):
    errors, runs = failing
    errors += [LakelineError("down")] * 3
    monkeypatch.setattr(multi, "RESTART_FIRST_SECONDS", 3600)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    outcome, failed = _supervise(stop=stop)
    assert not outcome.ok and len(runs) == 1 and failed[0].retry_in == multi.RESTART_CAP_SECONDS  # capped


@pytest.mark.parametrize(("batches", "ok"), [([], False), (["batch 1"], True)])
def test_stopped_after_a_restart_is_ok_only_once_a_batch_committed(failing, summaries, batches, ok):
    """SIGTERM while a failed pipeline is starting again: exit 1 unless the restart committed a batch."""
    errors, runs = failing
    errors.append(LakelineError("topic gone"))
    stop = threading.Event()

    class Summary:
        def __init__(self):
            stop.set()  # the stop arrives during the restarted run
            self.batches = batches

    summaries.append(Summary)
    outcome, failed = _supervise(stop=stop)
    assert outcome.ok is ok and outcome.failures == 1 and len(runs) == 2
    assert ("stopped before a batch committed" in outcome.error) is (not ok)
