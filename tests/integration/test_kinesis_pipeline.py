"""Kinesis -> Delta / Iceberg pipelines, exactly once, against the stack's moto Kinesis and real Spark: steady
run with several shards and bad records, lost checkpoint (rebuild from the table's offsets), SIGKILL between the
two commits and between the table commit and Spark's commit log, and kill -9 at random moments (soak)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.config import load_pipeline
from ingest.events import BatchCommitted, BatchReplayed, Events, HumanLines, Recorder, RunStarted, read_events
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import kill_loop, pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration
FORMATS = ["delta", "iceberg"]


def _kinesis_pipeline(conf_dir, fmt, max_records=2000, **source):
    data = pipeline_dict(fmt)
    data["source"] = {"kind": "kinesis", "stream": f"{data['pipeline']}-{uuid.uuid4().hex[:4]}",
                      "max_records_per_batch": max_records, **source}
    path = write_pipeline(conf_dir, data)
    return path, load_pipeline(path)


def _run(config, settings, spark, trigger="available-now"):
    return Pipeline(config, settings, spark=spark, trigger=trigger).run(install_signal_handlers=False)


def _assert_exact(report, produced_total, bad_total):
    assert report.duplicates == 0, report.duplicate_sample
    assert report.missing == 0, report.missing_sample
    assert report.out_of_range == 0
    assert report.produced == produced_total
    assert report.rows + report.dead_letters == produced_total
    assert report.dead_letters == bad_total
    assert report.ranges_contiguous and report.ranges_non_overlapping, report.range_problems


@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])  # the Iceberg variant: soak
def test_kinesis_steady_run_with_several_shards_is_exact(fmt, conf_dir, settings, spark):
    _, config = _kinesis_pipeline(conf_dir, fmt, include_key="string")
    produced = produce(config, settings, 6000, bad_ratio=0.01, seed=7, partitions=3)
    assert len(produced.partitions) == 3 and produced.bad_total > 0
    started = time.monotonic()
    summary = _run(config, settings, spark)
    print(f"{fmt}: 6000 records in {time.monotonic() - started:.1f}s, {len(summary.batches)} batches")
    assert summary.plan.action == "fresh"
    assert len(summary.batches) >= 3  # the per-batch limit (2000) splits the backlog
    report = reconcile(config, settings, spark)
    _assert_exact(report, 6000, produced.bad_total)
    assert sorted(p["partition"] for p in report.per_partition) == sorted(produced.partitions)
    # source.include_key: each row's partition key (the sample events are keyed by customer id) as `_key`
    from ingest.formats import tables_for

    keys = tables_for(spark, config, settings)[0].read().selectExpr("_key = customer_id AS same").distinct()
    assert [r["same"] for r in keys.collect()] == [True]
    # Freshness reads each shard from the table's recorded end: nothing waits now, then exactly what was added.
    from datetime import datetime, UTC

    from maintenance.freshness import check

    caught_up = check(config, settings, spark, datetime.now(UTC))
    assert caught_up.ok and caught_up.lag_records == 0 and caught_up.lag_exact
    produce(config, settings, 40, seed=8)
    behind = check(config, settings, spark, datetime.now(UTC))
    assert behind.lag_records == 40 and behind.lag_exact and behind.ok  # a fresh commit: within max_staleness


@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])  # the Iceberg variant: soak
def test_kinesis_lost_checkpoint_resumes_from_table_offsets(fmt, conf_dir, settings, spark):
    _, config = _kinesis_pipeline(conf_dir, fmt)
    first = produce(config, settings, 3000, bad_ratio=0.01, seed=1, partitions=2)
    _run(config, settings, spark)
    # The checkpoint tools read Kinesis offsets too: a backup verifies, and a start from it would resume.
    from ingest.formats import tables_for
    from maintenance import checkpoints

    fs, main = HadoopFS(spark), tables_for(spark, config, settings)[0]
    root = config.backup_location(settings)
    checkpoints.backup(fs, config.checkpoint_location(settings), root, config.pipeline, main.last_commit(), keep=2)
    verified = checkpoints.verify(fs, root, None, main.last_commit())
    assert verified.ok and "would resume" in verified.consistency, (verified.problems, verified.consistency)
    HadoopFS(spark).delete(config.checkpoint_location(settings))
    second = produce(config, settings, 2000, bad_ratio=0.01, seed=2)
    summary = _run(config, settings, spark)
    assert summary.plan.action == "rebuild" and "checkpoint missing" in summary.plan.reason
    assert summary.rows + summary.dead_letters == 2000  # only the new records were read and written
    _assert_exact(reconcile(config, settings, spark), 5000, first.bad_total + second.bad_total)


# Delta only: the crash points sit in the source-neutral batch code, and the Kafka suite runs them on both sinks;
# the random kill -9 test below covers Kinesis into Iceberg. (Three driver JVMs, ~4.5 min; CI time is finite.)
@pytest.mark.soak
@pytest.mark.parametrize("fmt", ["delta"])
def test_kinesis_crash_between_commits_replays_exactly(fmt, conf_dir, settings, request):
    path, config = _kinesis_pipeline(conf_dir, fmt, max_records=1000)
    bad = produce(config, settings, 4000, bad_ratio=0.05, seed=21, partitions=2).bad_total
    cmd = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger", "available-now"]
    for point in ("after-dlq-commit@1", "after-table-commit@2"):
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "LAKELINE_CRASH_AT": point})
        assert run.returncode == -signal.SIGKILL, run.stdout[-2000:] + run.stderr[-2000:]
    final = subprocess.run(cmd + ["--events", "-"], capture_output=True, text=True, timeout=600,
                           env=os.environ.copy())
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    events = read_events(final.stdout)
    assert [e.action for e in events if isinstance(e, RunStarted)] == ["resume"], final.stdout
    assert [e.batch_id for e in events if isinstance(e, BatchReplayed)] == [2], final.stdout
    # The test's own SparkSession starts only now, so only one Spark driver runs at a time.
    _assert_exact(reconcile(config, settings, request.getfixturevalue("spark")), 4000, bad)


@pytest.mark.soak
@pytest.mark.parametrize("fmt", FORMATS)
def test_kinesis_kill_minus_9_at_random_moments_while_producing(fmt, conf_dir, settings, request, tmp_path):
    """kill -9 the driver at 3 random moments while a producer keeps writing; restart each time; exact."""
    path, config = _kinesis_pipeline(conf_dir, fmt, max_records=3000)
    produce(config, settings, 0, partitions=3)  # create the stream with 3 shards
    produced = kill_loop(config, settings, path, tmp_path, kills=3).produced
    report = reconcile(config, settings, request.getfixturevalue("spark"))
    _assert_exact(report, produced.count, produced.bad)
    assert report.commits >= 3


@pytest.mark.soak  # ~2.5 min per format; the source-level split test runs by default
@pytest.mark.parametrize("fmt", FORMATS)
def test_kinesis_shard_split_mid_run_is_exact(fmt, conf_dir, settings, spark, moto_kinesis):
    """Split a shard while the stream runs (moto with Kinesis-like split, tests/conftest.py): exact, and the
    children's records land in later commits than the parent's."""
    import boto3

    local = settings.model_copy(update={"kinesis_endpoint": moto_kinesis["endpoint"]})
    _, config = _kinesis_pipeline(conf_dir, fmt, max_records=1000)
    bad = produce(config, local, 3000, bad_ratio=0.01, seed=31, partitions=2).bad_total
    recorder = Recorder()
    pipeline = Pipeline(config, local, spark=spark, trigger="processing-time=500ms",
                        events=Events(HumanLines(), recorder))
    runner = threading.Thread(target=pipeline.run, kwargs={"install_signal_handlers": False}, daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not recorder.of(BatchCommitted):
        time.sleep(0.5)
    client = boto3.client("kinesis", endpoint_url=local.kinesis_endpoint, region_name=local.aws_region,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    parent = client.list_shards(StreamName=config.source.stream)["Shards"][0]
    lo, hi = int(parent["HashKeyRange"]["StartingHashKey"]), int(parent["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=config.source.stream, ShardToSplit=parent["ShardId"],
                       NewStartingHashKey=str((lo + hi) // 2))
    bad += produce(config, local, 3000, bad_ratio=0.01, seed=32).bad_total
    total = 6000
    from ingest.formats import tables_for

    main, dead = tables_for(spark, config, local)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and main.read().count() + dead.read().count() < total:
        time.sleep(2)
    pipeline.request_stop()
    runner.join(120)
    report = reconcile(config, local, spark)
    _assert_exact(report, total, bad)
    children = {s["ShardId"] for s in client.list_shards(StreamName=config.source.stream)["Shards"]
                if s.get("ParentShardId") == parent["ShardId"]}
    commits = main.commits()
    # A commit's `start` lists only the shards that batch read (its `end` is the table's cumulative end).
    parent_batches = [c.batch_id for c in commits if any(p == parent["ShardId"] for _, p in c.start)]
    child_batches = [c.batch_id for c in commits if any(p in children for _, p in c.start)]
    assert children and child_batches and max(parent_batches) < min(child_batches)
