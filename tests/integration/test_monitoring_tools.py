"""Lakeline's monitoring artifacts against Prometheus's own tools (Debian's packages, fetched by
infra/monitoring_tools.py): promtool parses the alert rules and runs their unit tests (infra/monitoring/
alerts_test.yaml); maintenance figures pushed to a real Pushgateway replace their group's previous values; and a real
Prometheus scraping that gateway with the rules loaded fires the alerts the pushed figures call for.

Costs: about 10 s (three Go binaries on loopback, no Spark), plus a 23 MB download the first time.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from infra.monitoring_tools import prometheus_tools
from infra.procs import ComponentError, free_port
from maintenance import metrics as maintenance_metrics
from maintenance.compaction import CommitResult, CompactionResult, PartitionResult
from tests.helpers import wait_for

pytestmark = pytest.mark.integration
MONITORING = Path(__file__).resolve().parents[2] / "infra" / "monitoring"


@pytest.fixture(scope="module")
def tools():
    try:
        return prometheus_tools()
    except ComponentError as exc:
        pytest.fail(f"Prometheus's tools could not be fetched: {exc}", pytrace=False)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
        return response.read().decode()


def _serving(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


@pytest.fixture
def started(tmp_path):
    """Start a loopback server (argv with {port}); yields a function returning its base URL once it answers."""
    processes, logs = [], []

    def start(argv: list[str], ready_path: str) -> str:
        port = free_port()
        log = open(tmp_path / f"{Path(argv[0]).name}.log", "w")
        logs.append(log)
        process = subprocess.Popen([a.format(port=port) for a in argv], stdout=log, stderr=subprocess.STDOUT)
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: process.poll() is None and _serving(base + ready_path) or process.poll() is not None,
                 f"{Path(argv[0]).name} to answer", timeout=60, every=0.2)
        assert process.poll() is None, (tmp_path / f"{Path(argv[0]).name}.log").read_text()[-3000:]
        return base

    yield start
    for process in processes:
        process.terminate()
        process.wait(30)
    for log in logs:
        log.close()


def test_promtool_parses_the_rules_and_their_unit_tests_pass(tools):
    checked = subprocess.run([str(tools.promtool), "check", "rules", str(MONITORING / "alerts.yaml")],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"][0]["rules"]
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout
    tested = subprocess.run([str(tools.promtool), "test", "rules", str(MONITORING / "alerts_test.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    # every alert has a unit test
    tests = yaml.safe_load((MONITORING / "alerts_test.yaml").read_text())["tests"]
    covered = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert covered == {rule["alert"] for rule in rules}


def test_pushed_maintenance_figures_fire_the_alerts_in_a_real_prometheus(tools, started, tmp_path):
    gateway = started([str(tools.pushgateway), "--web.listen-address=127.0.0.1:{port}"], "/-/ready")
    settings = SimpleNamespace(pushgateway_url=gateway, metrics_textfile_dir=None)

    def compaction(failed: int, compacted: int):
        partitions = [PartitionResult("d", "compacted", "", 40, files_now=2, commit=0)
                      ] * compacted + [PartitionResult("d", "failed", "", 5, files_now=5)] * failed
        commits = [CommitResult(["d"], "compacted", "", 40, 2, 9_000_000)] * compacted
        return maintenance_metrics.compaction_figures(CompactionResult("orders", "delta", False, partitions,
                                                                       commits, seconds=3.0))

    assert maintenance_metrics.report(settings, "compaction", {"table": "orders"}, compaction(0, 3)) == gateway
    assert maintenance_metrics.report(settings, "compaction", {"table": "orders"}, compaction(2, 1)) == gateway
    assert maintenance_metrics.report(settings, "compaction", {"table": "clicks"}, compaction(0, 1)) == gateway
    drill = SimpleNamespace(scenarios=[SimpleNamespace(scenario="kill", passed=False, recovery_seconds=None,
                                                       duplicates=0, missing=3, seconds=40.0)])
    for scenario, figures in maintenance_metrics.drill_figures(drill).items():
        maintenance_metrics.report(settings, "drill", {"pipeline": "orders", "scenario": scenario}, figures)

    # The gateway holds the second push of the orders group, not a sum or a mix with the first.
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(_get(gateway + "/metrics")) for s in family.samples}
    orders = (("instance", ""), ("job", "lakeline_compaction"), ("table", "orders"))
    assert samples[("lakeline_compaction_partitions_failed", orders)] == 2
    assert samples[("lakeline_compaction_files_compacted", orders)] == 40
    assert samples[("lakeline_compaction_bytes_rewritten", orders)] == 9_000_000
    clicks = (("instance", ""), ("job", "lakeline_compaction"), ("table", "clicks"))
    assert samples[("lakeline_compaction_partitions_failed", clicks)] == 0

    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "alerts.yaml")],
        "scrape_configs": [{"job_name": "pushgateway", "honor_labels": True,
                            "static_configs": [{"targets": [gateway.removeprefix("http://")]}]}]}))
    prometheus = started([str(tools.prometheus), f"--config.file={config}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--web.listen-address=127.0.0.1:{port}"],
                         "/-/ready")
    firing: list[dict] = []

    def alerts() -> bool:
        found = json.loads(_get(prometheus + "/api/v1/alerts"))["data"]["alerts"]
        firing[:] = [a for a in found if a["state"] == "firing"]
        return {a["labels"]["alertname"] for a in firing} >= {"LakelineCompactionFailing", "LakelineDrillFailed"}

    wait_for(alerts, "Prometheus to fire the alerts the pushed figures call for", timeout=60, every=0.5)
    by_name = {a["labels"]["alertname"]: a for a in firing}
    assert by_name["LakelineCompactionFailing"]["labels"]["table"] == "orders"  # not clicks, which compacted fine
    assert by_name["LakelineCompactionFailing"]["annotations"]["summary"] == (
        "orders: 2 partition(s) failed to compact in the last run")
    assert by_name["LakelineDrillFailed"]["annotations"]["summary"] == "orders: recovery drill kill failed"
    assert len([a for a in firing if a["labels"]["alertname"] == "LakelineCompactionFailing"]) == 1
