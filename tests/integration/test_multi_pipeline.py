"""Many pipelines in one Spark application (`lakeline ingest --pipeline a --pipeline b ...`): three pipelines, one of
them broken mid-run by deleting its topic; the other two go on committing and stay exact; SIGTERM stops them all, and
the command names the broken one.

Cost (2 cores): about 3 min (one driver, three queries). Heavy: CI runs it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.config import load_pipeline
from ingest.events import BatchCommitted, PipelineFailed, RunStarted
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import events_of, pipeline_dict, wait_for, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.heavy, pytest.mark.soak]  # soak: does not fit CI on a slow day


def test_three_pipelines_in_one_application_one_broken_mid_run(conf_dir, settings, spark, tmp_path):
    paths, configs = [], []
    for fmt in ("delta", "delta", "iceberg"):
        data = pipeline_dict(fmt)
        data["source"]["max_offsets_per_trigger"] = 1000
        paths.append(write_pipeline(conf_dir, data))
        configs.append(load_pipeline(paths[-1]))
    good, broken = configs[:2], configs[2]
    bad = {c.pipeline: produce(c, settings, 2000, bad_ratio=0.01, seed=70 + i).bad_total
           for i, c in enumerate(configs)}
    stream = tmp_path / "events.jsonl"
    command = [sys.executable, "-m", "lakeline", "ingest", *[a for p in paths for a in ("--pipeline", str(p))],
               "--trigger", "processing-time=500ms", "--events", str(stream)]
    driver = subprocess.Popen(command, stdout=open(tmp_path / "driver.log", "w"), stderr=subprocess.STDOUT)

    def committed(name: str) -> list[BatchCommitted]:
        return [e for e in events_of(stream, BatchCommitted) if e.pipeline == name]

    try:
        wait_for(lambda: all(committed(c.pipeline) for c in configs), "every pipeline's first batch", timeout=300)
        assert {e.pipeline for e in events_of(stream, RunStarted)} == {c.pipeline for c in configs}
        jvms = [p for p in psutil.Process(driver.pid).children(recursive=True) if "java" in p.name()]
        assert len(jvms) == 1, jvms  # one Spark application for the three

        assert KafkaAdmin(settings).delete_topic(broken.source.topics[0])
        wait_for(lambda: any(e.pipeline == broken.pipeline for e in events_of(stream, PipelineFailed)),
                 "the broken pipeline's failure to be reported", timeout=180)
        seen = {c.pipeline: len(committed(c.pipeline)) for c in good}
        for i, config in enumerate(good):
            bad[config.pipeline] += produce(config, settings, 1000, bad_ratio=0.01, seed=80 + i).bad_total
        wait_for(lambda: all(sum(e.rows + e.dead_letters for e in committed(c.pipeline)) >= 3000 for c in good),
                 "the other two pipelines to ingest what came after the failure", timeout=240)
        assert all(len(committed(c.pipeline)) > seen[c.pipeline] for c in good)
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    log = (tmp_path / "driver.log").read_text()
    assert code == 1 and f"pipeline {broken.pipeline} failed" in log, log[-3000:]
    for config in good:
        report = reconcile(config, settings, spark)
        assert report.duplicates == 0 and report.missing == 0 and report.produced == 3000, report
        assert report.dead_letters == bad[config.pipeline]
