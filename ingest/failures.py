"""Which component a failed streaming query could not reach, from the Java exception classes in Spark's error
(the query's exception crosses py4j as text; the class names in it are the types). Pure: `describe`.

A stream that stops because S3, the catalog or the broker went away stops with one line naming the component and
the fix, instead of a stack trace; restarting it resumes exactly (the tables' commit records decide).
"""

from __future__ import annotations

import re

# (component, Java exception classes that mean it; the first found in the text wins)
COMPONENTS = (
    ("the Iceberg catalog", ("org.sqlite.SQLiteException", "org.apache.iceberg.jdbc.UncheckedSQLException",
                             "org.apache.iceberg.exceptions.ServiceUnavailableException",
                             "org.apache.iceberg.exceptions.RESTException")),
    ("Kafka", ("org.apache.kafka.common.errors.UnknownTopicOrPartitionException",
               "org.apache.kafka.common.errors.TimeoutException",
               "org.apache.kafka.common.errors.SaslAuthenticationException",
               "org.apache.kafka.common.errors.SslAuthenticationException")),
    ("S3", ("org.apache.hadoop.fs.s3a.AWSClientIOException", "org.apache.hadoop.fs.s3a.AWSServiceThrottledException",
            "org.apache.hadoop.fs.s3a.AWSStatus500Exception", "org.apache.hadoop.fs.s3a.AWSBadRequestException",
            "software.amazon.awssdk.core.exception.SdkClientException")),
)

# Spark's error when another query wrote the same batch id to the checkpoint's offset log first.
CONCURRENT_CHECKPOINT_WRITE = "CONCURRENT_STREAM_LOG_UPDATE"


def component_of(text: str) -> tuple[str, str] | None:
    """(component, the first message of its exception) for a query failure's text; None when no class of
    `COMPONENTS` is in it."""
    found = []
    for component, classes in COMPONENTS:
        for name in classes:
            at = text.rfind(name)  # its innermost mention: Spark's header line repeats the cause
            if at >= 0:
                found.append((at, component, name))
    if not found:
        return None
    # The innermost cause is the most specific: the last listed class in the text (Caused by: chains go inward).
    at, component, name = max(found)
    line = text[at:].splitlines()[0]
    message = re.sub(r"\s+", " ", line[len(name):].lstrip(": ")).strip()
    return component, message[:300] or name.rsplit(".", 1)[-1]


def describe(pipeline: str, text: str) -> str:
    """The one-line reason a pipeline's query stopped: the component and its error when known, else the first line
    of Spark's message."""
    if CONCURRENT_CHECKPOINT_WRITE in text:
        return (f"pipeline {pipeline} stopped: another query wrote the next batch to its checkpoint first "
                f"({CONCURRENT_CHECKPOINT_WRITE}: a driver that had lost the pipeline and resumed, or a second query "
                f"on the same checkpoint); start it again: it replays that batch exactly, and the tables refuse "
                f"commits from a driver that lost its lease")
    found = component_of(text)
    if found is None:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "unknown error")
        return f"pipeline {pipeline} failed: {first[:500]}"
    component, message = found
    return (f"pipeline {pipeline} stopped: {component} failed ({message}); start it again once {component} is "
            f"back: it resumes exactly where the tables end")
