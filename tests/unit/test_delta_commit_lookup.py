"""A Delta table's newest commit record is found by reading the newest commit files back to it: as many as there
are commits of others since the pipeline's last one, whatever the log's length, and no Spark job."""

from __future__ import annotations

import json

import pytest

import ingest.formats.delta as delta
from ingest.commits import CommitRecord
from ingest.formats.delta import DeltaLakeTable

LOCATION = "s3a://bucket/orders"


class FakeLog:
    """A Delta log of `versions` commits: the pipeline's, except the newest `others` (compaction, VACUUM)."""

    def __init__(self, versions: int, others: int):
        self.version = versions - 1
        self.others = others
        self.reads: list[int] = []

    def record(self, version: int) -> CommitRecord:
        return CommitRecord("orders", "lineage", version, {("t", 0): version}, {("t", 0): version + 1}, 1, 0)

    def text(self, version: int) -> str:
        pipeline = version <= self.version - self.others
        info = {"timestamp": version, "operation": "WRITE" if pipeline else "OPTIMIZE"}
        if pipeline:
            info["userMetadata"] = self.record(version).to_json()
        return json.dumps({"commitInfo": info}) + "\n" + json.dumps({"add": {"path": f"{version}.parquet"}})


@pytest.fixture
def table(monkeypatch):
    def make(log: FakeLog) -> DeltaLakeTable:
        class FakeFS:
            def __init__(self, spark):
                pass

            def exists(self, path: str) -> bool:
                return int(path.rsplit("/", 1)[1][:20]) <= log.version

            def read_text(self, path: str) -> str:
                version = int(path.rsplit("/", 1)[1][:20])
                log.reads.append(version)
                return log.text(version)

        class Snapshot:
            def version(self) -> int:
                return log.version

        monkeypatch.setattr(delta, "HadoopFS", FakeFS)
        lake = DeltaLakeTable.__new__(DeltaLakeTable)
        lake.spark, lake.location, lake.pipeline = None, LOCATION, "orders"
        lake.snapshot = Snapshot
        lake._records = lambda limit: pytest.fail("history() ran: Spark jobs over the log")  # noqa: SLF001
        return lake

    return make


@pytest.mark.parametrize("versions", [10, 3000, 100_000])
def test_reads_one_commit_file_when_the_newest_is_the_pipelines(table, versions):
    log = FakeLog(versions, others=0)
    assert table(log).last_commit() == log.record(versions - 1)
    assert log.reads == [versions - 1]


@pytest.mark.parametrize("versions", [3000, 100_000])
def test_reads_back_past_maintenance_commits_without_spark_jobs(table, versions):
    # a compaction of 24 partitions (one commit each) and a VACUUM (two) since the pipeline's last commit
    log = FakeLog(versions, others=26)
    newest = versions - 1 - 26
    assert table(log).last_commit() == log.record(newest)
    assert log.reads == list(range(versions - 1, newest - 1, -1))  # each file once, newest first, stopping there
