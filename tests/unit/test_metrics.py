"""Metrics from run events (ingest.metrics) and maintenance figures (maintenance.metrics), scraped and parsed with
prometheus_client's own parser; the JSON log format (ingest.events.json_log_line, for log records and run events)."""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ingest.events import (BatchCommitted, BatchReplayed, JsonLogLines, PipelineFailed, RunFinished, RunStarted,
                           SchemaEvolved, pipeline_context)
from ingest.metrics import RunMetrics, push_maintenance, serve
from lakeline import cli, logs
from maintenance import metrics as maintenance_metrics
from maintenance.compaction import CommitResult, CompactionResult, PartitionResult


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from exposition text."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _batch(batch_id: int, rows: int, reasons: dict[str, int], lag: int, end: int, at: float) -> BatchCommitted:
    return BatchCommitted(pipeline="orders", batch_id=batch_id, rows=rows, dead_letters=sum(reasons.values()),
                          seconds=0.4, phases={"table": 0.3}, spark_phases={"trigger": 0.6, "plan": 0.02}, lag=lag,
                          end={"t": {"0": end}}, dead_letter_reasons=reasons, at=at)


def test_run_events_become_counters_gauges_and_histograms():
    metrics = RunMetrics()
    metrics(RunStarted(pipeline="orders", action="resume", reason="", lineage="1", spark_seconds=1, read_seconds=1,
                       at=1000.0))
    metrics(_batch(0, 990, {"malformed_json": 7, "oversize": 3}, lag=500, end=1000, at=1001.0))
    metrics(_batch(1, 498, {"malformed_json": 2}, lag=0, end=1500, at=1002.0))
    metrics(BatchReplayed(pipeline="orders", batch_id=2, seconds=0.1))
    metrics(SchemaEvolved(pipeline="orders", table="t", changes=["add x"]))
    metrics(PipelineFailed(pipeline="orders", error="boom", failures=1, retry_in=5.0))
    got = samples(generate_latest(metrics.registry).decode())
    p = (("pipeline", "orders"),)
    assert got[("lakeline_records_total", p)] == 1488
    assert got[("lakeline_dead_letters_total", (("pipeline", "orders"), ("reason", "malformed_json")))] == 9
    assert got[("lakeline_dead_letters_total", (("pipeline", "orders"), ("reason", "oversize")))] == 3
    assert got[("lakeline_source_lag_records", p)] == 0
    assert got[("lakeline_committed_offset", (("partition", "0"), ("pipeline", "orders"), ("source", "t")))] == 1500
    assert got[("lakeline_batches_total", (("outcome", "committed"), ("pipeline", "orders")))] == 2
    assert got[("lakeline_batches_total", (("outcome", "replayed"), ("pipeline", "orders")))] == 1
    assert got[("lakeline_batch_duration_seconds_count", p)] == 2
    assert got[("lakeline_batch_phase_seconds_count", (("phase", "spark_trigger"), ("pipeline", "orders")))] == 2
    assert got[("lakeline_runs_started_total", (("pipeline", "orders"), ("plan", "resume")))] == 1
    assert got[("lakeline_schema_evolutions_total", p)] == 1
    assert got[("lakeline_pipeline_restarts_total", p)] == 1 and got[("lakeline_pipeline_failures_total", p)] == 1
    assert got[("lakeline_pipeline_running", p)] == 0  # failed: not running until it starts again
    assert got[("lakeline_last_commit_timestamp_seconds", p)] == 1002.0
    assert got[("lakeline_seconds_since_last_commit", p)] > 0


def test_rescued_conflicts_are_counted_per_field_and_named_in_the_batch_line():
    from ingest.events import human_line

    metrics = RunMetrics()
    batch = BatchCommitted(pipeline="gh", batch_id=3, rows=329, dead_letters=0,
                           rescued_conflicts={"installation.created_at": 6, "items[].qty": 2})
    metrics(batch)
    metrics(BatchCommitted(pipeline="gh", batch_id=4, rows=10, dead_letters=0,
                           rescued_conflicts={"installation.created_at": 1}))
    got = samples(generate_latest(metrics.registry).decode())
    assert got[("lakeline_rescued_conflicts_total", (("field", "installation.created_at"), ("pipeline", "gh")))] == 7
    assert got[("lakeline_rescued_conflicts_total", (("field", "items[].qty"), ("pipeline", "gh")))] == 2
    assert "rescued_conflicts(installation.created_at=6 items[].qty=2)" in human_line(batch)
    assert "rescued_conflicts" not in human_line(_batch(0, 1, {}, lag=0, end=1, at=1.0))
    assert BatchCommitted(**{k: v for k, v in batch.to_json().items() if k != "event"}) == batch


