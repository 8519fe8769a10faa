"""A batch the query's stop interrupts reaches Spark as one line that Spark's own check reads as a stop."""

from __future__ import annotations

import traceback

import pytest
from py4j.protocol import Py4JJavaError

from ingest.batch import BatchInterrupted, interruptions_kept_short


def _interrupted_jvm_call(spark) -> None:
    """A real JVM call that fails with java.lang.InterruptedException (this Python thread's JVM thread)."""
    thread = spark._jvm.java.lang.Thread
    thread.currentThread().interrupt()
    thread.sleep(10)


def _spark_reads_as_a_stop(spark, message: str) -> bool:
    """StreamExecution.isInterruptionException's check of a Python foreachBatch error, on the JVM itself."""
    streaming = spark._jvm.org.apache.spark.sql.execution.streaming.runtime
    return streaming.StreamExecution.PROXY_ERROR().findFirstIn(message).isDefined()


def _as_py4j_sends_it(body, *args) -> str:
    """What py4j sends the JVM when a Python callback raises: the formatted traceback."""
    try:
        body(*args)
    except Exception:  # noqa: BLE001 - the text is the point
        return traceback.format_exc()
    raise AssertionError("the body did not raise")


def test_an_interrupted_batch_is_one_line_spark_reads_as_its_stop(spark):
    def process(batch, batch_id):
        _interrupted_jvm_call(spark)

    with pytest.raises(Py4JJavaError) as raw:
        process(None, 3)
    long = traceback.format_exception(raw.value)
    body = interruptions_kept_short(process)
    with pytest.raises(BatchInterrupted, match=r"batch 3\): java.lang.InterruptedException"):
        body(None, 3)
    sent = _as_py4j_sends_it(body, None, 3)
    # no chained traceback and no Java stack: the regex's per-character recursion stays shallow
    assert "During handling" not in sent and "\tat " not in sent
    assert len(sent) < 1000 < len("".join(long))
    assert _spark_reads_as_a_stop(spark, sent)


def test_any_other_failure_goes_through_as_it_is(spark):
    def process(batch, batch_id):
        spark._jvm.java.lang.Integer.parseInt("not a number")

    with pytest.raises(Exception, match="not a number") as failed:  # pyspark's own NumberFormatException
        interruptions_kept_short(process)(None, 1)
    assert not isinstance(failed.value, BatchInterrupted)

    def fails(batch, batch_id):
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        interruptions_kept_short(fails)(None, 1)
