"""Sink edge cases against moto S3 and Spark."""

from __future__ import annotations

import uuid

import pytest

from ingest.adapters.object_store import s3_client, split_s3_uri
from ingest.config import PipelineConfig
from ingest.formats import tables_for
from ingest.formats.delta_checkpoints import SPARK_CHECKPOINT_INTERVAL
from tests.helpers import BASE_SCHEMA, pipeline_dict

pytestmark = pytest.mark.integration


def test_delta_create_killed_before_its_first_commit_is_recovered(spark, settings):
    """kill -9 during CREATE leaves only `_delta_log/_staged_commits/`; the next start must still create it."""
    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_create_{uuid.uuid4().hex[:6]}"))
    main, _ = tables_for(spark, config, settings)
    bucket, prefix = split_s3_uri(main.location)
    s3 = s3_client(settings)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_staged_commits/", Body=b"")
    main.ensure()
    assert main.read().count() == 0
    assert main.last_commit() is None


def test_delta_log_with_files_but_no_table_is_left_alone(spark, settings):
    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_keep_{uuid.uuid4().hex[:6]}"))
    main, _ = tables_for(spark, config, settings)
    bucket, prefix = split_s3_uri(main.location)
    s3 = s3_client(settings)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/something-unexpected.json", Body=b"{}")
    with pytest.raises(Exception, match="DELTA"):
        main.ensure()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert f"{prefix}/_delta_log/something-unexpected.json" in keys


def test_first_start_killed_mid_offsets_write_starts_cleanly(spark, settings, conf_dir):
    """kill -9 while Spark writes offsets/0 leaves only a temp file; the next start must not trip over it."""
    from ingest.adapters.hadoop_fs import HadoopFS
    from ingest.config import load_pipeline
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import reconcile
    from tests.helpers import write_pipeline

    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta")))
    produce(config, settings, 500, seed=41)
    location = config.checkpoint_location(settings)
    HadoopFS(spark).write_text(f"{location}/offsets/.0.2b1c.tmp", "v1\n{")
    summary = Pipeline(config, settings, spark=spark, trigger="available-now").run(
        install_signal_handlers=False)
    assert summary.plan.action == "fresh" and summary.rows == 500
    assert reconcile(config, settings, spark).exact


def test_delta_transaction_id_only_where_a_replay_can_happen(spark, settings):
    """The first batch after a start carries txnAppId/txnVersion, so Delta itself drops a second copy of it; later
    batches leave it out (in Delta 4.4 that check rebuilds the table state, ~1 s a commit)."""
    import json
    from datetime import datetime, UTC

    from ingest.commits import CommitRecord

    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_txn_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)  # unpartitioned: the rows below need no decoded fields
    dead.ensure()
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    first = CommitRecord(config.pipeline, "L1", 7, {("orders", 0): 5}, {("orders", 0): 6}, 0, 1)
    dead.append(rows, first, may_be_replay=True)
    dead.append(rows, first, may_be_replay=True)  # Spark replaying batch 7: Delta skips it
    assert dead.read().count() == 1
    second = CommitRecord(config.pipeline, "L1", 8, {("orders", 0): 6}, {("orders", 0): 7}, 0, 1)
    dead.append(rows, second, may_be_replay=False)
    assert dead.read().count() == 2 and dead.last_commit().batch_id == 8

    bucket, prefix = split_s3_uri(dead.location)
    s3 = s3_client(settings)
    txns = {}
    for version in (1, 2):
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{version:020d}.json")["Body"].read()
        actions = [json.loads(line) for line in body.decode().splitlines()]
        txns[version] = [a["txn"] for a in actions if "txn" in a]
    assert txns[1] == [{"appId": f"lakeline.{config.pipeline}.L1", "version": 7,
                        "lastUpdated": txns[1][0]["lastUpdated"]}]
    assert txns[2] == []


