"""Unit tests never see the developer's, CI's or the local stack's endpoints and secrets: every LAKELINE_* and
AWS_* variable is removed for the test and the env file is an empty one. A test sets what it needs with
`monkeypatch.setenv`."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path_factory):
    for name in list(os.environ):
        if name.startswith(("LAKELINE_", "AWS_")) and name != "LAKELINE_STATE_DIR":
            monkeypatch.delenv(name)
    empty = tmp_path_factory.getbasetemp() / "empty.env"
    empty.touch()
    monkeypatch.setenv("LAKELINE_ENV_FILE", str(empty))


@pytest.fixture
def jars(tmp_path):
    """A jars folder holding the connector and runtime jar names Spark's configuration looks for (empty files)."""
    for name in ("delta-spark_4.1_2.13-4.4.0.jar", "iceberg-spark-runtime-4.1_2.13-1.11.0.jar",
                 "lakeline-spark-runtime.jar"):
        (tmp_path / name).write_bytes(b"")
    return tmp_path
