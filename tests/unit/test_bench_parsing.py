"""The latency benchmark's reading of Lakeline's per-batch log lines (Lakeline phases and Spark's phases)."""

from bench.latency import _lakeline_batch_times

LOG = """\
[p] start: fresh
[p] batch 0: rows=1 dead_letters=0 input=1 took=9.00s (scan 1.00, table 2.00) lag=0 spark(trigger 12.00: offsets 0.10, wal 0.30, plan 0.00, batch 9.10, commit 0.20)
[p] batch 1: rows=1 dead_letters=0 input=1 took=2.00s (scan 1.00, table 1.00) lag=0 spark(trigger 3.00: offsets 0.10, wal 0.30, plan 0.00, batch 2.10, commit 0.20)
[p] batch 2: rows=1 dead_letters=1 input=2 took=4.00s (scan 1.00, dlq 1.00, table 2.00) lag=0 spark(trigger 5.00: offsets 0.20, wal 0.50, plan 0.00, batch 4.10, commit 0.40)
"""  # noqa: E501


def test_medians_skip_batch_0_and_cover_both_breakdowns():
    times = _lakeline_batch_times(LOG)
    assert times["batch_took_median_s"] == 3.0  # batches 1 and 2; batch 0 (JVM warm-up) is left out
    assert times["batch_table_median_s"] == 1.5
    assert times["batch_dlq_median_s"] == 1.0  # only batches that had one
    assert times["batch_spark_trigger_median_s"] == 4.0
    assert times["batch_spark_wal_median_s"] == 0.4
    assert times["batch_spark_commit_median_s"] == 0.3


def test_lines_without_the_spark_part_still_parse():
    times = _lakeline_batch_times(LOG.replace(" spark(", " sp("))
    assert times["batch_took_median_s"] == 3.0
    assert not any(key.startswith("batch_spark_") for key in times)
