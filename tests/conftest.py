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


def _unit_tier_only(config) -> bool:
    """Plain `pytest` (no paths, no -m) runs the unit tier only: the rest needs the local stack and takes minutes.
    `pytest tests`, `pytest -m ...` and infra/test.sh (CI) run what they name."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr


def pytest_ignore_collect(collection_path, config):
    if _unit_tier_only(config) and collection_path == REPO / "tests" / "integration":
        return True
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _unit_tier_only(config):
        terminalreporter.write_line("[test] unit tier only (tests/unit); the integration tier needs the local stack: "
                                    "`bash infra/test.sh` (what CI runs) or `pytest tests`")


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


def _kinesis_like_split(self, shard_to_split, new_starting_hash_key):
    from moto.kinesis import models

    split_at = int(new_starting_hash_key)
    parent = self.shards[shard_to_split]
    last_id = max(s._shard_id for s in self.shards.values())
    for i, (lo, hi) in enumerate(((parent.starting_hash, split_at), (split_at, parent.ending_hash))):
        child = models.Shard(last_id + 1 + i, starting_hash=lo, ending_hash=hi, parent=parent.shard_id)
        self.shards[child.shard_id] = child
    parent.is_open = False


def _open_shard_for_key(self, partition_key, explicit_hash_key):
    import hashlib

    key = int(explicit_hash_key) if explicit_hash_key else int(hashlib.md5(partition_key.encode()).hexdigest(), 16)
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key < shard.ending_hash:
            return shard
    for shard in self.shards.values():  # moto's ending_hash is exclusive; the top key belongs to the last shard
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


@pytest.fixture(scope="module")
def moto_kinesis():
    """An in-process moto Kinesis server of the test module's own (about 1 s to start), its connection options
    as the Kinesis adapter takes them. moto 5.2.5 does not split a shard the way Kinesis does (new records keep
    going to the closed parent, the children stay empty); here the parent keeps its records and takes no new
    ones, and new records go to the open children."""
    from moto.kinesis import models
    from moto.server import ThreadedMotoServer

    from infra.procs import free_port

    port = free_port()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(models.Stream, "split_shard", _kinesis_like_split)
        mp.setattr(models.Stream, "get_shard_for_key", _open_shard_for_key)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield {"endpoint": f"http://127.0.0.1:{port}", "region": "us-east-1",
                   "access_key_id": "testing", "secret_access_key": "testing"}
        finally:
            server.stop()
