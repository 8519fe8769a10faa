"""The JVM class-data archive local Spark drivers start from (`lakeline dev class-archive`, run by infra/setup.sh).

A driver's JVM loads, verifies and links some 20,000 classes (Spark, Delta, Iceberg, Kafka, Parquet, S3A) before its
first batch lands. Java's application class-data sharing (AppCDS) maps them from one archive instead. The archive
is trained by the main job itself: `lakeline demo` with a few thousand events on a stack of its own (temporary
state folder, free loopback ports), whose driver writes the classes it loaded as its JVM exits. The archive is
named after the JVM and the classpath it was made with (ingest.spark.class_archive), so a changed jar or JDK gets
a new one, and a driver without a matching archive starts as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ingest.errors import LakelineError

TRAINING_EVENTS = 2_000
TRAINING_TIMEOUT = 900  # seconds for the training run (about a minute on 2 cores)
JVM_EXIT_TIMEOUT = 120  # seconds for its JVM to write the archive after the driver has ended


def build_class_archive(force: bool = False) -> tuple[Path, str]:
    """Make the class archive for this machine's JVM and jars unless it exists. Returns (path, what happened)."""
    from ingest.settings import child_env, load_settings
    from ingest.spark import archive_is_complete, class_archive, spark_jars

    settings = load_settings()
    archive = class_archive(spark_jars(settings))
    if settings.class_archive.lower() == "off":
        return archive, "not made: LAKELINE_CLASS_ARCHIVE=off"
    if archive_is_complete(archive) and not force:
        return archive, "up to date"
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lakeline-class-archive-") as work:
        log = Path(work) / "training.log"
        env = child_env(state_dir=work, class_archive_dump=str(partial))
        command = [sys.executable, "-m", "lakeline", "demo", "--count", str(TRAINING_EVENTS), "--down"]
        try:
            with open(log, "w") as out:
                training = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                code = training.wait(TRAINING_TIMEOUT)
            _wait_for_group_exit(training.pid)
            if code != 0 or not partial.is_file():
                tail = log.read_text(errors="replace")[-2000:]
                raise LakelineError(f"the training run (`{' '.join(command[1:])}`) ended with exit code {code} "
                                    f"and no archive; its output ended with:\n{tail}")
            _check(partial)
            os.replace(partial, archive)
            record = archive.with_suffix(".json.partial")
            record.write_text(json.dumps({"size": archive.stat().st_size, "events": TRAINING_EVENTS}))
            os.replace(record, archive.with_suffix(".json"))
        except subprocess.TimeoutExpired as exc:
            _kill_group(training.pid)
            raise LakelineError(f"the training run did not finish in {TRAINING_TIMEOUT} s") from exc
        finally:
            partial.unlink(missing_ok=True)
            _stop_training_stack(work)
    for stale in archive.parent.glob("spark-*"):
        if stale.stem != archive.stem:
            stale.unlink(missing_ok=True)  # an archive for jars or a JDK this checkout no longer has
    return archive, f"made in {time.monotonic() - started:.0f} s ({archive.stat().st_size / 1e6:.0f} MB)"


def _check(archive: Path) -> None:
    """Start a driver from the new archive, as every driver will, and see it mapped: an archive the JVM cannot use
    is never installed, and one that would crash it (Java 17 does not check its length) fails here, not later."""
    from ingest.settings import child_env

    env = child_env(class_archive=str(archive), spark_master="local[1]")
    checked = subprocess.run([sys.executable, "-m", "lakeline.class_archive", "--check", str(archive)], env=env,
                             capture_output=True, text=True, timeout=300)
    if checked.returncode != 0:
        raise LakelineError(f"a driver could not start from the new archive {archive}; it was not installed:\n"
                            f"{(checked.stdout + checked.stderr)[-2000:]}")


def _check_here(archive: Path) -> int:
    """The check's driver side (`python -m lakeline.class_archive --check PATH`): 0 when the JVM mapped it."""
    from ingest.settings import load_settings
    from ingest.spark import archive_is_mapped, build_spark

    spark = build_spark(load_settings(), "lakeline-class-archive-check")
    try:
        spark.range(10).selectExpr("sum(id)").collect()
        mapped = archive_is_mapped(spark, archive)
    finally:
        spark.stop()
    print(f"{archive}: {'mapped' if mapped else 'NOT mapped'} by the driver JVM")
    return 0 if mapped else 1


def _wait_for_group_exit(pgid: int) -> None:
    """The training driver's JVM writes the archive as it exits, after the Python driver itself has ended."""
    deadline = time.monotonic() + JVM_EXIT_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    _kill_group(pgid)
    raise LakelineError(f"the training run's JVM did not exit within {JVM_EXIT_TIMEOUT} s")


def _kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def _stop_training_stack(state_dir: str) -> None:
    """`demo --down` stops its stack; this covers a training run that failed before it got there."""
    from infra import stack

    if stack.read_info(Path(state_dir)) is not None:
        stack.down(Path(state_dir))


if __name__ == "__main__":
    if sys.argv[1:2] != ["--check"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m lakeline.class_archive --check ARCHIVE (use `lakeline dev class-archive`)")
    raise SystemExit(_check_here(Path(sys.argv[2]).resolve()))
