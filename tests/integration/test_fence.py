"""One driver per pipeline across hosts (ingest.lease): the lease on moto S3, the tables' fence on both formats, and
two `lakeline ingest` drivers on two simulated hosts (two host ids and lock folders), one paused with SIGSTOP.

Costs (2 cores): the lease tests about 10 s; the fence tests about 20 s; the two-driver run (heavy) about 3 min.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest

from ingest.batch import BatchCommitter, TableEnds
from ingest.config import load_pipeline
from ingest.errors import DriverFenced, ExitCode, LeaseHeld
from ingest.events import (BatchCommitted, BatchReplayed, Events, LeaseLost, LeaseWaiting, RunStarted,
                           StandbyTakingOver)
from ingest.formats import format_for, tables_for
from ingest.lease import PipelineLease, is_free, lease_uri
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import events_of, pipeline_dict, wait_for, write_pipeline

pytestmark = pytest.mark.integration


def _lease(settings, uri: str, ttl: float = 3.0, host: str = "host-a") -> PipelineLease:
    from ingest.adapters.object_store import s3_client

    lease = PipelineLease("fenced", uri, s3_client(settings), ttl)
    lease.host = host
    return lease


def test_lease_refuses_a_second_holder_and_hands_over_on_release_and_on_expiry(settings):
    uri = lease_uri(f"{settings.warehouse}/_checkpoints/lease_{uuid.uuid4().hex[:8]}")
    first, second = _lease(settings, uri), _lease(settings, uri, host="host-b")
    assert first.acquire() == 1
    with pytest.raises(LeaseHeld, match="a driver on host host-a"):
        second.acquire()
    first.release()  # a clean stop: the standby need not wait
    assert second.acquire() == 2
    # host-b stops renewing (paused, partitioned): a driver on host-a waits it out, then takes over
    waiting = []
    started = time.monotonic()
    assert first.acquire(wait=threading.Event(), on_wait=waiting.append) == 3
    took = time.monotonic() - started
    assert 3.0 <= took < 8.0 and waiting and waiting[0].host == "host-b", (took, waiting)
    assert second.renew() is False  # the old holder learns it lost the lease on its next renewal
    # a holder on this host whose process is gone is free at once (kill -9 with a standby on the same host)
    state = first.read()
    assert not is_free(state, 3.0, "host-a", alive=lambda pid: True)
    assert is_free(state, 3.0, "host-a", alive=lambda pid: False)
    assert not is_free(state, 3.0, "host-c", alive=lambda pid: False)
    assert first.lost_to() is None
    assert "another driver took over" in second.lost_to() and "host host-a, token 3" in second.lost_to()


def test_a_lease_write_that_landed_although_its_answer_was_lost_is_still_ours(settings):
    """A renewal try that timed out may have landed; the client's retry is then refused by that very write. The
    lease reads the outcome: its own owner and token on the store mean it is still held; anyone else's is a loss."""
    import json

    uri = lease_uri(f"{settings.warehouse}/_checkpoints/lease_{uuid.uuid4().hex[:8]}")
    lease = _lease(settings, uri, ttl=15.0)
    token = lease.acquire()

    def land(**body) -> None:  # a write that reached the store while the lease never saw its answer
        lease._s3.put_object(Bucket=lease.bucket, Key=lease.key, Body=json.dumps(body).encode())

    mine = {"pipeline": "fenced", "token": token, "owner": lease.owner, "host": lease.host, "pid": lease.pid,
            "released": False, "ttl_s": 15.0}
    land(**mine, write=lease._writes + 1)  # the next renewal's first try landed
    assert lease.renew() is True and lease.lost_to() is None
    assert lease.renew() is True  # and the adopted ETag is the one the next renewal matches
    land(**mine, write=lease._writes - 1)  # an earlier try of ours, landing late: still ours
    assert lease.renew() is True and lease.renew() is True
    land(**{**mine, "released": True}, write=lease._writes + 1)  # released (by a stop): not renewed behind its back
    assert lease.renew() is False
    land(**{**mine, "owner": "someone-else", "token": token + 1, "write": lease._writes + 1})
    assert lease.renew() is False and "another driver took over" in lease.lost_to()


