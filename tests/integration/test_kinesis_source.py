"""The lakeline-kinesis source against a moto Kinesis server and real Spark: exact steady run with several shards
and a restart, a shard split mid-run (children read after the parent), deterministic replay of a planned batch,
and clear errors. The server is tests/conftest.py's `moto_kinesis` (shards split as Kinesis splits them); the
reader itself has no moto workarounds.
"""

from __future__ import annotations

import time
import uuid

import pytest


pytestmark = pytest.mark.integration


def _boto(opts):
    import boto3

    return boto3.client("kinesis", endpoint_url=opts["endpoint"], region_name=opts["region"],
                        aws_access_key_id=opts["access_key_id"], aws_secret_access_key=opts["secret_access_key"])


def _new_stream(opts, shards):
    name = f"k{uuid.uuid4().hex[:10]}"
    client = _boto(opts)
    client.create_stream(StreamName=name, ShardCount=shards)
    return name, client


def _put(client, stream, start, count):
    """Put records with payload i; return {(shard, seq): payload}."""
    out = {}
    for base in range(start, start + count, 500):
        ids = range(base, min(base + 500, start + count))
        resp = client.put_records(StreamName=stream, Records=[
            {"Data": str(i).encode(), "PartitionKey": f"key-{i}"} for i in ids])
        assert resp.get("FailedRecordCount", 0) == 0
        for i, rec in zip(ids, resp["Records"], strict=True):
            out[(rec["ShardId"], int(rec["SequenceNumber"]))] = str(i).encode()
    return out


def _run_stream(spark, options, checkpoint, seen, until, timeout=180):
    """Run a stream into `seen` (batch_id -> rows, so a replayed batch overwrites itself, like the idempotent
    table sinks) until `until(seen)` or timeout."""
    from ingest.sources.kinesis import register

    register(spark)

    def sink(batch, batch_id):
        rows = batch.select("shard_id", "sequence_number", "data").collect()
        seen[batch_id] = [(r.shard_id, int(r.sequence_number), bytes(r.data)) for r in rows]

    df = spark.readStream.format("lakeline-kinesis").options(**options).load()
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(seen):
            if query.exception():
                raise query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
    assert until(seen), f"stream did not finish in {timeout}s: {sum(len(v) for v in seen.values())} rows"


def _rows(seen):
    return [row for batch_id in sorted(seen) for row in seen[batch_id]]


def _assert_exact(seen, expected):
    rows = _rows(seen)
    coords = [(shard, seq) for shard, seq, _ in rows]
    assert len(coords) == len(set(coords)), "duplicates"
    assert {(shard, seq): data for shard, seq, data in rows} == expected


def test_steady_run_with_several_shards_and_a_restart_is_exact(moto_kinesis, spark, tmp_path):
    stream, client = _new_stream(moto_kinesis, 3)
    expected = _put(client, stream, 0, 3000)
    assert len({shard for shard, _ in expected}) == 3
    options = {**moto_kinesis, "stream": stream, "max_records_per_batch": "1000"}
    seen: dict = {}
    started = time.monotonic()
    _run_stream(spark, options, str(tmp_path / "cp"), seen, lambda s: sum(map(len, s.values())) >= 3000)
    print(f"3000 records over 3 shards in {time.monotonic() - started:.1f}s, {len(seen)} batches")
    assert len(seen) >= 3 and max(map(len, seen.values())) <= 1000
    _assert_exact(seen, expected)
    # A restart on the same checkpoint continues after the committed end: only the new records.
    expected.update(_put(client, stream, 3000, 600))
    _run_stream(spark, options, str(tmp_path / "cp"), seen, lambda s: sum(map(len, s.values())) >= 3600)
    time.sleep(1)
    _assert_exact(seen, expected)


