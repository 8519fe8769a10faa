from datetime import datetime, timedelta, UTC

import pytest

from ingest.config import PipelineConfig, parse_duration
from maintenance.freshness import evaluate, source_lag
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
    assert parse_duration("90s") == 90 and parse_duration("2h") == 7200 and parse_duration("7d") == 604800
    with pytest.raises(ValueError, match="max_staleness"):
        config(max_staleness="soon")