def test_seconds_since_last_commit_counts_from_the_start_until_a_first_commit():
    metrics = RunMetrics()
    metrics(RunStarted(pipeline="idle", action="fresh", reason="", lineage="1", spark_seconds=1, read_seconds=1))
    metrics(RunFinished(pipeline="idle", batches=0, rows=0, dead_letters=0, seconds=1))
    got = samples(generate_latest(metrics.registry).decode())
    assert 0 <= got[("lakeline_seconds_since_last_commit", (("pipeline", "idle"),))] < 60
    assert ("lakeline_records_total", (("pipeline", "idle"),)) not in got  # nothing committed, no series yet


def test_dead_letters_without_reasons_are_counted_as_unknown():
    metrics = RunMetrics()
    metrics(BatchCommitted(pipeline="p", batch_id=0, rows=5, dead_letters=2))
    got = samples(generate_latest(metrics.registry).decode())
    assert got[("lakeline_dead_letters_total", (("pipeline", "p"), ("reason", "unknown")))] == 2


def test_the_metrics_server_answers_a_scrape_on_loopback():
    metrics = RunMetrics()
    metrics(_batch(0, 10, {}, lag=3, end=10, at=1.0))
    server, thread = serve(metrics, 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    assert samples(text)[("lakeline_records_total", (("pipeline", "orders"),))] == 10


class _Gateway(BaseHTTPRequestHandler):
    """A Pushgateway's push API, recording what it was sent (PUT /metrics/job/<job>/<label>/<value>...)."""

    pushes: list[tuple[str, str, str]] = []
    authorizations: list[str | None] = []

    def do_PUT(self):  # noqa: N802 - http.server's API
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.pushes.append((self.command, self.path, body))
        self.authorizations.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway():
    _Gateway.pushes, _Gateway.authorizations = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_port}", _Gateway.pushes
    server.shutdown()


def test_compaction_figures_pushed_to_a_pushgateway_grouped_by_table(gateway):
    address, pushes = gateway
    # The stream added files while the run worked: the commit rewrote 44 files (more than the 40 planned) into 2,
    # and 7 files are there after the run.
    result = CompactionResult("orders", "delta", False, seconds=12.5, partitions=[
        PartitionResult("d=1", "compacted", "", 40, files_now=5, commit=0),
        PartitionResult("d=2", "failed", "", 10, files_now=1),
        PartitionResult("d=3", "skipped", "", 3, files_now=1, commit=1)], commits=[
        CommitResult(["d=1"], "compacted", "", 44, 2, 9_000_000), CommitResult(["d=3"], "skipped", "conflict")])
    settings = SimpleNamespace(pushgateway_url=f"http://{address}", metrics_textfile_dir=None)
    assert maintenance_metrics.report(settings, "compaction", {"table": "orders"},
                                      maintenance_metrics.compaction_figures(result)) == f"http://{address}"
    [(method, path, body)] = pushes
    assert method == "PUT" and path == "/metrics/job/lakeline_compaction/table/orders"
    got = samples(body)
    t = (("table", "orders"),)
    assert got[("lakeline_compaction_files_compacted", t)] == 44 and got[("lakeline_compaction_files_written", t)] == 2
    assert got[("lakeline_compaction_files_now", t)] == 7
    assert got[("lakeline_compaction_bytes_rewritten", t)] == 9_000_000
    assert got[("lakeline_compaction_partitions_failed", t)] == 1
    assert got[("lakeline_compaction_last_run_timestamp_seconds", t)] > 0


def test_a_gateway_with_credentials_gets_basic_auth(gateway):
    import base64

    address, pushes = gateway
    push_maintenance("freshness", {"pipeline": "p"}, {"breached": 0}, gateway=f"http://ops:pw@{address}")
    [(_, path, _)] = pushes
    assert path == "/metrics/job/lakeline_freshness/pipeline/p"
    assert _Gateway.authorizations == ["Basic " + base64.b64encode(b"ops:pw").decode()]


