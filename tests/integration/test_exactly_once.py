"""Exactly-once against the real broker, moto S3 and Spark, for both formats: steady run, lost checkpoint,
stale checkpoint restore, schema drift while the stream runs, and kill -9 at random moments (heavy)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.config import load_pipeline
from ingest.errors import ExitCode
from ingest.events import (BatchCommitted, BatchReplayed, RunFinished, RunStarted, StandbyReady, StandbyTakingOver,
                           StopRequested, read_events)
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import assert_exact, events_of, kill_loop, pipeline_dict, row_count, wait_for, write_pipeline

pytestmark = pytest.mark.integration
FORMATS = ["delta", "iceberg"]


def _pipeline(conf_dir, fmt, **overrides):
    return load_pipeline(write_pipeline(conf_dir, pipeline_dict(fmt, **overrides)))


def _run(config, settings, spark, trigger="available-now"):
    return Pipeline(config, settings, spark=spark, trigger=trigger).run(install_signal_handlers=False)


def _copy_prefix(settings, src: str, dst: str) -> int:
    s3 = s3_client(settings)
    bucket, src_prefix = split_s3_uri(src)
    _, dst_prefix = split_s3_uri(dst)
    copied = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=src_prefix + "/"):
        for obj in page.get("Contents", []):
            s3.copy_object(Bucket=bucket, Key=dst_prefix + obj["Key"][len(src_prefix):],
                           CopySource={"Bucket": bucket, "Key": obj["Key"]})
            copied += 1
    return copied


@pytest.mark.parametrize("fmt", FORMATS)
def test_steady_run_with_bad_records_is_exact(fmt, conf_dir, settings, spark):
    _steady_run(fmt, 20_000, conf_dir, settings, spark)


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_steady_run_100k_is_exact(fmt, conf_dir, settings, spark):
    _steady_run(fmt, 100_000, conf_dir, settings, spark, max_offsets=25_000)


def _steady_run(fmt, count, conf_dir, settings, spark, max_offsets=5000):
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = max_offsets
    config = load_pipeline(write_pipeline(conf_dir, data))
    produced = produce(config, settings, count, bad_ratio=0.01, seed=7)
    assert produced.bad_total > 0 and set(produced.bad) == {"malformed_json", "type_mismatch",
                                                            "missing_required_field", "oversize", "invalid_utf8"}
    summary = _run(config, settings, spark)
    assert summary.plan.action == "fresh"
    assert len(summary.batches) >= count // max_offsets
    report = reconcile(config, settings, spark)
    assert_exact(report, count, produced.bad_total)
    assert report.dead_letters_by_reason == produced.bad
    from ingest.formats import tables_for
    main, dead = tables_for(spark, config, settings)
    assert dead.read().filter("_error IS NULL OR _raw IS NULL OR _error_detail IS NULL").count() == 0
    # rescued undeclared fields (the generator adds `coupon` to ~2% of good events)
    assert main.read().filter("_rescued_data LIKE '%coupon%'").count() > 0
    # a second run with nothing new commits nothing and stays exact
    again = _run(config, settings, spark)
    assert again.plan.action == "resume" and again.rows == 0
    assert_exact(reconcile(config, settings, spark), count, produced.bad_total)


@pytest.mark.parametrize("fmt", FORMATS)
def test_lost_checkpoint_resumes_from_table_offsets(fmt, conf_dir, settings, spark):
    config = _pipeline(conf_dir, fmt)
    first = produce(config, settings, 4000, bad_ratio=0.01, seed=1)
    _run(config, settings, spark)
    HadoopFS(spark).delete(config.checkpoint_location(settings))
    second = produce(config, settings, 3000, bad_ratio=0.01, seed=2)
    summary = _run(config, settings, spark)
    assert summary.plan.action == "rebuild" and "checkpoint missing" in summary.plan.reason
    assert summary.rows + summary.dead_letters == 3000  # only the new records were read and written
    assert_exact(reconcile(config, settings, spark), 7000, first.bad_total + second.bad_total)


@pytest.mark.parametrize("fmt", FORMATS)
def test_stale_checkpoint_restore_neither_duplicates_nor_skips(fmt, conf_dir, settings, spark):
    source = pipeline_dict(fmt)
    source["source"]["max_offsets_per_trigger"] = 1000
    config = load_pipeline(write_pipeline(conf_dir, source))
    location = config.checkpoint_location(settings)
    bad = produce(config, settings, 3000, bad_ratio=0.02, seed=3).bad_total
    _run(config, settings, spark)
    assert _copy_prefix(settings, location, location + ".backup") > 0
    bad += produce(config, settings, 4000, bad_ratio=0.02, seed=4).bad_total
    later = _run(config, settings, spark)
    assert len(later.batches) >= 4
    # restore the old copy over the live checkpoint
    HadoopFS(spark).delete(location)
    _copy_prefix(settings, location + ".backup", location)
    bad += produce(config, settings, 2000, bad_ratio=0.02, seed=5).bad_total
    summary = _run(config, settings, spark)
    assert summary.plan.action == "rebuild" and "behind the table" in summary.plan.reason
    assert summary.rows + summary.dead_letters == 2000
    assert_exact(reconcile(config, settings, spark), 9000, bad)


@pytest.mark.parametrize("fmt", FORMATS)
def test_schema_drift_while_the_stream_runs(fmt, conf_dir, settings, spark):
    import json

    from confluent_kafka import Producer

    from ingest.formats import tables_for

    config = _pipeline(conf_dir, fmt)
    produce(config, settings, 500, seed=6)
    pipeline = Pipeline(config, settings, spark=spark, trigger="processing-time=1s")
    runner = threading.Thread(target=lambda: pipeline.run(install_signal_handlers=False), daemon=True)
    runner.start()
    main, dead = tables_for(spark, config, settings)
    wait_for(lambda: row_count(main) >= 495, "first records to land")

    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap_servers})
    base = {"event_id": "e", "event_time": "2026-11-20T10:00:00Z", "customer_id": "c", "order_id": "o",
            "amount": 1.5}
    for i in range(20):
        producer.produce(config.source.topics[0], json.dumps({**base, "event_id": f"new-{i}",
                                                               "channel": "mobile"}).encode())
    for i in range(10):
        producer.produce(config.source.topics[0], json.dumps({**base, "event_id": f"type-{i}",
                                                               "amount": {"value": 1.5}}).encode())
    assert producer.flush(30) == 0
    wait_for(lambda: row_count(main) >= 520 and row_count(dead) >= 10, "drifted records to land")
    assert runner.is_alive(), "the stream must keep running through schema drift"
    pipeline.request_stop()
    runner.join(120)
    assert not runner.is_alive()
    rescued = main.read().filter("event_id LIKE 'new-%'").select("_rescued_data").collect()
    assert len(rescued) == 20 and all(json.loads(r[0]) == {"channel": "mobile"} for r in rescued)
    letters = dead.read().filter("_error = 'type_mismatch'").collect()
    assert len(letters) == 10 and all("amount" in r["_error_detail"] for r in letters)
    report = reconcile(config, settings, spark)
    assert report.exact and report.produced == 530


@pytest.mark.heavy  # Delta in CI; Iceberg (the same batch code, another sink) in the soak run
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_kill_minus_9_at_random_moments_while_producing(fmt, conf_dir, settings, spark, tmp_path):
    """kill -9 the driver at 5 random moments while a producer keeps writing; restart each time; exact."""
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 3000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    produced = kill_loop(config, settings, path, tmp_path, kills=5).produced
    report = reconcile(config, settings, spark)
    assert_exact(report, produced.count, produced.bad)
    assert report.commits >= 3


# Ctrl-C in a terminal, `kill -TERM -<pgid>`, systemd and Airflow signal the whole process group, so the Spark JVM
# gets the signal too, not only the Python driver.
@pytest.mark.parametrize("target, sig", [
    pytest.param("driver", signal.SIGTERM, marks=pytest.mark.heavy),
    ("group", signal.SIGTERM),
    pytest.param("group", signal.SIGINT, marks=pytest.mark.heavy),
])
def test_stop_signal_stops_cleanly_with_exit_0(target, sig, conf_dir, settings, tmp_path):
    path = write_pipeline(conf_dir, pipeline_dict("delta"))
    config = load_pipeline(path)
    produce(config, settings, 2000, seed=11)
    proc = subprocess.Popen([sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path),
                             "--trigger", "processing-time=1s", "--events", "-"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "driver.log", "w"), text=True, env=os.environ.copy(),
                            start_new_session=True)
    lines = []
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        lines.append(line)
        if read_events(line) and isinstance(read_events(line)[0], BatchCommitted) or time.monotonic() > deadline:
            break
    if target == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    err = (tmp_path / "driver.log").read_text()
    assert proc.returncode == 0, "".join(lines) + out + err[-3000:]
    kinds = [type(e) for e in read_events("".join(lines) + out)]
    assert StopRequested in kinds and kinds[-1] is RunFinished, out
    assert "Traceback" not in err, err


# Iceberg in the heavy tier (CI runs it): the default run stays near 25 minutes.
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_crash_between_the_two_commits_and_between_commit_and_checkpoint(fmt, conf_dir, settings, spark):
    """SIGKILL exactly after the dead-letter commit, then exactly after the table commit (before Spark writes
    commits/N): each restart replays the batch without writing anything twice."""
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 1000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    bad = produce(config, settings, 4000, bad_ratio=0.05, seed=21).bad_total
    cmd = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger", "available-now"]
    outputs = []
    for point in ("after-dlq-commit@1", "after-table-commit@2"):
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "LAKELINE_CRASH_AT": point})
        outputs.append(run.stdout)
        assert run.returncode == -signal.SIGKILL, run.stdout[-2000:] + run.stderr[-2000:]
        assert f"SIGKILL at {point.replace('@', ' of batch ')}" in run.stdout
    final = subprocess.run(cmd + ["--events", "-"], capture_output=True, text=True, timeout=600,
                           env=os.environ.copy())
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    events = read_events(final.stdout)
    assert [e.action for e in events if isinstance(e, RunStarted)] == ["resume"], final.stdout
    # Batch 2 ran in one pass (main table first): killed after its main commit, it runs again for its dead letters
    # only when it had any; the main table gets nothing twice either way.
    again = [e for e in events if isinstance(e, (BatchReplayed, BatchCommitted)) and e.batch_id == 2]
    assert len(again) == 1 and (isinstance(again[0], BatchReplayed) or again[0].rows == 0), final.stdout
    assert_exact(reconcile(config, settings, spark), 4000, bad)


# Iceberg in the heavy tier. Costs about 100 s per format (four driver processes).
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_one_pass_batch_killed_between_its_main_and_dead_letter_commits(fmt, conf_dir, settings, spark):
    """A batch that does not follow one with dead letters is written in one pass: the main table first (its
    commit record has no counts), then the dead letters when the write saw any. SIGKILL between the
    two: the restart runs the batch again and writes only its dead letters, with the checkpoint (resume) and
    without it (rebuild from the table, which starts that batch again). Exact both times."""
    from ingest.formats import tables_for

    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 500
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    main, dead = tables_for(spark, config, settings)
    cmd = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger", "available-now"]

    def rounds(seed: int) -> int:
        """2000 clean events then 1000 with 10% bad, on one partition: a batch is exactly 500 offsets."""
        produce(config, settings, 2000, seed=seed, partitions=1)
        return produce(config, settings, 1000, bad_ratio=0.1, seed=seed + 1, partitions=1).bad_total

    def run(crash: str | None = None) -> list:
        env = {**os.environ, "LAKELINE_CRASH_AT": crash} if crash else os.environ.copy()
        done = subprocess.run(cmd + ["--events", "-"], capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == (-signal.SIGKILL if crash else 0), done.stdout[-2000:] + done.stderr[-2000:]
        return read_events(done.stdout)

    def batch_events(events) -> dict:
        return {e.batch_id: e for e in events if isinstance(e, BatchCommitted)}

    # Resume: batches 0-3 clean, 4 (offsets 2000-2500) the first with bad records, killed between its commits.
    bad = rounds(5)
    run("after-table-commit@4")
    records = {r.batch_id: r for r in main.commits()}
    assert [records[b].rows for b in range(5)] == [None] * 5  # every batch in one pass
    assert dead.last_commit() is None  # batch 4's dead letters never committed
    events = run()
    assert [e.action for e in events if isinstance(e, RunStarted)] == ["resume"]
    again = batch_events(events)[4]
    assert again.rows == 0 and again.dead_letters > 0  # batch 4 again: only its dead letters
    assert [r.dead_letters for r in dead.commits() if r.batch_id == 4] == [again.dead_letters]
    assert_exact(reconcile(config, settings, spark), 3000, bad)

    # Rebuild: the next start's batches 6-9 clean, 10 (offsets 5000-5500) killed between its commits; the
    # checkpoint is lost too.
    bad += rounds(7)
    run("after-table-commit@10")
    assert {r.batch_id: r for r in main.commits()}[10].rows is None
    HadoopFS(spark).delete(config.checkpoint_location(settings))
    events = run()
    started = [e for e in events if isinstance(e, RunStarted)]
    assert [e.action for e in started] == ["rebuild"]
    first = min(batch_events(events).values(), key=lambda e: e.batch_id)
    assert first.rows == 0 and first.dead_letters > 0  # batch 10's range again: only its dead letters
    assert_exact(reconcile(config, settings, spark), 6000, bad)


def test_warm_standby_takes_over_after_kill_minus_9_and_a_second_driver_is_refused(conf_dir, settings, spark,
                                                                                    tmp_path):
    """A second `lakeline ingest` of a running pipeline on the same host is refused; a `--standby` one warms up,
    waits, and takes over the moment the driver is killed with -9; the result is exact."""
    data = pipeline_dict("delta")
    data["source"]["max_offsets_per_trigger"] = 1000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    bad = produce(config, settings, 2000, bad_ratio=0.02, seed=41).bad_total
    cmd = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path),
           "--trigger", "processing-time=500ms"]
    logs = {name: tmp_path / f"{name}.log" for name in ("primary", "standby")}
    streams = {name: tmp_path / f"{name}.events.jsonl" for name in ("primary", "standby")}
    primary = subprocess.Popen(cmd + ["--events", str(streams["primary"])], stdout=open(logs["primary"], "w"),
                               stderr=subprocess.STDOUT)
    standby = None
    try:
        wait_for(lambda: events_of(streams["primary"], BatchCommitted), "the driver's first batch", timeout=240)
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert second.returncode == ExitCode.REFUSED and f"another driver (pid {primary.pid})" in second.stderr, \
            second.stderr
        standby = subprocess.Popen(cmd + ["--standby", "--events", str(streams["standby"])],
                                   stdout=open(logs["standby"], "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: events_of(streams["standby"], StandbyReady), "the standby to warm up", timeout=240)
        assert not events_of(streams["standby"], StandbyTakingOver)  # the driver still holds the lock
        bad += produce(config, settings, 2000, bad_ratio=0.02, seed=42).bad_total
        primary.send_signal(signal.SIGKILL)
        primary.wait(30)
        wait_for(lambda: events_of(streams["standby"], StandbyTakingOver), "the standby to take over", timeout=30)
        wait_for(lambda: events_of(streams["standby"], BatchCommitted, BatchReplayed), "a batch from the standby",
                  timeout=120)
        standby.send_signal(signal.SIGTERM)
        assert standby.wait(120) == 0, logs["standby"].read_text()[-3000:]
    finally:
        for proc in (primary, standby):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    final = subprocess.run(cmd[:-2] + ["--trigger", "available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    assert_exact(reconcile(config, settings, spark), 4000, bad)
