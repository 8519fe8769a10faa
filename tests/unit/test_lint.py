"""Static checks on the whole code base (pyflakes-class errors such as undefined names fail the suite)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "ingest", "infra", "maintenance", "lakeline",
                             "bench", "tests", "dags"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