def test_a_query_failure_after_the_lease_was_taken_over_is_reported_as_fenced(conf_dir, settings):
    """A driver resumed after a takeover can see its query fail on the new driver's checkpoint writes
    (CONCURRENT_STREAM_LOG_UPDATE) before its renewer notices: the run then reports the lost lease (exit REFUSED),
    told once; while it still holds the lease, the same failure is reported as the query's own."""
    from types import SimpleNamespace

    from ingest.errors import LakelineError
    from ingest.pipeline import Pipeline

    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta")))
    uri = lease_uri(f"{settings.warehouse}/_checkpoints/{config.pipeline}")
    mine, theirs = _lease(settings, uri), _lease(settings, uri, host="host-b")
    mine.acquire()
    events = Events()
    seen = []
    events.subscribe(seen.append)
    pipeline = Pipeline(config, settings, events=events, lease=mine)
    pipeline._committer = SimpleNamespace(failure=None)  # no batch of its own failed
    error = "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for 4."
    held = pipeline._query_failure(error)
    assert type(held) is LakelineError and "CONCURRENT_STREAM_LOG_UPDATE" in str(held)
    mine.release()
    theirs.acquire()
    fenced = pipeline._query_failure(error)
    assert isinstance(fenced, DriverFenced) and fenced.exit_code == ExitCode.REFUSED
    assert "another driver took over" in str(fenced) and "CONCURRENT_STREAM_LOG_UPDATE" in str(fenced)
    pipeline.lost_lease("the renewer found out too")  # the renewer's news after the query's: told once
    assert len([e for e in seen if isinstance(e, LeaseLost)]) == 1
    theirs.release()


def _row(spark, schema):
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, TimestampType

    values = {StringType: "x", IntegerType: 0, LongType: 0, BinaryType: b"", TimestampType: datetime.now(UTC)}
    return spark.createDataFrame([tuple(values[type(f.dataType)] for f in schema.fields)], schema)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_refuses_commits_below_its_fence(fmt, conf_dir, settings, spark):
    """Driver A (token 1) commits; driver B raises the fence to 2 (its start); A's next commit is refused inside the
    table's commit, and nothing of it lands; B commits."""
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict(fmt)))
    table = tables_for(spark, config, settings)[1]
    table.ensure()
    table.fence(1)
    a = BatchCommitter(spark, config, format_for(fmt), tables_for(spark, config, settings)[0], table, "lineage-a",
                       TableEnds({}, {}, None), Events(), fence=1)
    frame = _row(spark, table.read().schema)
    a.commit(table, frame, a._record(0, {("t", 0): 0}, {("t", 0): 1}, 0, 1))
    assert table.fence_token() == 1 and table.read().count() == 1
    # B's start, from another process as far as A's JVM knows: a plain property change through Spark SQL
    spark.sql(f"ALTER TABLE {table.sql_name} SET TBLPROPERTIES ('lakeline.fence.{config.pipeline}' = '2')")
    with pytest.raises(DriverFenced, match="another driver has taken the pipeline over"):
        a.commit(table, frame, a._record(1, {("t", 0): 1}, {("t", 0): 2}, 0, 1))
    assert table.read().count() == 1
    assert [r.batch_id for r in table.commits()] == [0]
    with pytest.raises(DriverFenced):
        table.fence(1)  # A cannot start again under its old token either
    # B, fenced at 2 in this JVM, commits
    table.fence(2)
    b = BatchCommitter(spark, config, format_for(fmt), tables_for(spark, config, settings)[0], table, "lineage-b",
                       TableEnds({}, {}, None), Events(), fence=2)
    b.commit(table, frame, b._record(0, {("t", 0): 1}, {("t", 0): 2}, 0, 1))
    assert table.read().count() == 2
    assert [r.extra.get("fence") for r in table.commits()] == [1, 2]
    table.unfence()


