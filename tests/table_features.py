"""Tables carrying each feature of ingest.compatibility.FEATURES, made without Spark in milliseconds.

Delta: delta-rs writes the data, then a commit is appended the way Delta writes it: the protocol and metaData
actions (and, for a widened column, a data file of the wider type), copied from what delta-spark 4.4 writes for a
Lakeline table (generated partition column, writer features under writer version 7, `delta.typeChanges` on a
widened field). Iceberg: pyiceberg creates the table in a SQLite catalog and evolves it as Spark would.

One Iceberg table comes from Spark: pyiceberg alone cannot write a table partitioned by a time or bucket transform.

Each builder returns a Fixture: where the table is, and the column (and its values by event_id) a reader must
return for the table to count as read.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path


@dataclass
class Fixture:
    format: str
    location: str                  # a Delta table's folder, or an Iceberg table's identifier in `catalog_uri`
    column: str
    expected: dict[str, object]    # event_id -> the column's value (a nested field as "column.field")
    catalog_uri: str | None = None


BIG = 3_000_000_000
WHEN = datetime(2026, 11, 20, 10, 0, 0)


def _log(path: Path) -> Path:
    return path / "_delta_log"


def _metadata(path: Path) -> dict:
    meta = None
    for entry in sorted(_log(path).glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            meta = action.get("metaData", meta)
    return meta


def _commit(path: Path, *actions: dict, operation: str = "SET TBLPROPERTIES") -> None:
    version = max(int(p.stem) for p in _log(path).glob("*.json")) + 1
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": operation,
                           "engineInfo": "Apache-Spark/4.1.3 Delta-Lake/4.4.0"}}
    with open(_log(path) / f"{version:020d}.json", "x") as log:
        log.write("".join(json.dumps(a) + "\n" for a in (info, *actions)))


def _with_schema(meta: dict, change) -> dict:
    schema = json.loads(meta["schemaString"])
    change(schema["fields"])
    return {**meta, "schemaString": json.dumps(schema)}


def delta_writer_features(root: Path) -> Fixture:
    """A main table as Lakeline creates it: partitioned by a generated `event_date` column, writer features
    generatedColumns, invariants and appendOnly."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = root / "writer_features"
    data = pa.table({"event_id": ["e1", "e2"],
                     "event_time": pa.array([WHEN, WHEN.replace(day=21)], pa.timestamp("us", "UTC")),
                     "items": pa.array([1, 2], pa.int32()),
                     "event_date": pa.array([date(2026, 11, 20), date(2026, 11, 21)])})
    write_deltalake(str(path), data, partition_by=["event_date"])

    def generated(fields):
        for f in fields:
            if f["name"] == "event_date":
                f["metadata"] = {"delta.generationExpression": "CAST(`event_time` AS DATE)"}

    meta = _with_schema(_metadata(path), generated)
    meta["configuration"] = {**meta["configuration"], "delta.checkpointInterval": "1000"}
    _commit(path, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                                "writerFeatures": ["generatedColumns", "invariants", "appendOnly"]}},
            {"metaData": meta})
    return Fixture("delta", str(path), "event_date", {"e1": "2026-11-20", "e2": "2026-11-21"})


def delta_added_columns(root: Path) -> Fixture:
    """A nested column added after the first rows (older files lack it)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = root / "added_columns"
    write_deltalake(str(path), pa.table({"event_id": ["e1"], "items": pa.array([1], pa.int32())}))
    note = pa.struct([("text", pa.string())])
    write_deltalake(str(path), pa.table({"event_id": ["e2"], "items": pa.array([2], pa.int32()),
                                         "note": pa.array([{"text": "big"}], note)}),
                    mode="append", schema_mode="merge")
    return Fixture("delta", str(path), "note.text", {"e1": None, "e2": "big"})


def delta_timestamp_ntz(root: Path) -> Fixture:
    """A timestamp_ntz column (delta-rs, like Spark, puts timestampNtz in the protocol)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = root / "timestamp_ntz"
    write_deltalake(str(path), pa.table({"event_id": ["e1"], "local_time": pa.array([WHEN], pa.timestamp("us"))}))
    assert "timestampNtz" in (DeltaTable(str(path)).protocol().reader_features or [])
    return Fixture("delta", str(path), "local_time", {"e1": WHEN.isoformat()})


