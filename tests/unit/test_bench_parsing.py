"""The latency benchmark's reading of Lakeline's per-batch run events (Lakeline phases and Spark's phases)."""

from bench.latency import _lakeline_batch_times
from ingest.events import BatchCommitted, Events, JsonLines, RunStarted, read_events


def _batch(batch_id: int, took: float, phases: dict, trigger: float, offsets: float, wal: float, commit: float,
           spark: bool = True) -> BatchCommitted:
    spark_phases = {"trigger": trigger, "offsets": offsets, "wal": wal, "plan": 0.0, "batch": took + 0.1,
                    "commit": commit} if spark else {}
    return BatchCommitted(pipeline="p", batch_id=batch_id, rows=1, dead_letters=0, input_rows=1, seconds=took,
                          phases=phases, lag=0, spark_phases=spark_phases)


def _events(spark: bool = True) -> list:
    return [RunStarted(pipeline="p", action="fresh", reason="", lineage="l", spark_seconds=1.0, read_seconds=1.0),
            _batch(0, 9.0, {"scan": 1.0, "table": 2.0}, 12.0, 0.1, 0.3, 0.2, spark),
            _batch(1, 2.0, {"scan": 1.0, "table": 1.0}, 3.0, 0.1, 0.3, 0.2, spark),
            _batch(2, 4.0, {"scan": 1.0, "dlq": 1.0, "table": 2.0}, 5.0, 0.2, 0.5, 0.4, spark)]


def test_medians_skip_batch_0_and_cover_both_breakdowns():
    times = _lakeline_batch_times(_events())
    assert times["batch_took_median_s"] == 3.0  # batches 1 and 2; batch 0 (JVM warm-up) is left out
    assert times["batch_table_median_s"] == 1.5
    assert times["batch_dlq_median_s"] == 1.0  # only batches that had one
    assert times["batch_spark_trigger_median_s"] == 4.0
    assert times["batch_spark_wal_median_s"] == 0.4
    assert times["batch_spark_commit_median_s"] == 0.3


def test_batches_without_spark_timings_still_count():
    times = _lakeline_batch_times(_events(spark=False))
    assert times["batch_took_median_s"] == 3.0
    assert not any(key.startswith("batch_spark_") for key in times)


def test_events_survive_the_json_lines_stream(tmp_path):
    """What `lakeline ingest --events FILE` writes reads back as the same typed events, in order."""
    path = tmp_path / "events.jsonl"
    written = _events()
    with open(path, "w") as stream:
        events = Events(JsonLines(stream))
        for event in written:
            events.emit(event)
    back = read_events(path.read_text() + "not an event: a stray line on a shared stdout\n")
    assert [e.to_json() for e in back] == [e.to_json() for e in written]
    assert [type(e) for e in back] == [RunStarted, BatchCommitted, BatchCommitted, BatchCommitted]
    assert _lakeline_batch_times(back) == _lakeline_batch_times(written)
