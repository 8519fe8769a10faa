"""The Spark-free Delta rewrite's checksum: derived exactly from the version before's and the commit's actions,
or not at all."""

from __future__ import annotations

from ingest.formats.delta_rewrite import derived_checksum, partition_filters

PREVIOUS = {"txnId": "t-41", "tableSizeBytes": 10_000, "numFiles": 40, "numMetadata": 1, "numProtocol": 1,
            "setTransactions": [{"appId": "orders", "version": 41}], "domainMetadata": [],
            "metadata": {"id": "m", "partitionColumns": ["event_date"]},
            "protocol": {"minReaderVersion": 1, "minWriterVersion": 7},
            "histogramOpt": {"sortedBinBoundaries": [0], "fileCounts": [40], "totalBytes": [10_000]},
            "allFiles": [{"path": "a.parquet"}]}


def _optimize(removed: list[int], added: list[int], **info) -> list[dict]:
    return ([{"commitInfo": {"operation": "OPTIMIZE", **info}}]
            + [{"remove": {"path": f"r{i}.parquet", "size": size, "dataChange": False}}
               for i, size in enumerate(removed)]
            + [{"add": {"path": f"a{i}.parquet", "size": size, "dataChange": False}} for i, size in enumerate(added)])


def test_an_optimize_checksum_moves_the_files_and_bytes_and_keeps_what_it_cannot_change():
    checksum = derived_checksum(PREVIOUS, _optimize([100] * 30, [2_900]))
    assert (checksum["numFiles"], checksum["tableSizeBytes"]) == (40 - 30 + 1, 10_000 - 3_000 + 2_900)
    for kept in ("metadata", "protocol", "setTransactions", "domainMetadata", "numMetadata", "numProtocol"):
        assert checksum[kept] == PREVIOUS[kept]
    # What the actions do not tell (the file-size histogram, the file list) is left out, never carried stale.
    assert "histogramOpt" not in checksum and "allFiles" not in checksum
    assert checksum["txnId"] != PREVIOUS["txnId"]


def test_no_checksum_where_it_could_not_be_exact():
    assert derived_checksum(PREVIOUS, _optimize([100], [90]) + [{"metaData": {"id": "m2"}}]) is None
    assert derived_checksum(PREVIOUS, _optimize([100], [90]) + [{"txn": {"appId": "x", "version": 1}}]) is None
    no_size = _optimize([100], [90])
    del no_size[1]["remove"]["size"]
    assert derived_checksum(PREVIOUS, no_size) is None
    assert derived_checksum({k: v for k, v in PREVIOUS.items() if k != "numFiles"}, _optimize([1], [1])) is None
    with_dv = _optimize([100], [90])
    with_dv[1]["remove"]["deletionVector"] = {"storageType": "u"}
    assert derived_checksum(PREVIOUS, with_dv) is None


def test_in_commit_timestamps_come_from_the_commit_itself():
    previous = {**PREVIOUS, "inCommitTimestampOpt": 1_000}
    assert derived_checksum(previous, _optimize([1], [1], inCommitTimestamp=2_000))["inCommitTimestampOpt"] == 2_000
    assert derived_checksum(previous, _optimize([1], [1])) is None


def test_partition_filters_select_one_partition_key():
    assert partition_filters("event_date=2026-11-28/bucket=3") == [("event_date", "=", "2026-11-28"),
                                                                 ("bucket", "=", "3")]
    assert partition_filters("") == []