def test_an_unreachable_gateway_is_a_warning_not_a_failure(caplog):
    settings = SimpleNamespace(pushgateway_url="http://127.0.0.1:9", metrics_textfile_dir=None)  # discard port
    with caplog.at_level(logging.WARNING):
        assert maintenance_metrics.report(settings, "retention", {"table": "t"}, {"files_deleted": 1}) is None
    assert "not reported to http://127.0.0.1:9" in caplog.text


def test_a_gateway_password_is_never_shown(caplog):
    from ingest.settings import Settings

    settings = Settings(pushgateway_url="http://ops:gateway-secret@127.0.0.1:9/")
    assert "gateway-secret" not in str(settings.describe())
    with caplog.at_level(logging.WARNING):
        assert maintenance_metrics.report(settings, "retention", {"table": "t"}, {"files_deleted": 1}) is None
    assert "not reported to http://ops:**********@127.0.0.1:9/" in caplog.text
    assert "gateway-secret" not in caplog.text


def test_drill_and_retention_figures_to_a_textfile(tmp_path):
    report = SimpleNamespace(scenarios=[
        SimpleNamespace(scenario="kill", passed=True, recovery_seconds=14.2, duplicates=0, missing=0, seconds=90.0),
        SimpleNamespace(scenario="lose-checkpoint", passed=False, recovery_seconds=None, duplicates=0, missing=3,
                        seconds=80.0)])
    settings = SimpleNamespace(pushgateway_url=None, metrics_textfile_dir=str(tmp_path))
    for scenario, figures in maintenance_metrics.drill_figures(report).items():
        maintenance_metrics.report(settings, "drill", {"pipeline": "orders", "scenario": scenario}, figures)
    got = samples((tmp_path / "lakeline_drill_orders_kill.prom").read_text())
    assert got[("lakeline_drill_recovery_seconds", (("pipeline", "orders"), ("scenario", "kill")))] == 14.2
    failed = samples((tmp_path / "lakeline_drill_orders_lose-checkpoint.prom").read_text())
    labels = (("pipeline", "orders"), ("scenario", "lose-checkpoint"))
    assert failed[("lakeline_drill_passed", labels)] == 0 and failed[("lakeline_drill_missing", labels)] == 3
    retention = SimpleNamespace(dry_run=True, files_deleted=["a", "b"], orphan_files=["c"], snapshots_expired=None,
                                seconds=3.0)
    assert maintenance_metrics.retention_figures(retention) == {"files_deleted": 0, "files_deletable": 2,
                                                                "orphan_files": 1, "seconds": 3.0}
    assert push_maintenance("retention", {"table": "t"}, {"x": 1}) is None  # nowhere configured: nothing sent


def test_json_log_lines_name_the_pipeline_of_the_thread():
    stream = io.StringIO()
    handler = logs.configure(stream=stream, log_format="json")
    try:
        with pipeline_context("orders"):
            logging.getLogger("ingest.lease").info("lease taken")
        logging.getLogger("ingest.lease").warning("no pipeline here")
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert first["pipeline"] == "orders" and first["message"] == "lease taken" and first["level"] == "info"
    assert first["logger"] == "ingest.lease" and first["time"].endswith("Z")
    assert second["pipeline"] is None and second["level"] == "warning"


def test_json_event_lines_carry_the_pipeline_and_the_event():
    stream = io.StringIO()
    JsonLogLines(stream)(_batch(3, 10, {}, lag=0, end=10, at=0.0))
    [line] = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["pipeline"] == "orders" and line["event"] == "batch_committed" and "batch 3" in line["message"]


@pytest.mark.parametrize(("argv", "chosen", "rest"), [
    (["ingest", "--log-format", "json", "--pipeline", "a"], "json", ["ingest", "--pipeline", "a"]),
    (["--log-format=json", "reconcile"], "json", ["reconcile"]),
    (["reconcile"], None, ["reconcile"])])
def test_log_format_is_taken_wherever_it_stands(argv, chosen, rest):
    assert cli._log_format(argv) == (chosen, rest)
