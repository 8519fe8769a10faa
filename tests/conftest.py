"""Session-wide fixtures. Before anything imports Airflow: a throwaway AIRFLOW_HOME (SQLite metadata DB), no example
DAGs, and the repo's dags/ as the DAGs folder. Then the real local stack (KRaft broker + moto) and the test process's
one SparkSession. A component that cannot start fails the run with the reason."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory):
    """One real local stack per test session on free ports, in a tmp state dir; its endpoints in this process's
    environment for the session, every variable restored after it."""
    from infra import stack as local_stack
    from infra.procs import ComponentError

    state = tmp_path_factory.mktemp("lakeline-state")
    with pytest.MonkeyPatch.context() as env_patch:
        env_patch.setenv("LAKELINE_STATE_DIR", str(state))
        try:
            info = local_stack.up(state)
        except ComponentError as exc:
            pytest.fail(f"local stack could not start: {exc}", pytrace=False)
        env = info.env()
        for key, value in env.items():
            env_patch.setenv(key, value)
        yield {"state": state, "info": info, "env": env}
        local_stack.down(state)


@pytest.fixture(scope="session")
def settings(stack_env):
    """The stack's settings (through the same loader the command uses)."""
    from ingest.settings import load_settings

    return load_settings()


def _stack_tests_use_spark(session) -> bool:
    return any("spark" in item.fixturenames and "integration" in Path(str(item.path)).parts for item in session.items)


@pytest.fixture(scope="session")
def spark(request):
    """The test process's one SparkSession (a JVM holds one SparkContext, so unit and integration tests share it).
    Pointed at the local stack when the run includes integration tests that use Spark; Spark-only otherwise, so the
    unit tier's transform tests need no broker or S3."""
    from ingest.settings import Settings
    from ingest.spark import build_spark

    on_stack = _stack_tests_use_spark(request.session)
    settings = request.getfixturevalue("settings") if on_stack else Settings(spark_master="local[1]")
    session = build_spark(settings, "lakeline-tests", extra={"spark.driver.memory": "3g"} if on_stack else
                          {"spark.sql.shuffle.partitions": "1"})
    yield session
    session.stop()
