"""The real components start, answer, and work together: broker round trip, Delta and Iceberg on moto S3 via S3A,
and pyiceberg reading what Spark wrote through the shared catalog."""

from __future__ import annotations

import uuid

import pytest

from infra import stack as local_stack
from ingest.adapters.object_store import s3_client, split_s3_uri

pytestmark = pytest.mark.integration


def test_dev_up_is_idempotent_and_status_reports_running(stack_env):
    again = local_stack.up(stack_env["state"])
    assert again.kafka_pid == stack_env["info"].kafka_pid
    status = local_stack.status(stack_env["state"])
    assert status["running"] is True
    env_file = local_stack.env_file(stack_env["state"]).read_text()
    assert f"LAKELINE_KAFKA_BOOTSTRAP_SERVERS={stack_env['info'].kafka_bootstrap}" in env_file


def test_kafka_produce_consume_round_trip(settings):
    from confluent_kafka import Consumer, Producer

    from ingest.adapters.kafka_admin import KafkaAdmin

    topic = f"roundtrip_{uuid.uuid4().hex[:6]}"
    assert KafkaAdmin(settings).ensure_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap_servers})
    sent = {f"k{i}": f"v{i}" for i in range(50)}
    for key, value in sent.items():
        producer.produce(topic, key=key.encode(), value=value.encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received = {}
    import time
    deadline = time.monotonic() + 60
    while len(received) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            received[msg.key().decode()] = msg.value().decode()
    consumer.close()
    assert received == sent


def test_spark_writes_and_reads_delta_on_moto_s3(spark, settings):
    location = f"{settings.warehouse}/delta/smoke_{uuid.uuid4().hex[:6]}"
    spark.range(100).selectExpr("id", "id * 2 AS twice").write.format("delta").save(location)
    assert spark.read.format("delta").load(location).selectExpr("sum(twice)").first()[0] == 9900
    # the objects really are in the moto bucket, reached through S3A
    s3 = s3_client(settings)
    bucket, prefix = split_s3_uri(location)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert any(k.endswith("00000000000000000000.json") for k in keys)
    assert any(k.endswith(".parquet") for k in keys)


def test_iceberg_written_by_spark_is_read_by_pyiceberg(spark, settings):
    from ingest.formats.iceberg import iceberg_catalog

    name = f"smoke_{uuid.uuid4().hex[:6]}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lakeline.smoke")
    spark.sql(f"CREATE TABLE lakeline.smoke.{name} (id bigint, label string) USING iceberg")
    spark.range(25).selectExpr("id", "concat('row-', id) AS label").writeTo(f"lakeline.smoke.{name}").append()
    assert spark.table(f"lakeline.smoke.{name}").count() == 25

    table = iceberg_catalog(settings).load_table(f"smoke.{name}").scan().to_arrow()
    assert table.num_rows == 25
    assert sorted(table.column("label").to_pylist())[:2] == ["row-0", "row-1"]
