"""Peer (b): plain Spark Structured Streaming, default settings (default trigger: the next micro-batch as soon as
the previous one ends), from_json, the built-in Delta sink or the Iceberg sink. Same Spark build, jars and S3A
settings as Lakeline (and, for Iceberg, the same embedded catalog).

    .venv/bin/python -m bench.peers.spark_plain --topic T --location s3a://... --checkpoint s3a://...
    .venv/bin/python -m bench.peers.spark_plain --format iceberg --location lakeline.bench.t --checkpoint s3a://...

Delta: a table at `--location`, partitioned by `event_date` = to_date(event_time). Iceberg: the table
`--location` (catalog.namespace.table), created with hidden partitioning days(event_time) and Iceberg's defaults,
written with `toTable`. Runs until SIGTERM, then stops the query cleanly.
"""

from __future__ import annotations

import argparse
import signal
import threading

SCHEMA = ("event_id STRING, event_time TIMESTAMP, customer_id STRING, order_id STRING, status STRING, "
          "amount DOUBLE, currency STRING, items INT, country STRING")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--format", choices=["delta", "iceberg"], default="delta")
    parser.add_argument("--location", required=True, help="Delta: the table's path; Iceberg: catalog.namespace.table")
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from ingest.adapters.kafka_admin import java_client_config
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    settings = load_settings()
    # Lakeline's session writes Parquet timestamps as INT64 micros; plain Spark keeps Spark's own default (INT96).
    spark = build_spark(settings, f"bench-peer-spark-{args.format}",
                        extra={"spark.sql.parquet.outputTimestampType": "INT96"})
    reader = spark.readStream.format("kafka").option("subscribe", args.topic).option("startingOffsets", "earliest")
    for key, value in java_client_config(settings).items():
        reader = reader.option(f"kafka.{key}", value)
    rows = reader.load().select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    if args.format == "delta":
        query = (rows.withColumn("event_date", F.to_date("event_time")).writeStream.format("delta")
                 .option("checkpointLocation", args.checkpoint).partitionBy("event_date").start(args.location))
    else:
        catalog, namespace, _ = args.location.split(".")
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {args.location} ({SCHEMA}) USING iceberg "
                  "PARTITIONED BY (days(event_time))")
        query = (rows.writeStream.format("iceberg").option("checkpointLocation", args.checkpoint)
                 .toTable(args.location))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print("READY", flush=True)
    while query.isActive and not stop.is_set():
        query.awaitTermination(0.5)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
