"""The Iceberg manifest merger's hand-over rule, limit and cadence (the JVM side is a callable here;
tests/integration/test_sinks.py runs it against a real table)."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError

from ingest.errors import ConfigError
from ingest.formats.iceberg_manifests import MAX_MANIFESTS_KEY, ManifestMerger, check_every, max_manifests


@pytest.mark.parametrize("properties, expected", [
    ({}, None),                                  # an earlier release's table, or one made elsewhere: Iceberg merges
    ({MAX_MANIFESTS_KEY: "100"}, 100), ({MAX_MANIFESTS_KEY: "2"}, 2),
])
def test_the_pipeline_merges_only_where_the_table_sets_its_max_manifest_count(properties, expected):
    assert max_manifests(properties) == expected


@pytest.mark.parametrize("value", ["1", "0", "-3", "many", ""])
def test_a_bad_max_manifest_count_names_the_property_and_the_fix(value):
    with pytest.raises(ConfigError, match=f"{MAX_MANIFESTS_KEY} is '{value}'.*ALTER TABLE .* SET TBLPROPERTIES"):
        max_manifests({MAX_MANIFESTS_KEY: value})


@pytest.mark.parametrize("limit, every", [(100, 50), (10, 5), (3, 1), (2, 1)])
def test_the_count_is_looked_at_every_half_limit_so_a_table_holds_at_most_one_and_a_half_times_it(limit, every):
    assert check_every(limit) == every


def test_the_merger_counts_what_it_replaced_and_retries_a_failed_merge_at_the_next_cadence(caplog):
    outcomes = iter([0, Py4JError("S3 unreachable"), 120])

    def merge() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    merger = ManifestMerger("orders", merge, every=3)
    for _ in range(7):  # runs after commits 1, 4 and 7
        merger.committed()
        merger.wait(10)
    assert merger.failures == 1 and merger.replaced == 120 and len(merger.done) == 2
    assert "orders: manifest merge failed (Py4JError: S3 unreachable); retried after 3 more commits" in caplog.text

