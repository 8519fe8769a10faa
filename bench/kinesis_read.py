"""Kinesis source read throughput: put N sample events into a fresh S-shard stream on an in-process moto server,
then read them with the lakeline-kinesis source (processing-time trigger, per-batch limit) into a counting
foreachBatch sink. Prints the figures and writes bench/results/kinesis-read-<date>.{json,md}.

    .venv/bin/python -m bench.kinesis_read --count 200000 --shards 4 --max-records 50000

Read throughput = records / wall time from query start to the last record counted (JVM already warm). It covers
planning (latestOffset reads ahead to fix each batch's end), the re-read in the Python workers and the Arrow
hand-off to the JVM; no table write. This measures the source alone, against moto (one Python process serving
HTTP), not real Kinesis (limits: 2 MB/s and 5 GetRecords/s per shard).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
import uuid
from datetime import datetime, UTC
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _fast_moto() -> None:
    """moto 5.2.5 finds a shard's newest sequence number with list(keys)[-1] on every put (quadratic loading);
    use the OrderedDict's O(1) end instead. Performance only: same numbers, same behaviour."""
    import logging

    from moto.kinesis import models

    models.Shard.get_max_sequence_number = lambda self: next(reversed(self.records)) if self.records else 0
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--max-records", type=int, default=50_000)
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer
    from pyspark.sql import SparkSession

    from infra.procs import free_port
    from ingest.produce import good_event
    from ingest.sources.kinesis import register

    _fast_moto()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    conn = {"endpoint": f"http://127.0.0.1:{port}", "region": "us-east-1", "access_key_id": "bench",
            "secret_access_key": "bench"}
    client = boto3.client("kinesis", endpoint_url=conn["endpoint"], region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    stream = f"bench{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=args.shards)
    rng, base = random.Random(7), datetime(2026, 11, 1, tzinfo=UTC)
    started = time.monotonic()
    payload_bytes = 0
    for start in range(0, args.count, 500):
        records = []
        for i in range(start, min(start + 500, args.count)):
            data = json.dumps(good_event(rng, base), default=str).encode()
            payload_bytes += len(data)
            records.append({"Data": data, "PartitionKey": f"k{i}"})
        assert client.put_records(StreamName=stream, Records=records).get("FailedRecordCount", 0) == 0
    put_seconds = time.monotonic() - started
    print(f"put {args.count} records ({payload_bytes / 1e6:.1f} MB) into {args.shards} shards in {put_seconds:.1f}s")

    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need the venv (pyarrow, boto3)
    spark = (SparkSession.builder.master("local[2]").config("spark.pyspark.python", sys.executable)
             .appName("bench-kinesis-read")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    counted, batches = [0], []

    def sink(batch, batch_id):
        n = batch.count()
        counted[0] += n
        batches.append((batch_id, n, time.monotonic()))

    options = {**conn, "stream": stream, "max_records_per_batch": str(args.max_records)}
    checkpoint = f"/tmp/bench-kinesis-{stream}"
    started = time.monotonic()
    query = (spark.readStream.format("lakeline-kinesis").options(**options).load().writeStream
             .foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
    while counted[0] < args.count and query.isActive:
        time.sleep(0.2)
    read_seconds = (batches[-1][2] if batches else time.monotonic()) - started
    query.stop()
    failure = query.exception()
    spark.stop()
    server.stop()
    if failure:
        raise SystemExit(f"query failed: {failure}")
    result = {
        "benchmark": "kinesis-read", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f".venv/bin/python -m bench.kinesis_read --count {args.count} --shards {args.shards} "
                   f"--max-records {args.max_records}",
        "records": counted[0], "shards": args.shards, "max_records_per_batch": args.max_records,
        "batches": len([b for b in batches if b[1]]), "put_seconds": round(put_seconds, 1),
        "read_seconds": round(read_seconds, 1), "records_per_second": round(counted[0] / read_seconds),
        "payload_mb": round(payload_bytes / 1e6, 1),
        "machine": f"{platform.machine()} {platform.system()} python {platform.python_version()}, 2 cores shared",
        "endpoint": "moto 5.2.5 ThreadedMotoServer (in-process)",
    }
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    day = result["date"][:10]
    (RESULTS / f"kinesis-read-{day}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"kinesis-read-{day}.md").write_text(
        f"# Kinesis source read, {result['date']}\n\n`{result['command']}`\n\n"
        f"| records | shards | batches | read s | records/s | put s |\n| --- | --- | --- | --- | --- | --- |\n"
        f"| {result['records']} | {args.shards} | {result['batches']} | {result['read_seconds']} | "
        f"{result['records_per_second']} | {result['put_seconds']} |\n\n"
        f"Source only (counting foreachBatch sink, no table write), against {result['endpoint']}; "
        f"{result['machine']}.\n")


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    main()
