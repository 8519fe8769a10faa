"""Kinesis source: offset planning, resharding order, retries (no Spark, no network)."""

from __future__ import annotations

import random

import pytest

from ingest.adapters.kinesis import KinesisClient
from ingest.errors import KinesisError
from ingest import kinesis_offsets as ko
from ingest.kinesis_offsets import ShardInfo

BIG = "49590338271490256608559692538361571095921575989136588898"  # a real-looking 56-digit sequence number


def test_positions_compare_numerically_beyond_64_bit():
    assert ko.compare(ko.after(BIG), ko.after(int(BIG) - 1)) == 1
    assert ko.compare(ko.after("9"), ko.after("10")) == -1  # not string order
    assert ko.compare(ko.TRIM_HORIZON, ko.after(0)) == -1
    assert ko.compare(ko.done(5), ko.after(5)) == 1
    assert ko.last_sequence(ko.done(None)) is None


def test_pad_sequence_sorts_like_numbers():
    values = [BIG, "10", "9", str(int(BIG) + 1)]
    assert sorted(values, key=ko.pad_sequence) == sorted(values, key=int)
    assert len(ko.pad_sequence(BIG)) == ko.SEQ_WIDTH
    with pytest.raises(ValueError):
        ko.pad_sequence("1" * (ko.SEQ_WIDTH + 1))


def test_initial_positions_follow_start_setting_but_children_start_at_trim_horizon():
    shards = [ShardInfo("s0", ending_sequence="40"), ShardInfo("s1", parent="s0"), ShardInfo("s2")]
    first = ko.with_new_shards({}, shards, "LATEST", now=100.5, first=True)
    assert first == {"s0": "AT_TIMESTAMP:100.5", "s1": "TRIM_HORIZON", "s2": "AT_TIMESTAMP:100.5"}
    later = ko.with_new_shards({"s0": ko.after(3)}, shards + [ShardInfo("s3")], "LATEST", now=200.0)
    assert later["s3"] == "TRIM_HORIZON" and later["s0"] == "AFTER:3"


def test_children_wait_for_parents_to_finish():
    parent = ShardInfo("shardId-0", ending_sequence="99")
    kids = [ShardInfo("shardId-1", parent="shardId-0"), ShardInfo("shardId-2", parent="shardId-0")]
    other = ShardInfo("shardId-3")
    shards = [kids[1], other, parent, kids[0]]
    positions = {"shardId-0": ko.after(50), "shardId-1": "TRIM_HORIZON", "shardId-2": "TRIM_HORIZON",
                 "shardId-3": ko.after(7)}
    assert [s.shard_id for s in ko.readable_shards(shards, positions)] == ["shardId-0", "shardId-3"]
    positions["shardId-0"] = ko.done(99)
    assert [s.shard_id for s in ko.readable_shards(shards, positions)] == ["shardId-1", "shardId-2", "shardId-3"]


def test_merge_child_waits_for_both_parents_and_expired_parents_do_not_block():
    a, b = ShardInfo("a", ending_sequence="9"), ShardInfo("b", ending_sequence="9")
    child = ShardInfo("c", parent="a", adjacent_parent="b")
    positions = {"a": ko.done(9), "b": ko.after(3), "c": "TRIM_HORIZON"}
    assert [s.shard_id for s in ko.readable_shards([a, b, child], positions)] == ["b"]
    # b aged out of retention (no longer listed): the child is readable.
    assert [s.shard_id for s in ko.readable_shards([a, child], positions)] == ["c"]


def test_split_budget():
    assert ko.split_budget(10, 3) == [4, 3, 3]
    assert ko.split_budget(2, 3) == [1, 1, 1]
    assert sum(ko.split_budget(100_000, 7)) == 100_000
    assert ko.split_budget(5, 0) == []


def test_plan_ranges_is_deterministic_and_skips_unmoved_shards():
    start = {"s0": ko.after(10), "s1": "TRIM_HORIZON", "s2": ko.after(5), "s3": ko.done(4)}
    end = {"s0": ko.after(20), "s1": ko.done(3), "s2": ko.after(5), "s3": ko.done(4), "s4": ko.after(BIG)}
    ranges = ko.plan_ranges(start, end)
    assert ranges == [ko.ShardRange("s0", "AFTER:10", 20), ko.ShardRange("s1", "TRIM_HORIZON", 3),
                      ko.ShardRange("s4", "TRIM_HORIZON", int(BIG))]
    assert ko.plan_ranges(dict(start), dict(end)) == ranges
    # A shard finished without any record (empty closed parent) needs no partition.
    assert ko.plan_ranges({"s1": "TRIM_HORIZON"}, {"s1": ko.done(None)}) == []


def test_merge_max_keeps_the_later_position():
    merged = ko.merge_max({"a": ko.after(5), "b": ko.done(2)},
                          {"a": ko.after(3), "b": ko.after(2), "c": "TRIM_HORIZON"})
    assert merged == {"a": "AFTER:5", "b": "DONE:2", "c": "TRIM_HORIZON"}


def test_offsets_are_json_primitives():
    import json

    off = ko.offset("orders", {"s1": ko.after(BIG), "s0": "TRIM_HORIZON"})
    assert json.loads(json.dumps(off)) == off
    assert list(off["shards"]) == ["s0", "s1"]


class _Err(Exception):
    def __init__(self, code, status=400):
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class _FakeClient:
    def __init__(self, failures):
        self.failures, self.calls = list(failures), 0

    def list_shards(self, **kwargs):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {"Shards": [{"ShardId": "s0", "SequenceNumberRange": {"StartingSequenceNumber": "1"}}]}


