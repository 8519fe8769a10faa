"""Session-wide settings that must exist before anything imports Airflow: a throwaway AIRFLOW_HOME (SQLite
metadata DB), no example DAGs, and the repo's dags/ as the DAGs folder."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="lakeline-airflow-")
os.environ.update({
    "AIRFLOW_HOME": _AIRFLOW_HOME,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
})


def pytest_runtest_logreport(report):
    """Print a failure's traceback the moment it happens, not only in the end-of-run summary: a CI run cut off by
    its time limit never reaches the summary, and then the log would say FAILED without saying why."""
    if report.failed:
        sys.stderr.write(f"\n[test] FAILED {report.nodeid} ({report.when}):\n{report.longreprtext[-6000:]}\n")
        sys.stderr.flush()
