"""Several writers on S3: a Delta commit file or a Spark checkpoint entry, once written, can never be replaced.

The stock S3SingleDriverLogStore checks existence and then PUTs; two drivers can both pass the check and the
second PUT replaces the first commit (lost data). Lakeline's LogStore writes commits with a conditional PUT
(If-None-Match: *), which moto and S3 refuse with 412 when the object exists; Delta sees
FileAlreadyExistsException, re-reads the log and retries at the next version."""

from __future__ import annotations

import json
import uuid

import pytest

from ingest.adapters.object_store import s3_client, split_s3_uri

pytestmark = pytest.mark.integration


def _jlist(spark, lines):
    out = spark._jvm.java.util.ArrayList()  # noqa: SLF001
    for line in lines:
        out.add(line)
    return out


def _read(settings, uri: str) -> bytes:
    bucket, key = split_s3_uri(uri)
    return s3_client(settings).get_object(Bucket=bucket, Key=key)["Body"].read()


def test_spark_sessions_use_the_conditional_put_logstore(spark):
    assert spark.conf.get("spark.delta.logStore.s3a.impl") == "io.lakeline.delta.S3ConditionalPutLogStore"


def test_second_writer_cannot_overwrite_a_delta_commit(spark, settings):
    table = f"{settings.warehouse}/delta/multi_writer_{uuid.uuid4().hex[:8]}"
    spark.range(10).write.format("delta").save(table)
    commit_1 = f"{table}/_delta_log/00000000000000000001.json"
    # Another driver wins version 1 (written straight to S3, as a second Spark driver's LogStore would).
    other = json.dumps({"commitInfo": {"timestamp": 1, "operation": "WRITE", "engineInfo": "other-driver"}})
    bucket, key = split_s3_uri(commit_1)
    s3_client(settings).put_object(Bucket=bucket, Key=key, Body=(other + "\n").encode())

    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001
    store = jvm.io.lakeline.delta.S3ConditionalPutLogStore(conf)
    mine = json.dumps({"commitInfo": {"timestamp": 2, "operation": "WRITE", "engineInfo": "this-driver"}})
    with pytest.raises(Exception) as refused:
        store.write(jvm.org.apache.hadoop.fs.Path(commit_1), _jlist(spark, [mine]).iterator(), False, conf)
    assert "java.nio.file.FileAlreadyExistsException" in str(refused.value)
    assert b"other-driver" in _read(settings, commit_1)  # the winner's commit is intact

    # Delta itself then commits at the next free version, and every row is still there.
    spark.range(10, 15).write.format("delta").mode("append").save(table)
    from delta.tables import DeltaTable

    assert DeltaTable.forPath(spark, table).history().agg({"version": "max"}).first()[0] == 2
    assert spark.read.format("delta").load(table).count() == 15


