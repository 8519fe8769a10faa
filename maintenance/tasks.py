"""What the Airflow tasks run, importable and testable without Airflow.

Each step is one `lakeline ... --output json` command in its own process, so Spark never runs inside the Airflow
worker. LAKELINE_TASK_LAUNCHER picks how: `local` (default: `python -m lakeline` beside the worker, Spark
master from LAKELINE_SPARK_MASTER, default local[2]) or `spark-submit` (LAKELINE_SPARK_SUBMIT, default
`spark-submit`, against --master LAKELINE_SPARK_MASTER, in client mode). Endpoints and secrets reach the command
through the environment (or LAKELINE_ENV_FILE), never through task arguments or logs.
"""

from __future__ import annotations

import hashlib
import logging
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ingest.errors import ConfigError, ExitCode, TaskFailed
from maintenance.policy import format_size

REPO_ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger(__name__)


@dataclass
class CommandResult:
    args: list[str]
    code: int
    output: dict | None     # the command's JSON report, when it printed one
    stderr_tail: str



def lakeline_command(args: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """The command line for `lakeline <args>` under the configured launcher: this process's settings, or those of
    exactly `environ` when given."""
    from ingest.settings import load_settings, settings_from

    settings = load_settings() if environ is None else settings_from(environ)
    if settings.task_launcher == "local":
        return [sys.executable, "-m", "lakeline", *args]
    if "spark_master" not in settings.model_fields_set:  # the local[2] default means nothing to spark-submit
        raise ConfigError("LAKELINE_TASK_LAUNCHER=spark-submit needs LAKELINE_SPARK_MASTER (e.g. "
                          "spark://host:7077 or yarn)")
    # spark-submit starts the driver's JVM: the connector jars must be on its classpath from the start (a
    # SparkSession's spark.jars would come too late for Hadoop's FileSystem lookup of S3A).
    from ingest.spark import driver_logging, spark_jars

    jars = spark_jars(load_settings())
    # Likewise its logging: a session's spark.driver.extraJavaOptions would come after log4j has started.
    return [settings.spark_submit, "--master", settings.spark_master, "--deploy-mode", "client",
            "--driver-class-path", os.pathsep.join(jars), "--driver-java-options",
            driver_logging(settings, f"lakeline-{args[0]}" if args else "lakeline"),
            str(REPO_ROOT / "lakeline" / "__main__.py"), *args]


def run_lakeline(args: list[str], timeout: float | None = None,
                 allowed_codes: tuple[int, ...] = (0,), nice: int | None = None) -> CommandResult:
    """Run `lakeline <args>` at niceness `nice` (default `maintenance_nice`), pass its log lines on to this
    process's log (the task log, under a scheduler), and parse the JSON it prints on stdout.
    Raises TaskFailed for an exit code outside `allowed_codes`."""
    command = lakeline_command(args)
    from ingest.settings import child_env, load_settings
    from maintenance.yielding import yielding_child

    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    nice = load_settings().maintenance_nice if nice is None else nice
    # Every task is maintenance beside the streams: the command starts at a lower priority, whichever process
    # (python, or spark-submit's JVM) comes first, in a session of its own (maintenance.yielding.yielding_child).
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=REPO_ROOT, preexec_fn=yielding_child(nice) if nice else None)
    tail: list[str] = []

    def pump() -> None:
        for line in process.stderr:
            line = line.rstrip()
            if line and not line.startswith(("WARNING: Using incubator", "SLF4J:")):
                log.info(line)
                tail.append(line)
                del tail[:-40]

    chunks: list[str] = []
    readers = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: chunks.append(process.stdout.read()), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
        raise TaskFailed(f"`lakeline {' '.join(args)}` did not finish within {timeout:.0f}s") from None
    except BaseException:  # the task stopped (Airflow's SIGTERM): its command, in a session of its own, with it
        process.terminate()
        raise
    for reader in readers:
        reader.join(30)
    stdout = "".join(chunks)
    output = _json_document(stdout)
    for line in stdout.splitlines() if output is None else []:
        log.info(line)
    result = CommandResult(args, process.returncode, output, "\n".join(tail))
    if process.returncode not in allowed_codes:
        raise TaskFailed(f"`lakeline {' '.join(args)}` exited {process.returncode}:\n{result.stderr_tail[-3000:]}")
    return result


def _json_document(stdout: str) -> dict | None:
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(stdout[start:])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def run_as_of(context) -> datetime:
    """The moment a scheduler run stands for: its data interval end, or (manual runs without one) when it was due
    to run; never later than the present (a manual run given a future logical date must not judge the future)."""
    moment = _resolved(context.get("data_interval_end")) or context["dag_run"].run_after
    return min(moment, datetime.now(UTC))