def test_iceberg_fence_cannot_be_lowered(conf_dir, settings, spark):
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("iceberg")))
    table = tables_for(spark, config, settings)[1]
    table.ensure()
    table.fence(5)
    with pytest.raises(Exception, match="lakeline fence"):
        spark.sql(f"ALTER TABLE {table.sql_name} SET TBLPROPERTIES ('lakeline.fence.{config.pipeline}' = '4')")
    assert table.fence_token() == 5


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_two_hosts_one_driver_and_a_paused_driver_cannot_commit_after_takeover(fmt, conf_dir, settings, spark,
                                                                              tmp_path):
    """Host A runs the pipeline; a plain driver on host B is refused; a standby on B waits. A is paused with
    SIGSTOP, its Spark JVM too (a paused host): its lease lapses and B takes over. A resumed never commits again
    (it learns it lost the lease, and the tables would refuse it); exact after a final drain."""
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 1000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    bad = produce(config, settings, 3000, bad_ratio=0.02, seed=61).bad_total
    command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger",
               "processing-time=500ms"]
    ttl = 6

    def host(name: str) -> dict[str, str]:
        (tmp_path / f"locks-{name}").mkdir(exist_ok=True)
        return {**os.environ, "LAKELINE_HOST_ID": f"host-{name}", "LAKELINE_LOCK_DIR": str(tmp_path / f"locks-{name}"),
                "LAKELINE_LEASE_SECONDS": str(ttl)}

    streams = {name: tmp_path / f"{name}.events.jsonl" for name in ("a", "b")}
    # A in a session of its own: SIGSTOP to its group pauses the JVM beside it. (Stopping the Python process alone
    # leaves the JVM planning batches, which can write the next offsets before B does: B then stops, exit 1, and
    # its restart replays that batch; see ARCHITECTURE.md, "One driver per pipeline".)
    a = subprocess.Popen(command + ["--events", str(streams["a"])], env=host("a"), start_new_session=True,
                         stdout=open(tmp_path / "a.log", "w"), stderr=subprocess.STDOUT)
    b = None
    try:
        wait_for(lambda: events_of(streams["a"], BatchCommitted), "host A's first batch", timeout=240)
        token_a = events_of(streams["a"], RunStarted)[0].fence
        refused = subprocess.run(command, env=host("b"), capture_output=True, text=True, timeout=120)
        assert refused.returncode == ExitCode.REFUSED and "a driver on host host-a" in refused.stderr, refused.stderr
        b = subprocess.Popen(command + ["--standby", "--events", str(streams["b"])], env=host("b"),
                             stdout=open(tmp_path / "b.log", "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: events_of(streams["b"], LeaseWaiting), "host B's standby to wait for the lease",
                 timeout=240)
        assert not events_of(streams["b"], StandbyTakingOver)
        os.killpg(a.pid, signal.SIGSTOP)
        paused = time.monotonic()
        wait_for(lambda: events_of(streams["b"], StandbyTakingOver), "host B to take over", timeout=ttl + 30,
                 every=0.2)
        takeover = time.monotonic() - paused
        print(f"takeover {takeover:.1f}s after host A was paused (lease ttl {ttl}s)")
        # B waited for the lease to lapse: the ttl less the time since A's last renewal (a third of the ttl at
        # most) and the store clock's one-second resolution
        assert takeover >= ttl * 2 / 3 - 1
        bad += produce(config, settings, 3000, bad_ratio=0.02, seed=62).bad_total
        wait_for(lambda: len(events_of(streams["b"], BatchCommitted, BatchReplayed)) >= 2, "host B's batches",
                 timeout=240)
        token_b = events_of(streams["b"], RunStarted)[0].fence
        assert token_b > token_a
        a_batches = len(events_of(streams["a"], BatchCommitted))
        os.killpg(a.pid, signal.SIGCONT)
        code = a.wait(120)
        assert code == ExitCode.REFUSED, (tmp_path / "a.log").read_text()[-3000:]
        assert events_of(streams["a"], LeaseLost)
        assert len(events_of(streams["a"], BatchCommitted)) == a_batches  # A committed nothing after it resumed
        b.send_signal(signal.SIGTERM)
        assert b.wait(180) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(a.pid, signal.SIGCONT)  # its JVM too, whether or not A is still there
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    main = tables_for(spark, config, settings)[0]
    tokens = [r.extra.get("fence") for r in main.commits()]
    assert tokens == sorted(tokens) and set(tokens) <= {token_a, token_b}, tokens  # no A commit after B's first
    final = subprocess.run(command[:-2] + ["--trigger", "available-now"], env=host("b"), capture_output=True,
                           text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    report = reconcile(config, settings, spark)
    assert report.duplicates == 0 and report.missing == 0 and report.produced == 6000, report
    assert report.dead_letters == bad