def test_delta_last_commit_reads_the_newest_commit_files_and_widens_past_other_writers(spark, settings):
    """last_commit reads the newest commit files directly (no Spark job); when the pipeline's newest record is
    not among them (other writers committed since), it widens through the table history."""
    from datetime import datetime, UTC

    from ingest.commits import CommitRecord
    from ingest.formats.delta import _NEWEST

    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_last_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()
    assert dead._newest_record(_NEWEST) == (None, True) and dead.last_commit() is None  # only the create
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    records = [CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch}, {("orders", 0): batch + 1}, 0, 1)
               for batch in range(3)]
    for record in records:
        dead.append(rows, record, may_be_replay=False)
    assert dead._newest_record(_NEWEST) == (records[-1], True) and dead.last_commit() == records[-1]

    other = CommitRecord("another_pipeline", "L9", 0, {("orders", 0): 0}, {("orders", 0): 1}, 0, 1)
    dead.append(rows, other, may_be_replay=False)
    assert dead.last_commit() == records[-1]  # another pipeline's record is not ours
    for _ in range(_NEWEST):
        rows.write.format("delta").mode("append").save(dead.location)  # a writer with no record at all
    assert dead._newest_record(_NEWEST) == (None, False)
    assert dead.last_commit() == records[-1] == dead.commits()[-1]


def test_iceberg_last_commit_walks_the_current_lineage(spark, settings):
    """last_commit walks the current snapshot's ancestry in the JVM and agrees with commits() (the metadata
    tables): another pipeline's record and record-less appends are passed over, and after a rollback the
    rolled-back snapshot's record no longer counts."""
    from datetime import datetime, UTC

    from ingest.commits import CommitRecord

    config = PipelineConfig.model_validate(pipeline_dict("iceberg", name=f"t_last_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()
    assert dead.last_commit() is None
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    records = [CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch}, {("orders", 0): batch + 1}, 0, 1)
               for batch in range(3)]
    for record in records[:2]:
        dead.append(rows, record)
    assert dead.last_commit() == records[1] == dead.commits()[-1]
    kept = spark.sql(f"SELECT snapshot_id FROM {dead.identifier}.snapshots ORDER BY committed_at DESC LIMIT 1"
                     ).collect()[0][0]
    dead.append(rows, records[2])
    dead.append(rows, CommitRecord("another_pipeline", "L9", 0, {("orders", 0): 0}, {("orders", 0): 1}, 0, 1))
    rows.writeTo(dead.identifier).append()  # a writer with no record at all
    assert dead.last_commit() == records[2] == dead.commits()[-1]

    catalog = dead.identifier.split(".")[0]
    spark.sql(f"CALL {catalog}.system.rollback_to_snapshot('{dead.identifier.split('.', 1)[1]}', {kept})")
    assert dead.last_commit() == records[1] == dead.commits()[-1]


def test_delta_log_checkpoints_are_written_by_lakeline_off_the_commit_path(spark, settings):
    """A table Lakeline creates leaves log checkpoints to Lakeline (delta.checkpointInterval 2^31 - 1): after the
    first commit and every tenth, delta-rs writes one in the background, and the first also removes expired log
    files. Spark reads the table from it, keeping
    the rows, the schema and the transaction ids that make a replayed batch a no-op; Spark itself wrote no
    checkpoint at version 10. A table that keeps Delta's default interval is left to Spark."""
    import json
    from datetime import datetime, UTC

    from ingest.commits import CommitRecord

    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_logcp_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()  # version 0
    assert dead.log_checkpoints is not None
    props = spark.sql(f"DESCRIBE DETAIL delta.`{dead.location}`").first()["properties"]
    assert props["delta.checkpointInterval"] == str(SPARK_CHECKPOINT_INTERVAL)
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    records = [CommitRecord(config.pipeline, "L0" if batch == 0 else "L1", batch, {("orders", 0): batch},
                            {("orders", 0): batch + 1}, 0, 1) for batch in range(12)]
    for record in records:  # versions 1..12; each batch may be a replay, so each carries its transaction id
        dead.append(rows, record, may_be_replay=True)
        dead.log_checkpoints.wait(60)
    assert [version for version, _ in dead.log_checkpoints.written] == [1, 11]
    assert dead.log_checkpoints.failures == 0 and dead.log_checkpoints.cleanups == 1

    bucket, prefix = split_s3_uri(dead.location)
    s3 = s3_client(settings)
    names = {o["Key"].rsplit("/", 1)[1] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_delta_log/")
             ["Contents"]}
    assert {f"{v:020d}.checkpoint.parquet" for v in (1, 11)} <= names
    assert f"{10:020d}.checkpoint.parquet" not in names  # no checkpoint inside the tenth commit
    last = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_last_checkpoint")["Body"].read())
    assert last["version"] == 11

    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # a cold reader
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, dead.location)._2()
    assert snapshot.version() == 12 and snapshot.checkpointProvider().version() == 11
    assert dead.read().count() == 12 and dead.read().schema == dead.schema
    # Lineage L0's transaction id (version 1) is now known only from the checkpoint: replaying its batch is a no-op.
    dead.append(rows, records[0], may_be_replay=True)
    assert dead.read().count() == 12

    other = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_logcp_{uuid.uuid4().hex[:6]}"))
    _, plain = tables_for(spark, other, settings)
    # the table an earlier release made: Delta's default checkpoint interval
    spark.createDataFrame([], plain.schema).write.format("delta").save(plain.location)
    plain.ensure()
    assert plain.log_checkpoints is None