def _resolved(value):
    """Airflow hands some context values as lazy proxies; this is the value behind one (or the value itself)."""
    return getattr(value, "__wrapped__", value)


def run_interval(context) -> tuple[str, str] | None:
    """The run's data interval as `lakeline compact --interval` arguments (its end capped like `run_as_of`), or
    None when the run has none (a zero-length interval)."""
    start, end = _resolved(context.get("data_interval_start")), _resolved(context.get("data_interval_end"))
    if start is None or end is None:
        return None
    end = min(end, datetime.now(UTC))
    return (start.isoformat(), end.isoformat()) if start < end else None


# ---- the steps the DAGs wire together ------------------------------------------------------------------------
def backup_checkpoint(pipeline: str) -> dict:
    return run_lakeline(["checkpoint", "backup", "--pipeline", pipeline, "--output", "json"]).output


def verify_backup(pipeline: str, backup_id: str) -> dict:
    result = run_lakeline(["checkpoint", "verify", "--pipeline", pipeline, "--backup", backup_id, "--output",
                           "json"], allowed_codes=(ExitCode.OK, ExitCode.CHECKPOINT_DAMAGED))
    if result.code != ExitCode.OK:
        raise TaskFailed(f"backup {backup_id} failed verification: {result.output}")
    return result.output


def drill_run_id(scheduler_run_id: str) -> str:
    """A stable drill run id for a scheduler run (the same on every retry of that run)."""
    return "af" + hashlib.sha1(scheduler_run_id.encode()).hexdigest()[:12]


def drill_cleanup(pipeline: str, run_id: str) -> dict:
    return run_lakeline(["drill", "--pipeline", pipeline, "--run-id", run_id, "--cleanup", "--output",
                         "json"]).output


def drill(pipeline: str, run_id: str, scenario: str = "all", events: int = 3000) -> CommandResult:
    """Run the drill; the result's code is ExitCode.DRILL_FAILED (with the report) when a scenario failed."""
    return run_lakeline(["drill", "--pipeline", pipeline, "--run-id", run_id, "--scenario", scenario, "--events",
                         str(events), "--keep", "--output", "json"],
                        allowed_codes=(ExitCode.OK, ExitCode.DRILL_FAILED))


def freshness(pipeline: str, as_of: datetime) -> CommandResult:
    if as_of.tzinfo is None:
        raise ConfigError("freshness: as_of needs a time zone")
    return run_lakeline(["freshness", "--pipeline", pipeline, "--as-of", as_of.isoformat(), "--output", "json"],
                        allowed_codes=(ExitCode.OK, ExitCode.STALE))


def health_line(health: dict) -> str:
    """The table as the decide task measured it (the `health` of `lakeline compact --output json`), in one line."""
    if not health:
        return "health: not measured"
    since = health.get("seconds_since_last_compaction")
    return (f"health: {health.get('files', 0)} files in {len(health.get('partitions', []))} partition(s), "
            f"{health.get('small_files', 0)} small, {format_size(health.get('bytes', 0))}; "
            f"{health.get('versions', 0)} versions, metadata {format_size(health.get('metadata_bytes', 0))}; "
            f"last compaction {'never' if since is None else f'{since / 60:.0f} min ago'}")


def compact(table: str, conf_dir: str | Path, as_of: str, dry_run: bool,
            interval: tuple[str, str] | None = None) -> dict:
    return run_lakeline(["compact", "--table", table, "--conf-dir", str(conf_dir), "--now", as_of, "--output",
                         "json", *(["--interval", *interval] if interval else []),
                         *(["--dry-run"] if dry_run else [])]).output


def bound(table: str, conf_dir: str | Path, as_of: str) -> dict:
    """The hot partitions over the policy's bound, rewritten without Spark (`lakeline compact --bound-only`), at the
    bound's niceness: ahead of a Spark compaction beside it, behind the stream."""
    from ingest.settings import load_settings
    from maintenance.yielding import bound_nice

    return run_lakeline(["compact", "--table", table, "--conf-dir", str(conf_dir), "--now", as_of, "--bound-only",
                         "--output", "json"], nice=bound_nice(load_settings())).output


def retain(table: str, conf_dir: str | Path, as_of: str) -> dict:
    """Scheduled retention deletes (within the table file's guards); `lakeline retain` alone is a dry run."""
    return run_lakeline(["retain", "--table", table, "--conf-dir", str(conf_dir), "--now", as_of, "--delete",
                         "--output", "json"]).output
