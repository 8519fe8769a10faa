"""Before a pipeline's first run, every reading command answers in one line naming the table and the start that
creates it (exit 1), or, for freshness, judges the waiting records stale with "no commit yet" (exit 4), without
starting Spark (ingest.spark.build_spark fails the test if called). On both formats, against the session's stack
with 10 records produced: measured 4.8 s (Delta) and 6.0 s (Iceberg) once the stack is up, most of it the one
real `lakeline` process per format (the other commands run in this process, 0.03-1.1 s each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ingest.config import load_pipeline
from ingest.errors import ExitCode
from ingest.produce import produce
from lakeline.cli import main
from tests.helpers import pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _no_spark(*_args, **_kwargs):
    raise AssertionError("a reading command started Spark for a table that does not exist")


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_reading_commands_before_the_first_run_answer_in_one_line_without_spark(fmt, conf_dir, settings,
                                                                                monkeypatch, capsys):
    (conf_dir / "pipelines").mkdir()
    (conf_dir / "tables").mkdir()
    path = write_pipeline(conf_dir / "pipelines", pipeline_dict(fmt))
    config = load_pipeline(path)
    policy = yaml.safe_load((REPO / "conf" / "tables" / f"orders_{fmt}.yaml").read_text())
    (conf_dir / "tables" / f"{config.pipeline}.yaml").write_text(yaml.safe_dump(
        {**policy, "table": config.pipeline, "pipeline": f"../pipelines/{path.name}"}))
    produce(config, settings, 10, partitions=1)
    monkeypatch.setattr("ingest.spark.build_spark", _no_spark)
    # In this process a command's log handler would outlive the test's captured stderr; the real process below
    # logs as a command does.
    monkeypatch.setattr("lakeline.logs.configure", lambda **_: None)
    monkeypatch.chdir(conf_dir.parent)

    commands = {
        "dead-letters show": ["dead-letters", "show", "--pipeline", str(path)],
        "dead-letters replay": ["dead-letters", "replay", "--pipeline", str(path)],
        "reconcile": ["reconcile", "--pipeline", str(path)],
        "health": ["health", "--table", config.pipeline, "--conf-dir", str(conf_dir)],
        "compact": ["compact", "--table", config.pipeline, "--conf-dir", str(conf_dir), "--dry-run"],
    }
    ref = config.delta_location(settings) if fmt == "delta" else config.iceberg_identifier(settings)
    seconds = {}
    for name, argv in commands.items():
        started = time.monotonic()
        assert main(argv) == ExitCode.FAILED, name
        seconds[name] = time.monotonic() - started
        out, err = capsys.readouterr()
        assert out == "", name
        assert err.count("\n") == 1 and err.startswith("lakeline: error: the "), (name, err)
        assert f"{fmt.capitalize()} table {ref} does not exist yet: the pipeline {config.pipeline} has not run" \
            in err, (name, err)
        assert "`lakeline ingest --pipeline " in err and path.name in err, (name, err)

    assert main(["freshness", "--pipeline", str(path), "--output", "json"]) == ExitCode.STALE
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["ok"], report["table_exists"], report["last_commit_at"], report["lag_records"]) == \
        (False, False, None, 10)
    assert "10 records waiting and no commit yet (the table does not exist" in report["problems"][0]
    assert "Traceback" not in err
    print(f"[cost] {fmt}: " + ", ".join(f"{name} {s:.2f}s" for name, s in seconds.items()))

    # The same in a real process: its whole stderr is the one line (no traceback, no Spark log).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lakeline", "dead-letters", "show", "--pipeline", str(path)],
                          capture_output=True, text=True, env=env, timeout=120)
    print(f"[cost] {fmt}: `lakeline dead-letters show` process {time.monotonic() - started:.2f}s")
    assert done.returncode == ExitCode.FAILED and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"lakeline: error: the {fmt.capitalize()} table {ref} does not exist yet: the pipeline {config.pipeline} "
        f"has not run (its first start creates it: `lakeline ingest --pipeline {path}`)"]
