"""Where the repo keeps its ignored runtime state (.lakeline/)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    """Root of ignored runtime state; LAKELINE_STATE_DIR overrides (tests use tmp dirs)."""
    return Path(os.environ.get("LAKELINE_STATE_DIR", REPO_ROOT / ".lakeline")).resolve()


def jars_dir(kind: str) -> Path:
    """Resolved jars for `kind` ('spark' or 'kafka'); shared across stacks, so not under a per-stack dir."""
    override = os.environ.get(f"LAKELINE_{kind.upper()}_JARS_DIR")
    if override:
        return Path(override).resolve()
    return REPO_ROOT / ".lakeline" / "jars" / kind


def jvm_dir() -> Path:
    """The JVM class-data archives Spark drivers start from (ingest.spark.class_archive); shared like the jars."""
    override = os.environ.get("LAKELINE_JVM_DIR")
    return Path(override).resolve() if override else REPO_ROOT / ".lakeline" / "jvm"


def executor_archive() -> Path:
    """The packed Python packages Spark executors run Lakeline's code with (infra.executor_env); shared like the
    jars. The file need not exist."""
    override = os.environ.get("LAKELINE_EXECUTOR_ENV_DIR")
    return (Path(override).resolve() if override else REPO_ROOT / ".lakeline" / "executor-env") / "lakeline-env.tar.gz"
