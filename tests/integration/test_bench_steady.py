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


# Meant for the heavy tier; soak until it passes. Measured 2026-11-27 on a 2-core box shared with other benches:
# 786 s, failed: no compaction ran. Each compaction run decides as of its data interval end, and the runs started
# minutes late (4 Spark tasks in sequence, 2 Airflow slots shared with the 1-minute backups), so the history
# written after that end counted as hot; and the Delta table's retention (retain 10m) was refused by the table's
# own deletedFileRetentionDuration floor. Since then the bench's policy compacts the live partition past
# max_files_per_partition and its Delta table's floor is lowered; not run again yet.
@pytest.mark.soak
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
    for fmt in ("delta", "iceberg"):
        table = lakeline["tables"][fmt]
        # exact and nothing dead-lettered: the load is clean
        assert table["exact"] and table["reconcile"]["duplicates"] == table["reconcile"]["missing"] == 0, table
        assert table["reconcile"]["dead_letters"] == 0
        # compaction really ran through the scheduler beside the stream, and retention after it
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
