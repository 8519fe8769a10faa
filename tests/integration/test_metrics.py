"""`lakeline --log-format json ingest --metrics-port P`: metrics scraped while a real stream runs (parsed with
prometheus_client's parser) agree with reconcile; the lag gauge falls to 0 once the backlog is drained; every
line the command writes (its own, the per-batch lines, Spark's) is one JSON object; `lakeline tables` beside the
running stream shows the table complete through every produced record.

Cost (2 cores): about 70 s (one driver subprocess, three batches). Heavy: CI runs it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest.config import load_pipeline
from ingest.produce import BAD_KINDS, produce
from ingest.reconcile import reconcile
from infra.procs import free_port
from tests.helpers import lakeline_in_process, pipeline_dict, wait_for, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


JVM_PREAMBLE = ("WARNING: Using incubator modules", "SLF4J: ")


def scrape(port: int) -> dict[str, list]:
    """Family name -> samples, from one scrape of the driver's /metrics."""
    return {family.name: family.samples for family in text_string_to_metric_families(scrape_text(port))}


def scrape_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def total(families: dict[str, list], name: str) -> float:
    return sum(s.value for s in families.get(name, []) if s.name in (name, f"{name}_total"))


def test_metrics_during_a_run_agree_with_reconcile_and_logs_are_json(conf_dir, settings, spark, tmp_path, capsys):
    data = pipeline_dict("delta")
    data["source"]["max_offsets_per_trigger"] = 1000
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    produced = produce(config, settings, 3000, bad_ratio=0.02, seed=91)
    port = free_port()
    out, err = open(tmp_path / "stdout", "w"), open(tmp_path / "stderr", "w")
    driver = subprocess.Popen([sys.executable, "-m", "lakeline", "--log-format", "json", "ingest", "--pipeline",
                               str(path), "--trigger", "processing-time=500ms", "--metrics-port", str(port)],
                              stdout=out, stderr=err)
    try:
        def landed() -> bool:
            if driver.poll() is not None:
                raise AssertionError((tmp_path / "stderr").read_text()[-3000:])
            try:
                families = scrape(port)
            except OSError:
                return False  # not listening yet
            return total(families, "lakeline_records") + total(families, "lakeline_dead_letters") >= 3000

        wait_for(landed, "the metrics to count every produced record", timeout=300)
        text = scrape_text(port)
        families = {family.name: family.samples for family in text_string_to_metric_families(text)}
        shown = ("lakeline_records_total", "lakeline_dead_letters_total", "lakeline_source_lag_records",
                 "lakeline_batches_total", "lakeline_seconds_since_last_commit", "lakeline_committed_offset",
                 "lakeline_batch_duration_seconds_count")
        print("[scrape]\n" + "\n".join(line for line in text.splitlines() if line.startswith(shown)))
        # The analyst's freshness listing beside the running stream (about 1 s, no Spark): the positions the table
        # is complete through are every produced record, nothing waits, the SLA holds.
        code, listing, _ = lakeline_in_process(capsys, "tables", "--pipeline", str(path), "--output", "json")
        assert code == 0, listing
        statuses = json.loads(listing)
        [main] = [t for t in statuses if t["kind"] == "main"]
        assert main["created"] and main["newest_commit_at"] and main["sla"] == "FRESH", main
        assert sum(o for parts in main["complete_through"].values() for o in parts.values()) == 3000, main
        assert main["waiting_records"] == 0 and main["rows"] == 3000 - produced.bad_total, main
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(120) == 0, (tmp_path / "stderr").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    report = reconcile(config, settings, spark)
    assert report.exact and report.produced == 3000, report
    assert total(families, "lakeline_records") == report.produced - report.dead_letters
    assert total(families, "lakeline_dead_letters") == report.dead_letters == produced.bad_total
    reasons = {s.labels["reason"] for s in families["lakeline_dead_letters"] if s.name.endswith("_total")}
    assert reasons and reasons <= set(BAD_KINDS), reasons
    assert [s.value for s in families["lakeline_source_lag_records"]] == [0.0]  # drained
    # the committed next positions sum to the records in the topic (every partition starts at offset 0)
    assert sum(s.value for s in families["lakeline_committed_offset"]) == 3000
    [batches] = [s.value for s in families["lakeline_batches"] if s.labels.get("outcome") == "committed"
                 and s.name.endswith("_total")]
    durations = {s.name: s.value for s in families["lakeline_batch_duration_seconds"]}
    assert durations["lakeline_batch_duration_seconds_count"] == batches >= 3
    assert durations["lakeline_batch_duration_seconds_sum"] > 0
    assert [s.value for s in families["lakeline_pipeline_running"]] == [1.0]
    assert 0 <= [s.value for s in families["lakeline_seconds_since_last_commit"]][0] < 120

    lines = [line for name in ("stdout", "stderr") for line in (tmp_path / name).read_text().splitlines() if line]
    # The JVM's own launcher and the AWS SDK bundle's SLF4J 1.x write these before any logging is set up.
    records = [json.loads(line) for line in lines if not line.startswith(JVM_PREAMBLE)]  # every other line: JSON
    assert all({"time", "level", "message"} <= set(r) for r in records), records[:5]
    batch_lines = [r for r in records if r.get("event") == "batch_committed"]
    assert len(batch_lines) == batches and all(r["pipeline"] == config.pipeline for r in batch_lines)
    assert any(r.get("logger") == "ingest.lease" and r["pipeline"] == config.pipeline for r in records), records
    assert any(f"metrics on http://127.0.0.1:{port}/metrics" in r["message"] for r in records)
