"""Checkpoint backup / verify / restore on a local directory that mimics a Spark checkpoint."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, UTC

import pytest

from ingest.commits import CommitRecord
from ingest.errors import BackupError, PipelineRunning
from ingest.checkpoint import HEARTBEAT_FILE
from maintenance.checkpoints import backup, list_backups, load_manifest, restore, verify
from tests.helpers import LocalFS

T = "orders"


def _offsets(end: int) -> str:
    return 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"orders":{"0":%d}}\n' % end


@pytest.fixture(params=["local", "s3"])
def checkpoint(request, tmp_path):
    """The same checkpoint on the local disk (LocalFS) and in S3 through boto3 (S3Files, what backup and verify
    use beside the stream), moto in process."""
    if request.param == "local":
        fs, base = LocalFS(), str(tmp_path)
    else:
        fs, base = _s3_files(request), "s3a://lakeline-test/warehouse"
    root = f"{base}/ckpt"
    fs.write_text(f"{root}/metadata", '{"id":"q1"}')
    fs.write_text(f"{root}/_lakeline/lineage", "L1\n")
    fs.write_text(f"{root}/sources/0/0", "v1\n")
    for batch in range(4):  # batch 3 planned, not committed
        fs.write_text(f"{root}/offsets/{batch}", _offsets((batch + 1) * 100))
    for batch in range(3):
        fs.write_text(f"{root}/commits/{batch}", 'v1\n{"nextBatchWatermarkMs":0}')
    fs.write_text(f"{root}/offsets/.4.abc.tmp", "partial")
    fs.write_text(f"{root}/{HEARTBEAT_FILE}", json.dumps({"at": datetime.now(UTC).isoformat()}))
    return fs, root, f"{base}/backups"


def _s3_files(request):
    import boto3
    from moto import mock_aws

    from ingest.adapters.object_store import S3Files

    mock = mock_aws()
    mock.start()
    request.addfinalizer(mock.stop)
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    client.create_bucket(Bucket="lakeline-test")
    return S3Files(None, client=client)


def record(end: int) -> CommitRecord:
    return CommitRecord("p", "L1", 2, {}, {(T, 0): end}, 0, 0)


def test_backup_holds_exactly_the_committed_batches(checkpoint):
    fs, root, backups = checkpoint
    ticks: list[tuple[int, int]] = []
    manifest = backup(fs, root, backups, "p", record(300), keep=3, on_progress=lambda *tick: ticks.append(tick))
    paths = {f["path"] for f in manifest.files}
    assert ticks == [(n, len(manifest.files)) for n in range(1, len(manifest.files) + 1)]
    assert manifest.backup_id.startswith("000000000002-") and manifest.last_committed_batch == 2
    assert {"offsets/0", "offsets/2", "commits/2", "metadata", "sources/0/0", "_lakeline/lineage"} <= paths
    assert "offsets/3" not in paths and "offsets/.4.abc.tmp" not in paths and HEARTBEAT_FILE not in paths
    assert manifest.lineage == "L1" and manifest.table_end == {"orders": {"0": 300}}
    assert all(len(f["sha256"]) == 64 for f in manifest.files)


def test_backups_are_pruned_to_keep(checkpoint):
    fs, root, backups = checkpoint
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for minute in range(4):
        backup(fs, root, backups, "p", None, keep=2, now=start + timedelta(minutes=minute))
    kept = list_backups(fs, backups)
    assert len(kept) == 2 and kept[-1].endswith("T000300Z")


def test_a_backup_without_manifest_is_not_listed(checkpoint):
    fs, root, backups = checkpoint
    fs.write_text(f"{backups}/000000000009-20260101T000000Z/offsets/9", _offsets(1))
    assert list_backups(fs, backups) == []
    with pytest.raises(BackupError, match="no complete backup"):
        load_manifest(fs, backups, None)


def test_verify_passes_and_says_the_backup_agrees_with_the_table(checkpoint):
    fs, root, backups = checkpoint
    backup(fs, root, backups, "p", None, keep=3)
    report = verify(fs, backups, None, record(300))
    assert report.ok and report.problems == [] and "resume" in report.consistency
    behind = verify(fs, backups, None, record(900))
    assert behind.ok and "rebuild" in behind.consistency and "behind" in behind.consistency


def test_verify_names_corrupt_and_missing_files(checkpoint):
    fs, root, backups = checkpoint
    manifest = backup(fs, root, backups, "p", None, keep=3)
    base = f"{backups}/{manifest.backup_id}"
    fs.write_text(f"{base}/offsets/1", "garbage")
    fs.delete(f"{base}/commits/2")
    report = verify(fs, backups, None, None)
    assert not report.ok
    assert any(p.endswith("offsets/1: checksum mismatch (size 7, manifest 68)") for p in report.problems)
    assert any(p.endswith("commits/2: missing") for p in report.problems)


def test_backup_before_any_commit_is_refused(tmp_path):
    fs = LocalFS()
    fs.write_text(f"{tmp_path}/c/offsets/0", _offsets(5))
    with pytest.raises(BackupError, match="no committed batch yet"):
        backup(fs, f"{tmp_path}/c", f"{tmp_path}/b", "p", None, keep=1)


def test_restore_refuses_while_running_then_restores_and_keeps_the_old_checkpoint(checkpoint):
    fs, root, backups = checkpoint
    manifest = backup(fs, root, backups, "p", None, keep=3)
    fs.write_text(f"{root}/offsets/4", _offsets(500))
    with pytest.raises(PipelineRunning, match="looks alive"):
        restore(fs, backups, None, root, stale_after=60)
    restore(fs, backups, manifest.backup_id, root, stale_after=60, force=True)
    assert fs.list_names(f"{root}/offsets") == ["0", "1", "2"]
    assert fs.read_text(f"{root}/_lakeline/lineage") == "L1\n"
    parent = root.rsplit("/", 1)[0]
    aside = [name for name in fs.list_names(parent) if name.startswith("ckpt.replaced-")]
    assert len(aside) == 1 and fs.exists(f"{parent}/{aside[0]}/offsets/4")


def test_restore_is_allowed_once_the_heartbeat_is_stale(checkpoint):
    fs, root, backups = checkpoint
    backup(fs, root, backups, "p", None, keep=3)
    old = datetime.now(UTC) - timedelta(minutes=10)
    fs.write_text(f"{root}/{HEARTBEAT_FILE}", json.dumps({"at": old.isoformat()}))
    restore(fs, backups, None, root, stale_after=60)
    assert fs.exists(f"{root}/commits/2")


def test_restore_refuses_a_corrupt_backup(checkpoint):
    fs, root, backups = checkpoint
    manifest = backup(fs, root, backups, "p", None, keep=3)
    fs.write_text(f"{backups}/{manifest.backup_id}/metadata", "tampered")
    with pytest.raises(BackupError, match="failed verification"):
        restore(fs, backups, None, root, stale_after=0, force=True)
    assert fs.exists(f"{root}/offsets/3"), "the live checkpoint must be untouched when the backup is bad"


def test_s3_files_treat_s3a_folder_markers_as_folders_and_missing_files_as_missing(request):
    fs = _s3_files(request)
    fs.s3.put_object(Bucket="lakeline-test", Key="c/offsets/", Body=b"")  # S3A's marker of an empty folder
    fs.write_text("s3a://lakeline-test/c/offsets/0", "v1")
    fs.write_text("s3a://lakeline-test/c/metadata", "{}")
    assert fs.list_names("s3a://lakeline-test/c") == ["metadata", "offsets"]
    assert fs.list_names("s3a://lakeline-test/c/offsets") == ["0"]
    assert fs.list_files("s3a://lakeline-test/c") == ["metadata", "offsets/0"]
    assert fs.exists("s3a://lakeline-test/c/offsets") and fs.exists("s3a://lakeline-test/c/metadata")
    assert not fs.exists("s3a://lakeline-test/c/commits") and fs.list_names("s3a://lakeline-test/c/commits") == []
    with pytest.raises(FileNotFoundError):
        fs.read_bytes("s3a://lakeline-test/c/commits/0")
    fs.delete("s3a://lakeline-test/c")
    assert fs.s3.list_objects_v2(Bucket="lakeline-test").get("KeyCount") == 0
