"""A failed query's error text becomes one line naming the component (ingest.failures)."""

from __future__ import annotations

from ingest.failures import component_of, describe

CATALOG_LOCKED = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: \
org.apache.iceberg.jdbc.UncheckedSQLException: Failed to get table tests.t_dead_letters from catalog lakeline
\tat org.apache.iceberg.jdbc.JdbcTableOperations.doRefresh(JdbcTableOperations.java:80)
Caused by: org.sqlite.SQLiteException: [SQLITE_BUSY] The database file is locked (database is locked)
\tat org.sqlite.core.DB.newSQLException(DB.java:1179)"""

TOPIC_GONE = """[STREAM_FAILED] Query terminated with exception: \
org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host this topic-partition."""

S3_DOWN = """py4j error: org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on s3a://lakeline/x: \
software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to 127.0.0.1:9 \
failed: Connection refused"""


def test_the_innermost_known_cause_names_the_component():
    assert component_of(CATALOG_LOCKED) == ("the Iceberg catalog",
                                            "[SQLITE_BUSY] The database file is locked (database is locked)")
    assert component_of(TOPIC_GONE)[0] == "Kafka"
    component, message = component_of(S3_DOWN)
    assert component == "S3" and message.startswith("Unable to execute HTTP request")


def test_the_line_says_what_to_do_and_an_unknown_failure_keeps_its_first_line():
    line = describe("orders", CATALOG_LOCKED)
    assert line.startswith("pipeline orders stopped: the Iceberg catalog failed ([SQLITE_BUSY]")
    assert "resumes exactly" in line and "\n" not in line
    assert describe("orders", "java.lang.IllegalStateException: boom\n\tat x") == (
        "pipeline orders failed: java.lang.IllegalStateException: boom")


def test_a_checkpoint_written_first_by_another_query_says_to_start_again():
    text = ("org.apache.spark.SparkException: [CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple "
            "streaming jobs detected for 4.\nPlease make sure only one streaming job runs on a specific checkpoint "
            "location at a time. SQLSTATE: 40000")
    line = describe("orders", text)
    assert line.startswith("pipeline orders stopped: another query wrote the next batch to its checkpoint first")
    assert "start it again: it replays that batch exactly" in line
