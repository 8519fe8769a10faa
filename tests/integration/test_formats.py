"""The table-format seam against real tables: conflicts classified by exception type (never by message text), and
schema evolution's home (add_columns) on both formats. About 20 s (two tiny tables per format)."""

from __future__ import annotations

import uuid

import pytest
from py4j.protocol import Py4JJavaError

from ingest.config import PipelineConfig
from ingest.errors import CommitConflict, UnknownCommitOutcome
from ingest.formats import FORMAT_NAMES, format_for, tables_for
from tests.helpers import pipeline_dict

pytestmark = pytest.mark.integration


def _java_error(spark, throwable) -> Py4JJavaError:
    """A Python error carrying `throwable`, as py4j raises it for a failed JVM call."""
    return Py4JJavaError("An error occurred while calling o1.save.\n", throwable)


def test_iceberg_commit_failures_are_classified_by_their_java_type(spark):
    jvm, fmt = spark._jvm, format_for("iceberg")  # noqa: SLF001
    exceptions = jvm.org.apache.iceberg.exceptions
    failed = exceptions.CommitFailedException("lost the race", jvm.java.util.ArrayList().toArray())
    unknown = exceptions.CommitStateUnknownException(jvm.java.lang.RuntimeException("timeout"))
    wrapped = jvm.java.lang.RuntimeException("write failed", unknown)
    assert fmt.classify(_java_error(spark, failed)) is CommitConflict
    assert fmt.classify(_java_error(spark, wrapped)) is UnknownCommitOutcome  # found down the cause chain
    # The type decides, not the text: a message naming the exception is not the exception.
    impostor = jvm.java.lang.IllegalStateException("CommitFailedException: CommitStateUnknownException")
    assert fmt.classify(_java_error(spark, impostor)) is None
    assert fmt.classify(ValueError("CommitFailedException")) is None


def test_delta_commit_failures_are_classified_by_their_type(spark):
    from delta.exceptions import ConcurrentAppendException

    jvm, fmt = spark._jvm, format_for("delta")  # noqa: SLF001
    put_refused = jvm.java.nio.file.FileAlreadyExistsException("_delta_log/00000000000000000007.json")
    assert fmt.classify(_java_error(spark, put_refused)) is CommitConflict
    assert fmt.classify(ConcurrentAppendException("files were added by a concurrent update")) is CommitConflict
    impostor = jvm.java.lang.IllegalStateException("ConcurrentAppendException [DELTA_CONCURRENT_APPEND]")
    assert fmt.classify(_java_error(spark, impostor)) is None


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_add_columns_evolves_the_table_schema(fmt, spark, settings):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    config = PipelineConfig.model_validate(pipeline_dict(fmt, name=f"t_evolve_{fmt}_{uuid.uuid4().hex[:6]}"))
    main, _ = tables_for(spark, config, settings)
    main.ensure()
    before = main.table_schema().fieldNames()
    assert "coupon" not in before and "event_id" in before
    main.add_columns(StructType([StructField("coupon", StringType()), StructField("points", LongType())]))
    after = main.table_schema()
    assert after.fieldNames() == [*before, "coupon", "points"]
    assert after["coupon"].nullable and after["points"].dataType == LongType()
    assert main.read().count() == 0
