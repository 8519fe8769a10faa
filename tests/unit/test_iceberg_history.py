"""The Iceberg snapshot expirer's cadence, failure handling and hand-over rule (the JVM side is a callable here;
tests/integration/test_sinks.py runs it against a real table)."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError

from ingest.errors import ConfigError
from ingest.formats.iceberg_history import (MAX_SNAPSHOT_AGE_KEY, MAX_SNAPSHOTS_KEY, MIN_SNAPSHOTS_KEY,
                                            SnapshotExpirer, expiry_cutoff_ms, history_limits, takes_over)


def test_first_commit_of_a_process_and_then_every_nth_expires():
    runs = []
    expirer = SnapshotExpirer("t", lambda: runs.append(1) or 5, every=4)
    for _ in range(10):
        expirer.committed()
        expirer.wait(10)
    assert len(runs) == 3  # commits 1, 5 and 9
    assert expirer.expired == 15 and expirer.failures == 0


def test_a_failed_expiry_is_logged_and_retried_at_the_next_cadence(caplog):
    outcomes = iter([Py4JError("catalog unreachable"), 2])

    def expire() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    expirer = SnapshotExpirer("orders", expire, every=2)
    expirer.committed()
    expirer.wait(10)
    assert expirer.failures == 1 and expirer.expired == 0
    said = "orders: snapshot expiry failed (Py4JError: catalog unreachable); retried after 2 more commits"
    assert said in caplog.text
    for _ in range(2):
        expirer.committed()
        expirer.wait(10)
    assert expirer.expired == 2


def test_an_error_that_is_not_a_store_or_jvm_failure_is_not_swallowed():
    def expire() -> int:
        raise ValueError("a bug")

    expirer = SnapshotExpirer("t", expire, every=1)
    with pytest.raises(ValueError, match="a bug"):
        expirer._run()  # noqa: SLF001 - on the thread this surfaces through threading's excepthook


@pytest.mark.parametrize("value, expected", [
    (None, False),        # Iceberg's 5-day default: nobody chose it for a stream; left to `lakeline retain`
    ("21600000", True), ("1000", True),
    ("0", False), ("-5", False), ("six hours", False),
])
def test_the_pipeline_expires_only_tables_that_set_their_max_snapshot_age(value, expected):
    assert takes_over(value) is expected


def test_the_cutoff_is_the_later_of_the_max_age_and_the_max_count():
    now = 10_000_000
    assert expiry_cutoff_ms(now, 3_600_000, None) == now - 3_600_000  # fewer snapshots than the cap: age only
    assert expiry_cutoff_ms(now, 3_600_000, now - 60_000) == now - 60_000  # many recent ones: the count decides
    assert expiry_cutoff_ms(now, 1_000, now - 60_000) == now - 1_000  # a short age expires more than the count


def test_history_limits_read_from_the_table_properties_and_bad_values_name_the_property():
    assert history_limits({MAX_SNAPSHOT_AGE_KEY: "21600000", MIN_SNAPSHOTS_KEY: "100", MAX_SNAPSHOTS_KEY: "2000"}
                          ) == (21_600_000, 100, 2000)
    assert history_limits({MAX_SNAPSHOT_AGE_KEY: "1000"}) == (1000, 1, 0)  # Iceberg's keep-1 default, no cap
    for bad in ({MAX_SNAPSHOT_AGE_KEY: "6h"}, {MAX_SNAPSHOT_AGE_KEY: "1000", MAX_SNAPSHOTS_KEY: "-1"},
                {MAX_SNAPSHOT_AGE_KEY: "1000", MIN_SNAPSHOTS_KEY: "0"}):
        key = next(k for k, v in bad.items() if v in ("6h", "-1", "0"))
        with pytest.raises(ConfigError, match=f"table property {key} is"):
            history_limits(bad)
