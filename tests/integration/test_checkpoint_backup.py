"""A backup taken while the stream runs is restorable; restore refuses while the pipeline runs; after a stale
restore the next run neither duplicates nor skips."""

from __future__ import annotations

import threading
import time

import pytest

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.config import load_pipeline
from ingest.checkpoint import HEARTBEAT_STALE_SECONDS
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from ingest.formats import tables_for
from maintenance import checkpoints
from tests.helpers import pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])  # the Iceberg variant: soak
def test_backup_while_running_then_restore_is_exact(fmt, conf_dir, settings, spark):
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 500
    config = load_pipeline(write_pipeline(conf_dir, data))
    fs = HadoopFS(spark)
    location, root = config.checkpoint_location(settings), config.backup_location(settings)
    bad = produce(config, settings, 3000, bad_ratio=0.02, seed=31).bad_total

    pipeline = Pipeline(config, settings, spark=spark, trigger="processing-time=1s")
    runner = threading.Thread(target=lambda: pipeline.run(install_signal_handlers=False), daemon=True)
    runner.start()
    deadline = time.monotonic() + 240
    while len(fs.list_names(f"{location}/commits")) < 2:
        assert time.monotonic() < deadline, "the stream committed fewer than 2 batches in 240s"
        time.sleep(0.5)
    main, _ = tables_for(spark, config, settings)
    manifest = checkpoints.backup(fs, location, root, config.pipeline, main.last_commit(), keep=3)
    assert manifest.last_committed_batch >= 1
    with pytest.raises(checkpoints.PipelineRunning):
        checkpoints.restore(fs, root, None, location, HEARTBEAT_STALE_SECONDS)

    bad += produce(config, settings, 2000, bad_ratio=0.02, seed=32).bad_total
    while sum(main.last_commit().end.values()) < 5000:
        assert time.monotonic() < deadline + 240, "the stream did not catch up"
        time.sleep(0.5)
    pipeline.request_stop()
    runner.join(120)

    report = checkpoints.verify(fs, root, None, main.last_commit())
    assert report.ok, report.problems
    assert "rebuild" in report.consistency  # the table is ahead of the backup
    checkpoints.restore(fs, root, None, location, HEARTBEAT_STALE_SECONDS)  # heartbeat cleared on clean stop
    bad += produce(config, settings, 1000, bad_ratio=0.02, seed=33).bad_total
    summary = Pipeline(config, settings, spark=spark, trigger="available-now").run(
        install_signal_handlers=False)
    assert summary.plan.action == "rebuild"
    assert summary.rows + summary.dead_letters == 1000
    final = reconcile(config, settings, spark)
    assert final.exact and final.produced == 6000 and final.dead_letters == bad
