"""Faults injected under a live stream (infra/faultproxy.py in front of moto S3, loopback only): the stream either
rides the fault out or stops with an error naming S3, and a restart resumes; either way the table ends exact.
Each test prints what happened and how long recovery took (the issue's closing note quotes these lines).

Costs (2 cores): each about 2-3 min (a driver, the fault, a drain run). Heavy: CI runs S3 unreachable for 30 s
on Delta; the other faults and formats are in the soak tier.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlparse

import pytest

from infra.faultproxy import FaultProxy
from ingest.config import load_pipeline
from ingest.events import BatchCommitted
from ingest.produce import produce
from ingest.reconcile import reconcile
from tests.helpers import Produced, assert_exact, events_of, pipeline_dict, producing, wait_for, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

# (mode, seconds the fault lasts, latency per chunk)
FAULTS = {
    "s3-unreachable-30s": ("refuse", 30, 0.0),
    "s3-unreachable-5min": ("refuse", 300, 0.0),
    "s3-resets-30s": ("reset", 30, 0.0),
    "s3-latency-1s-60s": ("latency", 60, 1.0),
    "s3-slowdown-30s": ("slowdown", 30, 0.0),
}


@pytest.mark.parametrize(("fault", "fmt"), [
    ("s3-unreachable-30s", "delta"),
    pytest.param("s3-unreachable-30s", "iceberg", marks=pytest.mark.soak),
    pytest.param("s3-unreachable-5min", "delta", marks=pytest.mark.soak),
    pytest.param("s3-unreachable-5min", "iceberg", marks=pytest.mark.soak),
    pytest.param("s3-resets-30s", "iceberg", marks=pytest.mark.soak),
    pytest.param("s3-latency-1s-60s", "delta", marks=pytest.mark.soak),
    pytest.param("s3-slowdown-30s", "delta", marks=pytest.mark.soak),
])
def test_an_s3_fault_under_a_live_stream_ends_exact(fault, fmt, conf_dir, settings, spark, tmp_path):
    mode, seconds, latency = FAULTS[fault]
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 500
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    first = produce(config, settings, 1000, bad_ratio=0.01, seed=101)
    produced = Produced(first.count, first.bad_total)
    endpoint = urlparse(settings.s3_endpoint)
    stream = tmp_path / "events.jsonl"
    with FaultProxy((endpoint.hostname, endpoint.port)) as proxy:
        env = {**os.environ, "LAKELINE_S3_ENDPOINT": proxy.url}
        command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--events", str(stream)]
        log = tmp_path / "driver.log"
        driver = subprocess.Popen([*command, "--trigger", "processing-time=500ms"], env=env,
                                  stdout=open(log, "w"), stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: events_of(stream, BatchCommitted), "the first batch", timeout=240)
            with producing(config, settings, chunk=100, rate=50, seed=110, produced=produced):
                proxy.set(mode, seconds=seconds, latency=latency)
                fault_at = time.monotonic()
                before = len(events_of(stream, BatchCommitted))
                wait_for(lambda: proxy.mode == "pass", f"the {fault} to end", timeout=seconds + 30)
                fault_ended = time.monotonic()

                def resumed_or_stopped() -> bool:
                    return driver.poll() is not None or len(events_of(stream, BatchCommitted)) > before

                wait_for(resumed_or_stopped, "a commit after the fault, or the driver to stop", timeout=600)
                rode_out = driver.poll() is None
                recovered_at = time.monotonic()
            output = log.read_text()
            if rode_out:
                outcome = (f"rode it out: first commit {recovered_at - fault_ended:.1f}s after the fault ended "
                           f"({recovered_at - fault_at:.1f}s after it began)")
                driver.send_signal(signal.SIGTERM)
                assert driver.wait(180) == 0, output[-3000:]
            else:
                # It stopped: with an error that names the component, and a restart resumes exactly.
                assert driver.returncode != 0
                lowered = output.lower()
                assert "s3" in lowered or proxy.url.split("//")[1] in output, output[-3000:]
                outcome = f"stopped {recovered_at - fault_at:.1f}s after the fault began (exit {driver.returncode})"
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        restarted = time.monotonic()
        drain = subprocess.run([*command, "--trigger", "available-now"], env=env, capture_output=True, text=True,
                               timeout=600)
        assert drain.returncode == 0, drain.stdout[-3000:] + drain.stderr[-3000:]
        print(f"[fault {fault} on {fmt}] {outcome}; drain run {time.monotonic() - restarted:.1f}s; proxy {proxy.stats}")
    assert_exact(reconcile(config, settings, spark), produced.count, produced.bad)
