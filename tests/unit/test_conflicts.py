"""Pure parts of type-conflict rescue: the batch's cover folded from its (partition, conflict list) groups
(ingest.batch._fold), with positions and counts per partition exactly as an ungrouped aggregation gives them and
the rescued conflicts per field; add mode's additions never taking a conflict's path."""

from __future__ import annotations

import json

from pyspark.sql import Row

from ingest.batch import _conflict_counts, _fold, _reasons
from ingest.transforms import DEAD_LETTER_REASONS


def _group(topic, part, conflicts, first, last, rows, dead, rescued, malformed=0):
    reasons = {f"dead_{reason}": malformed if reason == "malformed_json" else 0 for reason in DEAD_LETTER_REASONS}
    return Row(_topic=topic, _kafka_partition=part, _conflicts=conflicts, first=first, last=last, rows=rows,
               dead=dead, rescued=rescued, **reasons)


def test_groups_fold_into_one_row_per_partition_with_conflicts_per_field():
    cover = _fold([
        _group("t", 0, None, 10, 90, 70, 3, 5, malformed=3),
        _group("t", 0, ["installation.created_at"], 12, 95, 6, 0, 1),
        _group("t", 0, ["installation.created_at", "items[].qty"], 40, 41, 2, 0, 0),
        _group("t", 1, None, 0, 9, 10, 0, 0),
        _group("t", 1, ["items[].qty"], 4, 4, 1, 0, 0),
    ])
    by_part = {(r[0], r[1]): r for r in cover}
    assert set(by_part) == {("t", 0), ("t", 1)}
    zero = by_part[("t", 0)]
    assert (zero["first"], zero["last"], zero["rows"], zero["dead"], zero["rescued"]) == (10, 95, 78, 3, 6)
    assert zero["conflicts"] == {"installation.created_at": 8, "items[].qty": 2}
    assert by_part[("t", 1)]["conflicts"] == {"items[].qty": 1}
    assert _conflict_counts(cover) == {"installation.created_at": 8, "items[].qty": 3}
    assert _reasons(cover) == {"malformed_json": 3}


def test_a_batch_without_conflicts_counts_none():
    cover = _fold([_group("t", 0, None, 0, 4, 5, 0, 0)])
    assert _conflict_counts(cover) == {} and cover[0]["rows"] == 5 and cover[0]["conflicts"] == {}


def test_add_mode_never_makes_a_rescued_conflict_a_column():
    """Every path the decoder rescues a conflict under names a column the table has (or an element or a map value
    of one): none is an addition, whatever its value, so a conflict never adds a column or a second type."""
    from pyspark.sql.types import (ArrayType, LongType, MapType, StringType, StructField, StructType,
                                   TimestampType)

    from ingest.evolution import additions

    table = StructType([
        StructField("items", LongType()),
        StructField("installation", StructType([StructField("created_at", TimestampType())])),
        StructField("labels", ArrayType(StructType([StructField("n", LongType())]))),
        StructField("tags", ArrayType(LongType())),
        StructField("attrs", MapType(StringType(), LongType())),
    ])
    conflicts = json.dumps({"items": "two", "installation.created_at": 1700000000, "labels[1].n": "two",
                            "tags[0]": {"a": 1}, "attrs.k": "v", "installation": "x"})
    assert additions([conflicts], table) == []
    added = additions([conflicts, '{"labels[0].m": 1}'], table)
    assert [c.describe() for c in added] == ["add labels.element.m bigint"]