def test_throttling_is_retried_with_jittered_backoff():
    slept = []
    fake = _FakeClient([_Err("ProvisionedThroughputExceededException"), _Err("LimitExceededException")])
    client = KinesisClient({}, attempts=4, sleep=slept.append, client=fake)
    assert [s.shard_id for s in client.list_shards("orders")] == ["s0"]
    assert fake.calls == 3 and len(slept) == 2
    # full jitter: the n-th wait is drawn from [0, 0.1 * 2**(n-1)]
    assert 0 <= slept[0] <= 0.1 and 0 <= slept[1] <= 0.2


def test_jittered_backoff_doubles_and_stops_at_the_cap():
    random.seed(20261124)  # the jitter draws from `random`: fixed, so the spread assertion is deterministic
    slept = []
    fake = _FakeClient([_Err("ThrottlingException")] * 8)
    client = KinesisClient({}, attempts=8, sleep=slept.append, client=fake)
    client.list_shards("orders")
    bounds = [min(5.0, 0.1 * 2 ** n) for n in range(8)]
    assert len(slept) == 8 and all(0 <= wait <= bound for wait, bound in zip(slept, bounds, strict=True))
    assert max(slept[5:]) > 0.4  # drawn below 3.2 and 5.0 s: not all stuck at the first wait's bound


@pytest.mark.parametrize("code,words", [("ResourceNotFoundException", "not found"),
                                        ("UnrecognizedClientException", "credentials")])
def test_missing_stream_and_bad_credentials_are_clear(code, words):
    client = KinesisClient({}, attempts=3, sleep=lambda s: None, client=_FakeClient([_Err(code)]))
    with pytest.raises(KinesisError, match=words):
        client.list_shards("orders")


def test_retries_exhausted_is_a_kinesis_error():
    fake = _FakeClient([_Err("ProvisionedThroughputExceededException")] * 10)
    client = KinesisClient({}, attempts=2, sleep=lambda s: None, client=fake)
    with pytest.raises(KinesisError, match="after 2 retries"):
        client.list_shards("orders")


class _PagingClient:
    """get_records that expires the first iterator once."""

    def __init__(self):
        self.iterators = []
        self.expired = False

    def get_shard_iterator(self, **kwargs):
        self.iterators.append(kwargs)
        return {"ShardIterator": f"it-{len(self.iterators)}"}

    def get_records(self, ShardIterator, Limit):
        if ShardIterator == "it-1-next" and not self.expired:
            self.expired = True
            raise _Err("ExpiredIteratorException")
        if ShardIterator == "it-1":
            return {"Records": [{"SequenceNumber": "5"}], "NextShardIterator": "it-1-next", "MillisBehindLatest": 9}
        if ShardIterator == "it-2":
            return {"Records": [{"SequenceNumber": "6"}], "NextShardIterator": None, "MillisBehindLatest": 0}
        raise AssertionError(ShardIterator)


def test_expired_iterator_is_reacquired_after_the_last_sequence():
    fake = _PagingClient()
    client = KinesisClient({}, sleep=lambda s: None, client=fake)
    pages = list(client.pages("orders", "s0", "TRIM_HORIZON"))
    assert [[r["SequenceNumber"] for r in recs] for recs, _, _ in pages] == [["5"], ["6"]]
    assert pages[-1][1] is True  # shard ended
    assert fake.iterators[1] == {"StreamName": "orders", "ShardId": "s0", "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                                 "StartingSequenceNumber": "5"}


def test_example_kinesis_pipeline_loads_and_start_positions_validate():
    from pathlib import Path

    from ingest.config import load_pipeline
    from ingest.errors import ConfigError

    example = Path(__file__).resolve().parents[2] / "conf" / "examples" / "orders_kinesis_delta.yaml"
    config = load_pipeline(example)
    assert config.source.kind == "kinesis" and config.source.reader_starting_position == "TRIM_HORIZON"
    text = example.read_text().replace("starting_position: TRIM_HORIZON",
                                       "starting_position: AT_TIMESTAMP\n  starting_timestamp: 2026-11-22T00:00:00Z")
    other = example.parent.parent.parent / "tests" / "unit" / "_tmp_kinesis.yaml"
    try:
        other.write_text(text)
        assert load_pipeline(other).source.reader_starting_position == "AT_TIMESTAMP:1795305600.0"
        other.write_text("\n".join(line for line in text.splitlines() if "  starting_timestamp:" not in line))
        with pytest.raises(ConfigError, match="starting_timestamp"):
            load_pipeline(other)
    finally:
        other.unlink(missing_ok=True)


def test_checkpoint_offsets_of_the_kinesis_source_become_table_offsets():
    from ingest.checkpoint import parse_offset_file
    from ingest.commits import offsets_from_json, offsets_to_json

    entry = 'v1\n{"batchWatermarkMs":0}\n{"stream":"orders","shards":{"shardId-000000000000":"AFTER:' + BIG + \
        '","shardId-000000000001":"DONE:7","shardId-000000000002":"TRIM_HORIZON"}}\n'
    offsets = parse_offset_file(entry)
    assert offsets == {("orders", "shardId-000000000000"): int(BIG) + 1, ("orders", "shardId-000000000001"): 8,
                       ("orders", "shardId-000000000002"): 0}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets  # shard ids survive the commit record
    assert offsets_from_json({"t": {"3": 5}}) == {("t", 3): 5}     # Kafka partitions stay ints
    assert ko.starting_positions(offsets, "orders") == {"shardId-000000000000": "AFTER:" + BIG,
                                                        "shardId-000000000001": "AFTER:7"}
