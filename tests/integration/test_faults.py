"""Faults injected under a live stream (infra/faultproxy.py in front of moto S3, loopback only): the stream either
rides the fault out or stops with an error naming S3, and a restart resumes; either way the table ends exact.
Each test prints what happened and how long recovery took (the issue's closing note quotes these lines).

Costs (2 cores): each about 2-4 min (a driver, the fault, a drain run). Heavy: CI runs S3 unreachable for 30 s
and the broker stopped for 30 s, on both formats (about 10 min together); the other faults are in the soak tier.
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

pytestmark = [pytest.mark.integration, pytest.mark.heavy, pytest.mark.soak]  # soak: does not fit CI on a slow day

# (mode, seconds the fault lasts, latency per chunk)
FAULTS = {
    "s3-unreachable-10s": ("refuse", 10, 0.0),  # shorter than the lease (LAKELINE_LEASE_SECONDS, 15 s)
    "s3-unreachable-30s": ("refuse", 30, 0.0),
    "s3-unreachable-5min": ("refuse", 300, 0.0),
    "s3-resets-30s": ("reset", 30, 0.0),
    "s3-latency-1s-60s": ("latency", 60, 1.0),
    "s3-slowdown-30s": ("slowdown", 30, 0.0),
}


@pytest.mark.parametrize(("fault", "fmt"), [
    ("s3-unreachable-30s", "delta"),
    pytest.param("s3-unreachable-10s", "delta", marks=pytest.mark.soak),
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
                stopped_at: list[float] = []  # when the driver was first seen to have exited

                def watching(done) -> bool:
                    if not stopped_at and driver.poll() is not None:
                        stopped_at.append(time.monotonic())
                    return done()

                wait_for(lambda: watching(lambda: proxy.mode == "pass"), f"the {fault} to end", timeout=seconds + 30,
                         every=0.2)
                fault_ended = time.monotonic()
                wait_for(lambda: watching(lambda: bool(stopped_at) or len(events_of(stream, BatchCommitted)) > before),
                         "a commit after the fault, or the driver to stop", timeout=600, every=0.2)
                rode_out = not stopped_at
                recovered_at = stopped_at[0] if stopped_at else time.monotonic()
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


BROKER_DOWN_SECONDS = 30


def _landed(stream) -> int:
    """Records in the run's committed batches (rows and dead letters), from its events file."""
    return sum(e.rows + e.dead_letters for e in events_of(stream, BatchCommitted))


# Both formats in CI's heavy tier (about 2.5 min each: a broker of its own, a driver, a drain run).
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_the_broker_stopped_and_restarted_under_a_live_stream_ends_exact(fmt, conf_dir, settings, spark, tmp_path):
    """A broker of the test's own (so the session's other tests keep theirs): SIGTERM it under a running stream,
    keep it down 30 s, start it again on the same ports with its data, and produce more."""
    from infra.kafka_broker import restart_broker, start_broker
    from infra.paths import jars_dir
    from infra.procs import stop_pid

    work = tmp_path / "broker"
    broker = start_broker(jars_dir("kafka"), work)
    own = settings.model_copy(update={"kafka_bootstrap_servers": broker.bootstrap})
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 500
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    produced = Produced()

    def send(count: int, seed: int) -> None:
        result = produce(config, own, count, bad_ratio=0.01, seed=seed)
        produced.count += result.count
        produced.bad += result.bad_total

    send(1000, 120)
    env = {**os.environ, "LAKELINE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap}
    command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path)]
    stream, log = tmp_path / "events.jsonl", tmp_path / "driver.log"
    driver = subprocess.Popen([*command, "--trigger", "processing-time=500ms", "--events", str(stream)], env=env,
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: events_of(stream, BatchCommitted), "the first batch", timeout=240)
        send(500, 121)
        wait_for(lambda: _landed(stream) >= 1500, "the stream to catch up before the fault", timeout=240)
        stop_pid(broker.pid, str(work))
        down_at = time.monotonic()
        time.sleep(BROKER_DOWN_SECONDS)  # the fault's length: the broker stays down this long
        restart_broker(broker, jars_dir("kafka"), work)
        back_at = time.monotonic()
        send(1000, 122)

        wait_for(lambda: driver.poll() is not None or _landed(stream) >= produced.count,
                 "the stream to ingest what came after the restart, or to stop", timeout=600)
        if driver.poll() is None:
            outcome = (f"rode it out: everything ingested {time.monotonic() - back_at:.1f}s after the broker came "
                       f"back ({time.monotonic() - down_at:.1f}s after it went down)")
            driver.send_signal(signal.SIGTERM)
            assert driver.wait(180) == 0, log.read_text()[-3000:]
        else:
            output = log.read_text()
            assert driver.returncode != 0 and "kafka" in output.lower(), output[-3000:]
            outcome = f"stopped (exit {driver.returncode}) {time.monotonic() - down_at:.1f}s after the broker went down"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    try:
        drain = subprocess.run([*command, "--trigger", "available-now"], env=env, capture_output=True, text=True,
                               timeout=600)
        assert drain.returncode == 0, drain.stdout[-3000:] + drain.stderr[-3000:]
        print(f"[fault broker-restart-{BROKER_DOWN_SECONDS}s on {fmt}] {outcome}")
        assert_exact(reconcile(config, own, spark), produced.count, produced.bad)
    finally:
        stop_pid(broker.pid, str(work))


