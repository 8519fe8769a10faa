"""The benchmarks' quick mode runs end to end on the test stack: every benchmark and every peer starts, measures
and checks exactness. Figures are never asserted (they depend on the machine); the reference run is
`python -m bench` and its results are committed under bench/results/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _quick(modules: list[str], tmp_path: Path) -> tuple[list[dict], str]:
    """`python -m bench --quick --only MODULES`: its JSON result lines, and its stdout. Checks it exits 0, says
    every benchmark was exact, and wrote nothing under bench/results/."""
    recorded = {p: p.stat().st_mtime for p in (REPO / "bench" / "results").iterdir()}
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", *modules], cwd=REPO,
                          capture_output=True, text=True, timeout=1400, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "all benchmarks exact" in done.stdout
    # quick mode writes nothing: the committed reference results stay as they are
    assert {p: p.stat().st_mtime for p in (REPO / "bench" / "results").iterdir()} == recorded
    lines = [json.loads(line.strip()) for line in done.stdout.splitlines()
             if line.strip().startswith("{") and '"exact"' in line]
    return lines, done.stdout[-4000:]


# Heavy (CI runs it), ~5 min (307 s, 2026-11-25): the drain peers (every system, Flink's once installed), the Delta
# latency peers, compaction and a Kinesis drain.
@pytest.mark.soak  # ~8 min on a slow day; the benchmarks themselves run by hand
@pytest.mark.timeout(1500)
def test_quick_benchmarks_of_every_peer_system_are_exact(stack_env, tmp_path):
    from bench.latency import FLINK_PYTHON

    lines, out = _quick(["drain_peers", "latency", "compaction", "drain_kinesis"], tmp_path)
    flink = {"flink-iceberg"} if FLINK_PYTHON.exists() else set()  # the opt-in peer, once infra/flink.sh ran
    drained = [r for r in lines if r.get("benchmark") == "drain_peers"]
    assert {r["system"] for r in drained} == {"lakeline", "spark-delta", "delta-rs", "lakeline-iceberg",
                                              "spark-iceberg"} | flink, out
    assert all(r["exact"] and r["records_per_s"] > 0 and r["commits"] >= 1 for r in drained), drained
    results = [r for r in lines if r.get("benchmark") != "drain_peers"]
    latency = [r for r in results if "system" in r]
    assert {r["system"] for r in latency} == {"lakeline", "spark-delta", "delta-rs"}, out
    # positive: a commit stamped before the row's intended send time would mean a clock or parsing error
    assert all(r["latency_n"] > 0 and r["latency_p50"] > 0 and r["exact"] for r in latency), latency
    formats = [r["format"] for r in results if "format" in r]
    assert formats.count("delta") == 2 and formats.count("iceberg") == 2  # compaction and the Kinesis drain
    assert all(r["exact"] for r in results), results


# Recovery (kill -9, restart, warm standby, delta-rs), the Iceberg latency peers, the Kafka drain and many pipelines.
@pytest.mark.soak  # ~9 min on a slow day
@pytest.mark.timeout(1500)
def test_quick_benchmarks_of_recovery_iceberg_latency_and_many_pipelines_are_exact(stack_env, tmp_path):
    from bench.latency import FLINK_PYTHON

    lines, out = _quick(["drain", "latency_iceberg", "recovery", "multi_pipeline"], tmp_path)
    flink = {"flink-iceberg"} if FLINK_PYTHON.exists() else set()
    latency = [r for r in lines if "system" in r and "recovery_s" not in r]
    assert {r["system"] for r in latency} == {"lakeline-iceberg", "spark-iceberg"} | flink, out
    assert all(r["latency_n"] > 0 and r["latency_p50"] > 0 and r["exact"] for r in latency), latency
    recovered = {r["system"]: r for r in lines if "recovery_s" in r}
    assert set(recovered) == {"lakeline", "lakeline (warm standby)", "delta-rs"}, recovered
    for lakeline in ("lakeline", "lakeline (warm standby)"):
        assert recovered[lakeline]["recovery_s"] > 0 and recovered[lakeline]["duplicates"] == 0
        assert recovered[lakeline]["exact"]
    assert all(r["missing"] == 0 for r in recovered.values()), recovered  # at-least-once may duplicate, never lose
    multi = [r for r in lines if "pipelines" in r]
    assert {r["mode"] for r in multi} == {"one-app", "separate"}, multi
    assert all(r["exact"] and r["latency_n"] > 0 and r["rss_max_mb"] > 0 for r in multi), multi
    assert {r["mode"]: r["drivers"] for r in multi} == {"one-app": 1, "separate": 2}
    drained = [r for r in lines if "format" in r and "pipelines" not in r]
    assert sorted(r["format"] for r in drained) == ["delta", "iceberg"], drained  # the Kafka drain, both formats
    assert all(r["exact"] for r in drained), drained


def test_decode_benchmark_runs_every_variant(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.decode", "--count", "3000", "--runs", "1", "--no-write"],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    figures = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("[bench.decode]")]
    variants = {" ".join(f[:f.index("median")]) for f in figures if "median" in f}
    assert variants == {"scan", "typed parse", "decode"}, done.stdout
    assert all(float(f[f.index("median") + 1]) > 0 for f in figures if "median" in f), done.stdout


@pytest.mark.soak  # ~100 s on a slow day: one Spark driver, 5 x 12 small commits
def test_commit_cost_benchmark_measures_each_variant(stack_env, tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.commit_cost", "--commits", "12", "--iceberg-history", "0", "50",
                           "--no-write"],
                          cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = {r["variant"]: r for r in (json.loads(line.strip()) for line in done.stdout.splitlines()
                                      if line.strip().startswith("{"))}
    assert set(rows) == {"delta-spark", "delta-lakeline", "iceberg-merge-in-commit", "iceberg",
                         "iceberg (50 snapshots kept)"}, done.stdout
    assert all(r["commit_median_s"] > 0 and r["requests_per_commit_median"] > 0 for r in rows.values()), rows
    assert rows["delta-lakeline"]["log_checkpoints"] == 2  # after the first commit and the eleventh
    assert "log_checkpoints" not in rows["delta-spark"]  # Delta's default interval: left to Spark
    assert 0 < rows["iceberg"]["metadata_json_kb"] < rows["iceberg (50 snapshots kept)"]["metadata_json_kb"]
    # the pipeline's manifest merger runs beside the Lakeline table's commits (12 manifests: under its limit), not
    # beside the earlier release's table, whose merges Iceberg does inside its commits
    assert rows["iceberg"]["manifest_merges"] == 0 and rows["iceberg"]["manifests"] == 12
    assert "manifest_merges" not in rows["iceberg-merge-in-commit"]


# ~1 min once installed; infra/flink.sh downloads ~900 MB on a clean machine (a few minutes). Soak: the opt-in peer,
# past CI's budget
@pytest.mark.heavy
@pytest.mark.soak
@pytest.mark.timeout(1500)
def test_flink_peer_installs_and_drains_into_iceberg_exactly(stack_env, tmp_path):
    """The opt-in Flink peer: its set-up step works from the project's own files, and the peer drains the same
    topic into the shared Iceberg catalog exactly, beside Lakeline's Iceberg drain."""
    setup = subprocess.run(["bash", "infra/flink.sh"], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "bench.drain_peers", "--count", "3000", "--systems",
                           "lakeline-iceberg", "flink-iceberg", "--no-write"], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = {r["system"]: r for r in (json.loads(line.strip()) for line in done.stdout.splitlines()
                                     if line.strip().startswith("{") and '"exact"' in line)}
    assert set(rows) == {"lakeline-iceberg", "flink-iceberg"}, done.stdout[-4000:]
    assert all(r["exact"] and r["rows"] == 3000 and r["commits"] >= 1 for r in rows.values()), rows
