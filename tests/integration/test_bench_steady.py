"""`python -m bench.steady --quick` end to end: a Delta and an Iceberg pipeline in one application under open-loop
load while the real Airflow scheduler (scheduler, dag-processor, execution API) compacts, expires and backs up
both tables on a one-minute schedule. Asserts behaviour, never timing: the latency targets are the bench's to
print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


# Heavy tier. Cost: 672 s alone on a quiet 2-core box (2026-11-28): stack and Airflow start, history, 3 min of
# load, then waiting for both tables' compaction and retention through the scheduler.
@pytest.mark.heavy
@pytest.mark.timeout(1500)
def test_quick_steady_state_compacts_beside_the_stream_through_the_real_scheduler_and_stays_exact(stack_env,
                                                                                                    tmp_path):
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "bench.steady", "--quick", "--results-dir", str(results),
                           "--output", "json"], cwd=REPO, capture_output=True, text=True, timeout=1400,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    doc = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"benchmark"')))
    [lakeline] = doc["results"]
    assert lakeline["lost_batches"] == 0
    # every task the scheduler ran took a slot of a Lakeline pool (maintenance.pools), none of default_pool's
    pools = {m["pool"] for m in lakeline["maintenance_runs"] if m["start_ms"]}
    assert pools and all(p.startswith("lakeline_") for p in pools), pools
    assert "lakeline_bound" in pools and "lakeline_steps" in pools
    for fmt in ("delta", "iceberg"):
        table = lakeline["tables"][fmt]
        # exact and nothing dead-lettered: the load is clean
        assert table["exact"] and table["reconcile"]["duplicates"] == table["reconcile"]["missing"] == 0, table
        assert table["reconcile"]["dead_letters"] == 0
        # compaction really ran through the scheduler beside the stream, and retention (at the least the daily
        # slot the unpaused DAG runs at once)
        runs = [m for m in lakeline["maintenance_runs"] if m["dag"] == f"lakeline_compact__{table['table']}"]
        assert any(m["task"] == "compact" and m["state"] == "success" for m in runs), runs
        assert table["compactions"] >= 1 and table["retentions"] >= 1, table
        # a row per minute of load, each with latency, files and memory sampled
        rows = table["per_minute"]
        assert [r["minute"] for r in rows] == [1, 2, 3]
        assert all(r["rows"] > 0 and r["p50"] > 0 and r["commits"] > 0 for r in rows), rows
        assert all(r["app_rss_mb"] > 0 and r["airflow_rss_mb"] > 0 for r in rows), rows
        assert all(r["files"] > 0 and r["max_files_per_partition"] > 0 for r in rows), rows
    assert len(list(results.glob("steady-*.json"))) == len(list(results.glob("steady-*.png"))) == 1
    assert "| minute |" in next(results.glob("steady-*.md")).read_text()
    # nothing of the run is left: no Airflow process (its AIRFLOW_HOME is under tmp_path), no driver
    assert [p.info["cmdline"] for p in psutil.process_iter(["cmdline", "environ"])
            if str(tmp_path) in " ".join(p.info["cmdline"] or []) + str((p.info["environ"] or {}).get(
                "AIRFLOW_HOME", ""))] == []