def test_iceberg_snapshot_history_is_bounded_by_the_pipeline_off_the_commit_path(spark, settings):
    """A table Lakeline creates carries its max snapshot age, and the pipeline expires past it in the background
    (here 1 s, keeping 3, every 4th commit) and its max snapshot count: the history stays bounded while every row,
    data file, manifest list and the newest commit record stay; the ranges kept still chain; a table without the
    property is left alone."""
    import time
    from datetime import datetime, UTC

    from ingest.commits import CommitRecord
    from ingest.formats.iceberg_history import (MAX_SNAPSHOT_AGE_KEY, MAX_SNAPSHOTS_KEY, MIN_SNAPSHOTS_KEY,
                                                STREAM_MAX_SNAPSHOT_AGE_MS, STREAM_MAX_SNAPSHOTS, SnapshotExpirer)
    from ingest.reconcile import check_ranges

    config = PipelineConfig.model_validate(pipeline_dict("iceberg", name=f"t_hist_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {dead.identifier}").collect())
    assert props[MAX_SNAPSHOT_AGE_KEY] == str(STREAM_MAX_SNAPSHOT_AGE_MS) and dead.snapshot_expiry is not None
    assert props[MAX_SNAPSHOTS_KEY] == str(STREAM_MAX_SNAPSHOTS)
    spark.sql(f"ALTER TABLE {dead.identifier} SET TBLPROPERTIES ('{MAX_SNAPSHOT_AGE_KEY}'='1000', "
              f"'{MIN_SNAPSHOTS_KEY}'='3')")
    dead.snapshot_expiry = SnapshotExpirer("t", dead.expire_snapshots, every=4)
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    records = [CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch}, {("orders", 0): batch + 1}, 0, 1)
               for batch in range(13)]
    bucket, prefix = split_s3_uri(dead.maintenance._location())  # noqa: SLF001
    s3 = s3_client(settings)

    def objects() -> set[str]:
        return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])}

    manifest_lists: set[str] = set()  # of every snapshot made, expired ones included
    for record in records:
        dead.append(rows, record)
        manifest_lists |= {row[0] for row in spark.sql(f"SELECT manifest_list FROM {dead.identifier}.snapshots")
                           .collect()}
        dead.snapshot_expiry.wait(60)
        time.sleep(0.4)  # the snapshots of earlier commits age past the 1 s max age
    written = objects()
    dead.append(rows, CommitRecord(config.pipeline, "L1", 13, {("orders", 0): 13}, {("orders", 0): 14}, 0, 1))
    dead.snapshot_expiry.wait(60)  # the 14th commit: no expiry due (every 4th: 1, 5, 9, 13)
    assert dead.snapshot_expiry.failures == 0 and len(dead.snapshot_expiry.done) == 4
    assert dead.snapshot_expiry.expired >= 6, dead.snapshot_expiry.done
    snapshots = spark.sql(f"SELECT count(*) FROM {dead.identifier}.snapshots").first()[0]
    assert snapshots == 14 - dead.snapshot_expiry.expired  # the appends', less the expired
    assert not dead.history_complete()
    assert dead.read().count() == 14  # every row
    assert written <= objects()  # metadata only: no data file, manifest or manifest list deleted
    # the expired snapshots' manifest lists too (cleanExpiredFiles(true) would have deleted them)
    assert len(manifest_lists) == 13 and {m.split("://", 1)[1].split("/", 1)[1] for m in manifest_lists} <= objects()
    kept = dead.commits()
    assert kept[-1] == dead.last_commit() and kept[-1].batch_id == 13 and len(kept) < 14
    assert check_ranges(kept, {("orders", 0): 0}, dead.history_complete()) == (True, True, [])

    # The count cap: with a long max age, the newest 4 snapshots stay (what a fast stream's table needs)
    spark.sql(f"ALTER TABLE {dead.identifier} SET TBLPROPERTIES ('{MAX_SNAPSHOT_AGE_KEY}'='21600000', "
              f"'{MAX_SNAPSHOTS_KEY}'='4')")
    for batch in range(14, 17):
        dead.append(rows, CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch},
                                       {("orders", 0): batch + 1}, 0, 1))
    dead.snapshot_expiry.wait(60)  # the 17th commit: due
    assert spark.sql(f"SELECT count(*) FROM {dead.identifier}.snapshots").first()[0] == 4
    assert dead.read().count() == 17 and dead.last_commit().batch_id == 16

    other = PipelineConfig.model_validate(pipeline_dict("iceberg", name=f"t_hist_{uuid.uuid4().hex[:6]}"))
    _, plain = tables_for(spark, other, settings)
    plain.ensure()
    spark.sql(f"ALTER TABLE {plain.identifier} UNSET TBLPROPERTIES ('{MAX_SNAPSHOT_AGE_KEY}')")  # as made elsewhere
    plain.ensure()
    assert plain.snapshot_expiry is None and plain.history_complete()