def test_plain_create_without_overwrite_is_not_atomic_on_s3(spark, settings):
    """Why the stock store is unsafe: exists-check + create(overwrite=false) lets two open writers both land."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001
    path = jvm.org.apache.hadoop.fs.Path(f"{settings.warehouse}/race/{uuid.uuid4().hex}.json")
    fs = path.getFileSystem(conf)
    first, second = fs.create(path, False), fs.create(path, False)
    first.write(bytearray(b"first\n"))
    second.write(bytearray(b"second\n"))
    first.close()
    second.close()  # no error: the second writer silently replaced the first
    assert _read(settings, str(path)) == b"second\n"

    guarded = jvm.org.apache.hadoop.fs.Path(f"{settings.warehouse}/race/{uuid.uuid4().hex}.json")

    def conditional():
        builder = fs.createFile(guarded).overwrite(False)
        builder.must("fs.option.create.conditional.overwrite", True)
        return builder.build()

    first, second = conditional(), conditional()
    first.write(bytearray(b"first\n"))
    second.write(bytearray(b"second\n"))
    first.close()
    with pytest.raises(Exception, match="412"):
        second.close()
    assert _read(settings, str(guarded)) == b"first\n"


def _checkpoint_manager(spark, location: str):
    """The manager Spark's metadata logs get: CheckpointFileManager.create over the session's Hadoop conf."""
    jvm = spark._jvm  # noqa: SLF001
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # noqa: SLF001
    path = jvm.org.apache.hadoop.fs.Path(location)
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(path, conf)
    return jvm, manager


def _write(jvm, manager, location: str, text: str, overwrite: bool) -> None:
    stream = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(location), overwrite)
    stream.write(text.encode())
    stream.close()


def _keys(settings, prefix_uri: str) -> list[str]:
    bucket, prefix = split_s3_uri(prefix_uri)
    listed = s3_client(settings).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"][len(prefix):] for obj in listed.get("Contents", []))


def test_checkpoint_entries_are_direct_puts_and_never_replaced(spark, settings):
    """Spark's offsets/N and commits/N (and Delta's N.crc) on s3a:// go through Lakeline's checkpoint manager: one
    PUT per entry, no temp file and rename, and a second writer of the same entry is refused atomically."""
    root = f"{settings.warehouse}/checkpoints/direct_{uuid.uuid4().hex[:8]}"
    jvm, manager = _checkpoint_manager(spark, root)
    assert manager.getClass().getName() == "io.lakeline.spark.S3DirectCheckpointFileManager"

    _write(jvm, manager, f"{root}/offsets/0", "v1\nfirst", overwrite=False)
    assert _keys(settings, f"{root}/offsets/") == ["0"]  # no .0.<uuid>.tmp left behind, nothing renamed
    with pytest.raises(Exception) as refused:
        _write(jvm, manager, f"{root}/offsets/0", "v1\nsecond", overwrite=False)
    assert "FileAlreadyExistsException" in str(refused.value)  # Spark's "concurrent update" contract
    assert _read(settings, f"{root}/offsets/0") == b"v1\nfirst"

    _write(jvm, manager, f"{root}/offsets/0", "v1\nreplaced", overwrite=True)
    assert _read(settings, f"{root}/offsets/0") == b"v1\nreplaced"

    cancelled = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(f"{root}/offsets/1"), False)
    cancelled.write(b"half")
    cancelled.cancel()
    assert _keys(settings, f"{root}/offsets/") == ["0"]  # a cancelled entry is never visible


def test_local_checkpoints_keep_sparks_rename_protocol(spark, tmp_path):
    jvm, manager = _checkpoint_manager(spark, f"file://{tmp_path}")
    _write(jvm, manager, f"file://{tmp_path}/offsets/0", "v1\nlocal", overwrite=False)
    assert (tmp_path / "offsets" / "0").read_text() == "v1\nlocal"
    with pytest.raises(Exception, match="FileAlreadyExistsException|already exists"):
        _write(jvm, manager, f"file://{tmp_path}/offsets/0", "v1\nagain", overwrite=False)


def test_a_delta_rs_rewrite_commits_beside_spark_with_a_checksum_spark_accepts(spark, settings):
    """The Spark-free rewrite of a partition (the compaction of the hot partition's bound) commits with delta-rs,
    which writes no N.crc; Spark's LogStore derives it at the first listing that shows the version (the counts and
    the file-size histogram equal delta-rs' own state at that version), and Spark's next commit derives its own
    checksum from it."""
    from deltalake import DeltaTable as RsTable

    from ingest.formats.delta import delta_rs_uri, delta_storage_options
    from ingest.formats.delta_rewrite import DeltaRsRewriter
    from ingest.formats.table_maintenance import Layout

    table = f"{settings.warehouse}/delta/rewrite_{uuid.uuid4().hex[:8]}"
    rows = lambda start, end: spark.range(start, end).selectExpr("id", "CAST(id % 2 AS STRING) AS p")  # noqa: E731
    for start in range(0, 60, 10):  # six commits of one small file per partition
        rows(start, start + 10).coalesce(1).write.format("delta").mode("append").partitionBy("p").save(table)
    before = spark.read.format("delta").load(table).where("p = '0'").count()

    rewriter = DeltaRsRewriter(table, settings)
    layout = Layout(64 * 1024 ** 2, 32 * 1024 ** 2)
    # Another compaction holding the partition keeps this one out (delta-rs would let both commit, duplicating
    # the rows): refused before anything is written.
    from ingest.adapters.object_store import S3Files
    from ingest.errors import CommitConflict
    from ingest.formats.rewrite_locks import PartitionLocks

    with PartitionLocks(S3Files(settings), table).holding(["p=0"]), \
            pytest.raises(CommitConflict, match="being rewritten by"):
        rewriter.rewrite_partitions(["p=0"], layout)
    assert not [k for k in _keys(settings, f"{table}/_delta_log/") if k.startswith("00000000000000000006")]
    # Spark's rewrite takes the same locks: a delta-rs commit after Spark's would not see the conflict either.
    from ingest.formats import format_for

    spark_side = format_for("delta").open(spark, table, None, [], "", settings).maintenance
    with PartitionLocks(S3Files(settings), table).holding(["p=1"]), \
            pytest.raises(CommitConflict, match="p=1 is being rewritten by"):
        spark_side.rewrite_partitions(["p=1"], layout)
    outcome = rewriter.rewrite_partitions(["p=0"], layout)
    assert (outcome.files_removed, outcome.files_added) == (6, 1)

    version = 6  # versions 0-5 are Spark's appends
    crc = f"{table}/_delta_log/{version:020d}.crc"
    assert f"{version:020d}.crc" not in _keys(settings, f"{table}/_delta_log/")  # delta-rs leaves none
    assert spark.read.format("delta").load(table).where("p = '0'").count() == before == 30  # lists the log
    checksum = json.loads(_read(settings, crc))
    state = RsTable(delta_rs_uri(table), version=version, storage_options=delta_storage_options(settings))
    sizes = state.get_add_actions(flatten=True).column("size_bytes").to_pylist()
    assert (checksum["numFiles"], checksum["tableSizeBytes"]) == (len(sizes), sum(sizes))
    assert len(sizes) == 7  # partition p=1's six files and p=0's one
    histogram = checksum["fileSizeHistogram"]
    assert (sum(histogram["fileCounts"]), sum(histogram["totalBytes"])) == (len(sizes), sum(sizes))

    rows(60, 70).coalesce(1).write.format("delta").mode("append").partitionBy("p").save(table)
    after = json.loads(_read(settings, f"{table}/_delta_log/{version + 1:020d}.crc"))
    assert after["numFiles"] == checksum["numFiles"] + 2  # one new file per partition, on top of the rewrite's
    assert spark.read.format("delta").load(table).count() == 70
