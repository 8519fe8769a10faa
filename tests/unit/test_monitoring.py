"""The monitoring artifacts under infra/monitoring: the alert rules load as a Prometheus rule file and, like the
Grafana dashboard's queries, name only metrics Lakeline exports (run metrics and maintenance figures)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml

from ingest.metrics import RunMetrics, maintenance_registry
from maintenance import metrics as maintenance_metrics
from maintenance.compaction import CompactionResult

MONITORING = Path(__file__).resolve().parents[2] / "infra" / "monitoring"
NAME = re.compile(r"\blakeline_[a-z_]+\b")
DURATION = re.compile(r"^\d+[smhd]$")


def exported() -> set[str]:
    """Every series name Lakeline can export (with the suffixes Prometheus adds to counters and histograms)."""
    registries = [RunMetrics().registry]
    compaction = CompactionResult("t", "delta", dry_run=False, seconds=1.0)
    retention = SimpleNamespace(dry_run=False, files_deleted=[], orphan_files=[], snapshots_expired=0, seconds=1.0)
    drill = SimpleNamespace(scenarios=[SimpleNamespace(scenario="kill", passed=True, recovery_seconds=1.0,
                                                       duplicates=0, missing=0, seconds=1.0)])
    freshness = SimpleNamespace(ok=True, lag_records=0, staleness_seconds=1.0)
    figures = {"compaction": maintenance_metrics.compaction_figures(compaction),
               "retention": maintenance_metrics.retention_figures(retention),
               "drill": maintenance_metrics.drill_figures(drill)["kill"],
               "freshness": maintenance_metrics.freshness_figures(freshness)}
    registries += [maintenance_registry(command, {"table": "t"}, values, {}) for command, values in figures.items()]
    names = set()
    for registry in registries:
        for family in registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
            names |= {family.name + suffix for suffix in suffixes}
    return names


def test_alert_rules_load_and_name_exported_metrics():
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    [group] = rules["groups"]
    alerts = group["rules"]
    assert {r["alert"] for r in alerts} >= {"LakelineFreshnessSLABreached", "LakelineDeadLetterRateSpike",
                                            "LakelineLagGrowing", "LakelineNoCommit", "LakelineDrillFailed"}
    names = exported()
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert "for" not in rule or DURATION.match(rule["for"]), rule
        assert rule["labels"]["severity"] in {"page", "ticket"} and rule["annotations"]["summary"], rule
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        used = set(NAME.findall(expr))
        assert used <= names, (rule["alert"], used - names)
        assert used or expr.startswith("up{"), rule  # only the scrape-health rule names none of Lakeline's


def test_the_dashboard_queries_exported_metrics():
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    names = exported()
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 12
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used <= names, used - names
    # every family of the run metrics is on the dashboard somewhere
    run = {f.name for f in RunMetrics().registry.collect()}
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    assert run - shown <= {"lakeline_last_commit_timestamp_seconds", "lakeline_batches", "lakeline_pipeline_restarts",
                           "lakeline_pipeline_running", "lakeline_commit_retries", "lakeline_commits_reconciled",
                           "lakeline_lease_lost"}, run - shown