def test_iceberg_manifests_are_merged_by_the_pipeline_off_the_commit_path(spark, settings):
    """A table Lakeline creates has Iceberg's in-commit manifest merge off and a max manifest count the pipeline
    merges at, in the background (here 4, looked at every 2nd commit): no append merges (each adds one manifest to
    its parent's), the current snapshot never holds more than 1.5x the limit, the merges are `replace` snapshots
    without a commit record, and every row and the newest commit record stay. A table without the property is left
    to Iceberg; a bad value stops the start naming the property. An append, or compaction's manifest rewrite, between
    the merge's reading and its commit is kept; a merge does not count as a compaction."""
    from datetime import datetime, UTC

    from ingest.commits import COMMIT_KEY, CommitRecord
    from ingest.errors import ConfigError
    from ingest.formats.iceberg_manifests import MAX_MANIFESTS_KEY, MERGE_ENABLED_KEY, STREAM_MAX_MANIFESTS
    from ingest.reconcile import check_ranges

    config = PipelineConfig.model_validate(pipeline_dict("iceberg", name=f"t_mani_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {dead.identifier}").collect())
    assert props[MERGE_ENABLED_KEY] == "false" and props[MAX_MANIFESTS_KEY] == str(STREAM_MAX_MANIFESTS)
    assert dead.manifest_merge is not None and dead.manifest_merge.every == STREAM_MAX_MANIFESTS // 2
    spark.sql(f"ALTER TABLE {dead.identifier} SET TBLPROPERTIES ('{MAX_MANIFESTS_KEY}'='4')")
    dead.ensure()  # a restart: the merger follows the table's limit
    assert dead.manifest_merge.every == 2
    dead.snapshot_expiry = None  # keep every snapshot, to read each one's manifests below
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)
    most = 0
    for batch in range(12):
        dead.append(rows, CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch},
                                       {("orders", 0): batch + 1}, 0, 1))
        dead.manifest_merge.wait(60)
        table = dead.java_table()
        table.refresh()
        most = max(most, int(table.currentSnapshot().allManifests(table.io()).size()))
    assert dead.manifest_merge.failures == 0 and dead.manifest_merge.replaced >= 8, dead.manifest_merge.done
    assert most <= 6, most

    snapshots = spark.sql(f"SELECT snapshot_id, parent_id, operation, summary, manifest_list "
                          f"FROM {dead.identifier}.snapshots ORDER BY committed_at").collect()
    table = dead.java_table()
    manifests = {row.snapshot_id: int(table.snapshot(row.snapshot_id).allManifests(table.io()).size())
                 for row in snapshots}
    appends = [row for row in snapshots if row.operation == "append"]
    merges = [row for row in snapshots if row.operation == "replace"]
    assert len(appends) == 12 and len(merges) >= 2, [(r.operation, r.summary) for r in snapshots]
    # no append merged: each holds its parent's manifests and its own
    assert all(manifests[row.snapshot_id] == manifests.get(row.parent_id, 0) + 1 for row in appends), manifests
    assert all(row.summary.get("lakeline.upkeep") == "manifest-merge" and COMMIT_KEY not in row.summary
               and manifests[row.snapshot_id] < manifests[row.parent_id] for row in merges)
    assert dead.read().count() == 12
    assert dead.last_commit().batch_id == 11
    assert check_ranges(dead.commits(), {("orders", 0): 0}, dead.history_complete()) == (True, True, [])

    assert dead.maintenance.measure().last_compaction_at is None  # a manifest merge is not a compaction

    # Commits between the merge's reading (apply) and its own commit, through a stand-in for the commit lock.
    class CommitsBetween:
        def __init__(self, between):
            self.between = between

        def __enter__(self):
            self.between()

        def __exit__(self, *exc):
            return False

    def record(batch: int) -> CommitRecord:
        return CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch}, {("orders", 0): batch + 1}, 0, 1)

    def fresh() -> int:
        table = dead.java_table()
        table.refresh()
        return sum(1 for m in table.currentSnapshot().allManifests(table.io()) if m.hasAddedFiles())

    dead.manifest_merge = None  # merged by hand below
    for batch in range(12, 16):
        dead.append(rows, record(batch))
    lock, waiting = dead._commit_turn, fresh()  # noqa: SLF001
    # the stream's next append (here: the same write, without the lock it would wait for)
    dead._commit_turn = CommitsBetween(lambda: rows.writeTo(dead.identifier).option(  # noqa: SLF001
        f"snapshot-property.{COMMIT_KEY}", record(16).to_json()).append())
    assert dead.merge_manifests() == waiting >= 4
    assert fresh() == 1  # the append's manifest, kept as it was; the merge's own commit came after it
    assert dead.read().count() == 17 and dead.last_commit().batch_id == 16
    # compaction's manifest rewrite from another process: the merge's commit redoes its work on what it finds
    dead._commit_turn = lock  # noqa: SLF001
    for batch in range(17, 21):
        dead.append(rows, record(batch))
    dead._commit_turn = CommitsBetween(dead.maintenance.tidy_metadata)  # noqa: SLF001
    dead.merge_manifests()
    dead._commit_turn = lock  # noqa: SLF001
    assert dead.read().count() == 21 and dead.last_commit().batch_id == 20
    assert check_ranges(dead.commits(), {("orders", 0): 0}, dead.history_complete()) == (True, True, [])
    assert dead.maintenance.measure().last_compaction_at is not None  # the compaction's rewrite is one

    spark.sql(f"ALTER TABLE {dead.identifier} SET TBLPROPERTIES ('{MAX_MANIFESTS_KEY}'='a few')")
    with pytest.raises(ConfigError, match=f"{MAX_MANIFESTS_KEY} is 'a few'"):
        dead.ensure()
    spark.sql(f"ALTER TABLE {dead.identifier} UNSET TBLPROPERTIES ('{MAX_MANIFESTS_KEY}')")  # as made elsewhere
    dead.ensure()
    assert dead.manifest_merge is None