CATALOG_LOCKED_SECONDS = 30


# Soak (about 2.5 min, past CI's budget).
@pytest.mark.soak
def test_the_iceberg_catalog_database_locked_under_a_live_stream_ends_exact(conf_dir, settings, spark, tmp_path):
    """The SQLite catalog held in an exclusive transaction for 30 s while an Iceberg stream commits."""
    import sqlite3

    uri = settings.iceberg_catalog_uri or ""
    assert uri.startswith("sqlite:///"), f"this fault needs the SQLite catalog, not {uri}"
    data = pipeline_dict("iceberg")
    data["source"]["max_offsets_per_trigger"] = 500
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    first = produce(config, settings, 1000, bad_ratio=0.01, seed=130)
    produced = Produced(first.count, first.bad_total)
    command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path)]
    stream, log = tmp_path / "events.jsonl", tmp_path / "driver.log"
    driver = subprocess.Popen([*command, "--trigger", "processing-time=500ms", "--events", str(stream)],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: events_of(stream, BatchCommitted), "the first batch", timeout=240)
        lock = sqlite3.connect(uri[len("sqlite:///"):], isolation_level=None, timeout=30)
        lock.execute("BEGIN EXCLUSIVE")
        locked_at = time.monotonic()
        before = len(events_of(stream, BatchCommitted))
        second = produce(config, settings, 1000, bad_ratio=0.01, seed=131)
        produced.count += second.count
        produced.bad += second.bad_total
        time.sleep(CATALOG_LOCKED_SECONDS)  # the fault's length: the catalog stays locked this long
        committed_while_locked = len(events_of(stream, BatchCommitted)) - before
        lock.execute("COMMIT")
        lock.close()
        unlocked_at = time.monotonic()

        wait_for(lambda: driver.poll() is not None or _landed(stream) >= produced.count,
                 "the stream to ingest the rest, or to stop", timeout=600)
        assert committed_while_locked == 0, "a commit landed while the catalog was locked"
        if driver.poll() is None:
            outcome = (f"rode it out: caught up {time.monotonic() - unlocked_at:.1f}s after the lock was released "
                       f"({time.monotonic() - locked_at:.1f}s after it was taken)")
            driver.send_signal(signal.SIGTERM)
            assert driver.wait(180) == 0, log.read_text()[-3000:]
        else:
            output = log.read_text()
            # the command's last word (Spark's own trace may end without a newline just before it)
            error = [line[line.index("lakeline: error:"):] for line in output.splitlines()
                     if "lakeline: error:" in line]
            assert driver.returncode == 1 and error and "the Iceberg catalog failed" in error[-1], output[-3000:]
            outcome = f"stopped (exit {driver.returncode}) {time.monotonic() - locked_at:.1f}s after the lock"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    drain = subprocess.run([*command, "--trigger", "available-now"], capture_output=True, text=True, timeout=600)
    assert drain.returncode == 0, drain.stdout[-3000:] + drain.stderr[-3000:]
    print(f"[fault catalog-locked-{CATALOG_LOCKED_SECONDS}s on iceberg] {outcome}")
    assert_exact(reconcile(config, settings, spark), produced.count, produced.bad)