def delta_mixed_timestamps(root: Path) -> Fixture:
    """`event_time` as INT64 microseconds in one file (what Lakeline and delta-rs write) and as INT96 in another
    (Spark's default, which older Lakeline releases wrote)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    path = root / "mixed_timestamps"
    schema = pa.schema([("event_id", pa.string()), ("event_time", pa.timestamp("us", "UTC"))])
    write_deltalake(str(path), pa.table({"event_id": ["e1"], "event_time": [WHEN]}, schema))
    legacy = path / "part-00000-int96.snappy.parquet"
    pq.write_table(pa.table({"event_id": ["e2"], "event_time": [WHEN.replace(day=21)]}, schema), legacy,
                   use_deprecated_int96_timestamps=True)
    assert str(pq.read_schema(legacy).field("event_time").type) == "timestamp[ns]"  # INT96 on disk
    _commit(path, {"add": {"path": legacy.name, "partitionValues": {}, "size": legacy.stat().st_size,
                           "modificationTime": int(time.time() * 1000), "dataChange": True}}, operation="WRITE")
    return Fixture("delta", str(path), "event_time", {"e1": WHEN.isoformat(), "e2": WHEN.replace(day=21).isoformat()})


def delta_type_widening(root: Path) -> Fixture:
    """`items` written as int, widened to bigint as delta-spark does (reader and writer feature typeWidening,
    `delta.typeChanges` on the field), then a file of bigints holding a value past the int range."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    path = root / "type_widening"
    write_deltalake(str(path), pa.table({"event_id": ["e1"], "items": pa.array([2], pa.int32())}))

    def widened(fields):
        for f in fields:
            if f["name"] == "items":
                f["type"] = "long"
                f["metadata"] = {"delta.typeChanges": [{"toType": "long", "fromType": "integer"}]}

    meta = _with_schema(_metadata(path), widened)
    meta["configuration"] = {**meta["configuration"], "delta.enableTypeWidening": "true"}
    _commit(path, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                                "writerFeatures": ["typeWidening", "invariants", "appendOnly"]}},
            {"metaData": meta}, operation="CHANGE COLUMN")
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(pa.table({"event_id": ["e2"], "items": pa.array([BIG], pa.int64())}), path / name)
    stats = {"numRecords": 1, "minValues": {"event_id": "e2", "items": BIG}, "maxValues": {"event_id": "e2",
             "items": BIG}, "nullCount": {"event_id": 0, "items": 0}}
    _commit(path, {"add": {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size,
                           "modificationTime": int(time.time() * 1000), "dataChange": True,
                           "stats": json.dumps(stats)}}, operation="WRITE")
    return Fixture("delta", str(path), "items", {"e1": 2, "e2": BIG})