def test_iceberg_append_waits_at_its_swap_while_a_rewrite_holds_the_commit_turn(spark, settings):
    """The turn a Spark-free rewrite writes to S3 (ingest.formats.commit_turn) holds the stream's append at its swap,
    in the JVM's commit, until the rewrite ends it; the append is told how long (the batch's `turn` phase). An
    append with no turn there does not wait."""
    import threading
    import time
    from datetime import datetime, UTC

    from ingest.adapters.object_store import S3Files
    from ingest.commits import CommitRecord
    from ingest.formats.commit_turn import CommitTurn, commit_turn

    config = PipelineConfig.model_validate(pipeline_dict("iceberg", name=f"t_turn_{uuid.uuid4().hex[:6]}"))
    _, dead = tables_for(spark, config, settings)
    dead.ensure()
    rows = spark.createDataFrame([("orders", 0, 5, None, None, b"x", "malformed_json", "d",
                                 datetime.now(UTC))], dead.schema)

    def record(batch: int) -> CommitRecord:
        return CommitRecord(config.pipeline, "L1", batch, {("orders", 0): batch}, {("orders", 0): batch + 1}, 0, 1)

    dead.append(rows, record(0))
    assert dead.turn_wait_s == 0
    location = str(dead.java_table().location())
    assert isinstance(commit_turn(location, settings), CommitTurn)  # a table on S3 takes turns
    turn = CommitTurn(S3Files(settings), location, turn_s=120)  # live however slow the append is to reach its swap
    commits = spark.sparkContext._jvm.io.lakeline.iceberg.CommitTurn  # noqa: SLF001 - py4j
    held = turn.taken()
    held.__enter__()
    appending = threading.Thread(target=dead.append, args=(rows, record(1)))
    appending.start()
    deadline = time.monotonic() + 120
    while not commits.waiting(location):
        assert appending.is_alive() and time.monotonic() < deadline, "the append never waited for the turn"
        time.sleep(0.05)
    assert dead.last_commit().batch_id == 0  # held at its swap
    held.__exit__(None, None, None)
    appending.join(60)
    assert not appending.is_alive()
    assert 0 < dead.turn_wait_s < 10
    assert dead.last_commit().batch_id == 1 and dead.read().count() == 2


