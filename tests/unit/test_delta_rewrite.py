"""The Spark-free Delta rewrite's partition filters. (Its version's checksum is derived by the stream's LogStore:
jvm/src/test/java/io/lakeline/delta/S3ConditionalPutLogStoreTest.java.)"""

from __future__ import annotations

from ingest.formats.delta_rewrite import partition_filters


def test_partition_filters_select_one_partition_key():
    assert partition_filters("event_date=2026-11-28/bucket=3") == [("event_date", "=", "2026-11-28"),
                                                                 ("bucket", "=", "3")]
    assert partition_filters("") == []