def delta_protocol_only(root: Path, feature: str) -> Path:
    """A table whose protocol lists a reader feature Lakeline never turns on (its data does not use it)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = root / f"protocol_{feature}"
    write_deltalake(str(path), pa.table({"event_id": ["e1"]}))
    _commit(path, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [feature],
                                "writerFeatures": [feature]}})
    return path


def _iceberg_catalog(root: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    uri = f"sqlite:///{root}/catalog.db"
    catalog = SqlCatalog("lakeline", uri=uri, warehouse=f"file://{root}/iceberg")
    if ("features",) not in catalog.list_namespaces():
        catalog.create_namespace("features")
    return catalog, uri


def _iceberg_table(root: Path, name: str, schema, rows, spec=None):
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    catalog, uri = _iceberg_catalog(root)
    table = catalog.create_table(f"features.{name}", schema, partition_spec=spec or UNPARTITIONED_PARTITION_SPEC,
                                 properties={"format-version": "2"})
    table.append(rows)
    return catalog, uri, table


def iceberg_format_v2(root: Path) -> Fixture:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, NestedField, StringType

    schema = Schema(NestedField(1, "event_id", StringType(), required=False),
                    NestedField(2, "amount", DoubleType(), required=False))
    _, uri, table = _iceberg_table(root, "format_v2", schema, pa.table({"event_id": ["e1"], "amount": [1.5]}))
    assert table.format_version == 2
    return Fixture("iceberg", "features.format_v2", "amount", {"e1": 1.5}, uri)


def iceberg_partition_transforms(root: Path, spark) -> Fixture:
    """Partitioned by days(event_time) and bucket(4, event_id), written by Spark (pyiceberg writes time and bucket
    transforms only with pyiceberg-core, which Lakeline does not install) into a Hadoop catalog of its own, then
    registered in the SQLite catalog the Spark-free readers open."""
    catalog, uri = _iceberg_catalog(root)
    warehouse = f"file://{root}/hadoop"
    spark.conf.set("spark.sql.catalog.lkfeatures", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lkfeatures.type", "hadoop")
    spark.conf.set("spark.sql.catalog.lkfeatures.warehouse", warehouse)
    spark.sql("CREATE TABLE lkfeatures.features.partitioned (event_id string, event_time timestamp, amount double) "
              "USING iceberg PARTITIONED BY (days(event_time), bucket(4, event_id)) "
              "TBLPROPERTIES ('format-version' = '2')")
    spark.sql("INSERT INTO lkfeatures.features.partitioned VALUES ('e1', timestamp'2026-11-20 10:00:00', 1.5), "
              "('e2', timestamp'2026-11-21 10:00:00', 2.5)")
    metadata = max((root / "hadoop" / "features" / "partitioned" / "metadata").glob("v*.metadata.json"),
                   key=lambda p: int(p.name[1:].split(".")[0]))
    catalog.register_table("features.partitioned", f"file://{metadata}")
    return Fixture("iceberg", "features.partitioned", "amount", {"e1": 1.5, "e2": 2.5}, uri)


def iceberg_added_columns(root: Path) -> Fixture:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, StructType

    schema = Schema(NestedField(1, "event_id", StringType(), required=False))
    _, uri, table = _iceberg_table(root, "added_columns", schema, pa.table({"event_id": ["e1"]}))
    with table.update_schema() as update:
        update.add_column("note", StructType(NestedField(10, "text", StringType(), required=False)))
    table.append(pa.table({"event_id": ["e2"], "note": pa.array([{"text": "big"}], pa.struct([("text",
                                                                                              pa.string())]))}))
    return Fixture("iceberg", "features.added_columns", "note.text", {"e1": None, "e2": "big"}, uri)


def iceberg_timestamp_ntz(root: Path) -> Fixture:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, TimestampType

    schema = Schema(NestedField(1, "event_id", StringType(), required=False),
                    NestedField(2, "local_time", TimestampType(), required=False))
    rows = pa.table({"event_id": ["e1"], "local_time": pa.array([WHEN], pa.timestamp("us"))})
    _, uri, _ = _iceberg_table(root, "timestamp_ntz", schema, rows)
    return Fixture("iceberg", "features.timestamp_ntz", "local_time", {"e1": WHEN.isoformat()}, uri)


def iceberg_type_promotion(root: Path) -> Fixture:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    schema = Schema(NestedField(1, "event_id", StringType(), required=False),
                    NestedField(2, "items", IntegerType(), required=False))
    _, uri, table = _iceberg_table(root, "type_promotion", schema,
                                   pa.table({"event_id": ["e1"], "items": pa.array([2], pa.int32())}))
    with table.update_schema() as update:
        update.update_column("items", LongType())
    table.append(pa.table({"event_id": ["e2"], "items": pa.array([BIG], pa.int64())}))
    return Fixture("iceberg", "features.type_promotion", "items", {"e1": 2, "e2": BIG}, uri)


NEEDS_SPARK = {iceberg_partition_transforms}

# One builder per row of ingest.compatibility.FEATURES (tests/unit/test_compatibility.py checks they match).
BUILDERS = {
    ("delta", "appendOnly, invariants (writer features)"): delta_writer_features,
    ("delta", "generatedColumns (writer feature)"): delta_writer_features,
    ("delta", "added columns"): delta_added_columns,
    ("delta", "timestampNtz"): delta_timestamp_ntz,
    ("delta", "INT96 and INT64 timestamps in one table"): delta_mixed_timestamps,
    ("delta", "typeWidening"): delta_type_widening,
    ("iceberg", "format version 2"): iceberg_format_v2,
    ("iceberg", "partition transforms"): iceberg_partition_transforms,
    ("iceberg", "added columns"): iceberg_added_columns,
    ("iceberg", "timestamp without time zone"): iceberg_timestamp_ntz,
    ("iceberg", "type promotion"): iceberg_type_promotion,
}