def test_delta_statistics_on_the_declared_fields_only(spark, settings):
    """A main table Lakeline creates collects data-skipping statistics on the declared record fields only (the
    write's min/max over every row of Lakeline's own columns cost CPU and serve no filter); every file keeps its
    record count, which delta-rs readers and the table counts use. A column added later joins the list.
    Measured: 23 s run alone (the session's first Delta writes included), 14 s more for the shared Spark session."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from ingest.commits import CommitRecord
    from ingest.formats.delta import STATS_COLUMNS_KEY
    from ingest.formats.delta_reader import DeltaTableReader

    config = PipelineConfig.model_validate(pipeline_dict("delta", name=f"t_stats_{uuid.uuid4().hex[:6]}"))
    main, _ = tables_for(spark, config, settings)
    main.ensure()
    declared = [f["name"] for f in BASE_SCHEMA["fields"]]
    props = spark.sql(f"DESCRIBE DETAIL {main.sql_name}").first()["properties"]
    assert props[STATS_COLUMNS_KEY] == ",".join(declared)

    values = {"event_time": F.timestamp_seconds(F.lit(1_795_800_000) + F.col("id")), "_offset": F.col("id"),
              "_topic": F.lit("orders"), "_kafka_partition": F.lit(0), "_ingested_at": F.current_timestamp(),
              "customer_id": F.format_string("c-%03d", F.col("id"))}
    rows = spark.range(20).select(*(values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
                                    for f in main.schema.fields))
    main.append(rows, CommitRecord(config.pipeline, "L1", 0, {}, {("orders", 0): 20}, 20, 0), may_be_replay=False)
    reader = DeltaTableReader(main.location, settings)
    names = set(pa.table(reader.table().get_add_actions(flatten=True)).column_names)
    assert {"min.event_time", "max.customer_id"} <= names and not {"min._offset", "min._ingested_at"} & names
    assert reader.counts().rows == 20
    assert main.read().where("customer_id = 'c-007'").count() == 1

    main.add_columns(StructType([StructField("coupon", StringType())]))
    props = spark.sql(f"DESCRIBE DETAIL {main.sql_name}").first()["properties"]
    assert props[STATS_COLUMNS_KEY] == ",".join([*declared, "coupon"])