def test_shard_split_mid_run_reads_children_after_parent(moto_kinesis, spark, tmp_path):
    stream, client = _new_stream(moto_kinesis, 2)
    expected = _put(client, stream, 0, 1000)
    options = {**moto_kinesis, "stream": stream, "max_records_per_batch": "300"}
    seen: dict = {}
    split_done = {}

    def until(s):
        total = sum(map(len, s.values()))
        if not split_done and total >= 300:
            shards = client.list_shards(StreamName=stream)["Shards"]
            parent = shards[0]
            lo, hi = int(parent["HashKeyRange"]["StartingHashKey"]), int(parent["HashKeyRange"]["EndingHashKey"])
            client.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"],
                               NewStartingHashKey=str((lo + hi) // 2))
            split_done["parent"] = parent["ShardId"]
            expected.update(_put(client, stream, 1000, 1000))
        return split_done and total >= len(expected)

    _run_stream(spark, options, str(tmp_path / "cp"), seen, until)
    _assert_exact(seen, expected)
    parent = split_done["parent"]
    shards = {s["ShardId"]: s for s in client.list_shards(StreamName=stream)["Shards"]}
    children = {sid for sid, s in shards.items() if s.get("ParentShardId") == parent}
    assert len(children) == 2 and any(shard in children for shard, _ in expected)
    parent_batches = [b for b, rows in seen.items() if any(r[0] == parent for r in rows)]
    child_batches = [b for b, rows in seen.items() if any(r[0] in children for r in rows)]
    assert max(parent_batches) < min(child_batches)


def test_replayed_batch_reads_exactly_the_planned_records(moto_kinesis):
    from ingest.sources.kinesis import KinesisStreamReader

    stream, client = _new_stream(moto_kinesis, 2)
    _put(client, stream, 0, 400)
    reader = KinesisStreamReader({**moto_kinesis, "stream": stream, "max_records_per_batch": "150"})
    start = reader.initialOffset()
    end = reader.latestOffset()
    parts = reader.partitions(start, end)
    # The planner's read-ahead travels in the partitions: the workers fetch nothing (each record is read once).
    assert len(parts) == 2 and all(part.rows is not None for part in parts)
    first = [row for part in parts for row in reader.read(part)]
    assert len(first) == 150
    _put(client, stream, 400, 200)
    # A new reader (a restarted driver) replays the same planned batch, fetching it from Kinesis.
    again = KinesisStreamReader({**moto_kinesis, "stream": stream, "max_records_per_batch": "150"})
    replay_parts = again.partitions(start, end)
    assert all(part.rows is None for part in replay_parts)
    replay = [row for part in replay_parts for row in again.read(part)]
    assert replay == first
    assert all(part.rows is None for part in reader.partitions(start, end))  # handed over once, then read
    following = again.latestOffset()
    rest = [row for part in again.partitions(end, following) for row in again.read(part)]
    assert not {(r[1], r[2]) for r in rest} & {(r[1], r[2]) for r in first}


def test_an_arrival_cutoff_plans_only_records_that_arrived_by_then(moto_kinesis):
    """An available-now run plans what had arrived when it began: a record that arrives later waits for the next
    run, even on a shard that had older records in the same plan."""
    from ingest.sources.kinesis import KinesisStreamReader

    stream, client = _new_stream(moto_kinesis, 2)
    before = _put(client, stream, 0, 300)
    cutoff = time.time()
    after = _put(client, stream, 300, 100)
    reader = KinesisStreamReader({**moto_kinesis, "stream": stream, "until_arrival": repr(cutoff)})
    start = reader.initialOffset()
    end = reader.latestOffset()
    rows = [row for part in reader.partitions(start, end) for row in reader.read(part)]
    assert {(shard, int(seq)) for _, shard, seq, *_ in rows} == set(before)
    assert reader.latestOffset() == end  # nothing more for this run: Spark plans no further batch
    later = KinesisStreamReader({**moto_kinesis, "stream": stream})  # the next run takes the rest
    rest = [row for part in later.partitions(end, later.latestOffset()) for row in later.read(part)]
    assert {(shard, int(seq)) for _, shard, seq, *_ in rest} == set(after)


def test_missing_stream_is_a_clear_error(moto_kinesis):
    from ingest.errors import KinesisError
    from ingest.sources.kinesis import KinesisStreamReader

    with pytest.raises(KinesisError, match="not found"):
        KinesisStreamReader({**moto_kinesis, "stream": "no-such-stream"}).initialOffset()
