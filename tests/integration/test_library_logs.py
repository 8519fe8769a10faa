"""Library logging as the driver JVM is configured (no stack, no Spark session): a commit conflict that Iceberg's
task runner retries is one log line under Lakeline's log4j2 layers, and so is a compaction commit that lost (the
caller retries it); S3A's lines about a lost conditional PUT (a transfer failure, then the stream's statistics)
are not printed, and other warnings still are; everything again with LAKELINE_LIBRARY_LOGS=all. Runs Iceberg's
real `Tasks` retry loop in a plain JVM (java/RetryOnce.java, the JDK's single-file launcher) with the log4j2
options `spark_conf` gives the driver. Measured 5-10 s (two JVMs)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pyspark
import pytest

from ingest.settings import Settings
from ingest.spark import spark_conf, spark_jars

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).with_name("java") / "RetryOnce.java"


def _retry_once(library_logs: str) -> subprocess.CompletedProcess:
    settings = Settings(library_logs=library_logs)
    options = shlex.split(spark_conf(settings, "t")["spark.driver.extraJavaOptions"])
    logging_options = [o for o in options if o.startswith("-Dlog4j2.configurationFile=")]
    spark_lib = Path(pyspark.__file__).parent / "jars"
    classpath = [str(p) for p in sorted(spark_lib.glob("*.jar")) if p.name.startswith(("log4j-", "slf4j-api"))]
    classpath += [j for j in spark_jars(settings) if "iceberg-spark-runtime" in j]
    return subprocess.run(["java", "-cp", ":".join(classpath), *logging_options, str(SOURCE)], capture_output=True,
                          text=True, timeout=120)


def test_a_retried_commit_conflict_is_one_line_unless_library_logs_are_asked_for():
    quiet = _retry_once("quiet")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "committed after 2 attempts", quiet.stderr
    [retried, lost, other] = quiet.stderr.splitlines()
    assert "WARN Tasks: Retrying task after failure" in retried and "Cannot commit t: stale metadata" in retried
    assert "ERROR RewriteDataFilesCommitManager: Cannot commit groups" in lost
    assert other.endswith("WARN ProcessingTimeExecutor: Current batch is falling behind.")

    everything = _retry_once("all")
    assert everything.returncode == 0, everything.stderr
    lines = everything.stderr.splitlines()
    assert any("Retrying task after failure" in line for line in lines)
    assert "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit t: stale metadata" in lines
    assert any(line.startswith("\tat org.apache.iceberg.util.Tasks") for line in lines)
    assert "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit t: metadata location has changed" \
        in lines
    assert any("S3ABlockOutputStream: Transfer failure" in line for line in lines)
    assert any("S3AInstrumentation: Closing output stream statistics" in line for line in lines)
