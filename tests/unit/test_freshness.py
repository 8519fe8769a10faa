from datetime import datetime, timedelta, UTC

import pytest

from ingest.config import PipelineConfig, parse_duration
from maintenance.freshness import evaluate, kinesis_lag, source_lag
from tests.helpers import pipeline_dict

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
T = "orders"


def config(**freshness) -> PipelineConfig:
    return PipelineConfig.model_validate({**pipeline_dict("delta"), "freshness": freshness})


def test_source_lag_counts_waiting_records_and_unseen_partitions():
    assert source_lag({(T, 0): 90, (T, 1): 50}, {(T, 0): (0, 100), (T, 1): (0, 50), (T, 2): (10, 15)}) == 10 + 0 + 5
    assert source_lag({(T, 0): 5}, {(T, 0): (20, 30)}) == 10  # retention moved past the table's end


def test_idle_source_is_fresh_however_old_the_last_commit():
    report = evaluate(config(max_staleness="5m"), NOW - timedelta(days=3), 0, NOW)
    assert report.ok and report.staleness_seconds == 3 * 86400


def test_waiting_records_and_an_old_commit_are_stale():
    report = evaluate(config(max_staleness="5m"), NOW - timedelta(minutes=6), 1200, NOW)
    assert not report.ok and "1,200 records waiting" in report.problems[0] and "limit 5m" in report.problems[0]
    assert evaluate(config(max_staleness="5m"), NOW - timedelta(minutes=4), 1200, NOW).ok


def test_lag_limit_and_never_committed():
    report = evaluate(config(max_staleness="1h", max_lag_records=1000), NOW - timedelta(minutes=1), 1001, NOW)
    assert not report.ok and "max_lag_records" in report.problems[0]
    never = evaluate(config(), None, 5, NOW)
    assert not never.ok and "no commit yet" in never.problems[0]


def test_duration_parsing_and_bad_sla_names_the_key():
    assert parse_duration("90s").total_seconds() == 90 and parse_duration("2h").total_seconds() == 7200 \
        and parse_duration("7d").total_seconds() == 604800
    with pytest.raises(ValueError, match="max_staleness"):
        config(max_staleness="soon")


def _kinesis_pages(records_after):
    """Fake shard reader: records_after[shard] is a list of sequence numbers; pages of 2 after the position."""
    calls = []

    def pages(shard_id, position, budget):
        calls.append((shard_id, position))
        seqs = records_after.get(shard_id, [])
        if position.startswith("AFTER:"):
            seqs = [s for s in seqs if s > int(position[len("AFTER:"):])]
        elif position.startswith("AT_TIMESTAMP:"):
            seqs = seqs[-1:]
        for i in range(0, len(seqs), 2):
            yield seqs[i:i + 2]

    return pages, calls


def test_kinesis_lag_counts_records_behind_the_table_end_and_unseen_shards():
    from ingest.kinesis_offsets import ShardInfo

    shards = [ShardInfo("s0", ending_sequence="30"), ShardInfo("s1"), ShardInfo("s2", parent="s0"),
              ShardInfo("s3")]
    pages, calls = _kinesis_pages({"s0": [10, 20, 30], "s1": [5, 6, 7, 8, 9], "s2": [40, 41], "s3": [1, 2, 3]})
    end = {("st", "s0"): 31, ("st", "s1"): 7}  # s0 read to its end; s1 up to sequence 6
    assert kinesis_lag("st", shards, end, "TRIM_HORIZON", pages) == (0 + 3 + 2 + 3, True)
    assert ("s1", "AFTER:6") in calls and ("s2", "TRIM_HORIZON") in calls
    # LATEST: a shard present at the start and never committed holds nothing to wait for; a child still counts.
    pages, _ = _kinesis_pages({"s1": [5, 6, 7, 8, 9], "s2": [40, 41], "s3": [1, 2, 3]})
    assert kinesis_lag("st", shards, end, "LATEST", pages) == (3 + 2, True)


def test_kinesis_lag_stops_at_the_scan_limit_and_says_at_least():
    from ingest.kinesis_offsets import ShardInfo

    pages, _ = _kinesis_pages({"s1": list(range(1, 11))})
    lag, exact = kinesis_lag("st", [ShardInfo("s1")], {}, "TRIM_HORIZON", pages, limit=4)
    assert (lag, exact) == (4, False)
    report = evaluate(config(max_staleness="1h", max_lag_records=3), NOW - timedelta(minutes=1), lag, NOW,
                      lag_exact=exact)
    assert not report.ok and "at least 4 records" in report.problems[0] and not report.lag_exact
