"""Partition transforms end to end, both formats: nested webhook events through the real broker into a table
partitioned by hour(occurred_at), identity(customer.tier), bucket(2)(customer.id) and truncate(3)(event_id)
(Iceberg hidden partitioning, Delta generated columns). Exact; health names each partition by its tuple, the same
way on both formats; the policy compacts one hour's partitions newest first and leaves the rest; the answer
through Spark and DuckDB does not change; a YAML that re-partitions the table is refused before anything is
written. Costs about 25 s per format."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from ingest.analyst import duckdb_query
from ingest.config import PipelineConfig, load_pipeline
from ingest.errors import ConfigError
from ingest.formats import tables_for
from ingest.partitioning import NULL_VALUE, parse_key
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from maintenance.compaction import compact
from maintenance.health import collect_health
from maintenance.policy import load_table

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITION = [{"source": "occurred_at", "transform": "hour"},
             {"source": "customer.tier", "transform": "identity"},
             {"source": "customer.id", "transform": "bucket(2)"},
             {"source": "event_id", "transform": "truncate(3)"}]
COLUMNS = ["occurred_at_hour", "customer_tier", "customer_id_bucket", "event_id_trunc"]
HOURS = ["2026-11-20-10", "2026-11-20-11", "2026-11-20-12"]


def _setup(conf_dir: Path, fmt: str) -> tuple[PipelineConfig, Path]:
    data = yaml.safe_load((REPO / "conf" / "examples" / f"webhooks_{fmt}.yaml").read_text())
    name = f"t_parts_{fmt}_{random.getrandbits(32):08x}"
    data["pipeline"] = name
    data["source"].update(topics=[name], max_offsets_per_trigger=60)
    data["sink"].update(table=name, namespace="tests", partition=PARTITION)
    path = conf_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    tables = conf_dir / "tables"
    tables.mkdir(exist_ok=True)
    (tables / f"{name}.yaml").write_text(yaml.safe_dump({
        "table": name, "pipeline": f"../{path.name}",
        "compaction": {"min_small_files": 2, "small_file_ratio": 0.3, "hot_partition_window": "1h"}}))
    return load_pipeline(path), path


def _events(path: Path, count: int) -> None:
    """`count` events over three hours, tier gold or none, nine customers, ids starting aaa or bbb."""
    rng = random.Random(7)
    with path.open("w") as out:
        for i in range(count):
            customer = {"id": f"c-{rng.randint(1, 9)}"} | ({"tier": "gold"} if i % 2 else {})
            prefix = "aaa" if (i // 6) % 2 else "bbb"
            out.write(json.dumps({"event-id": f"{prefix}-{i:04d}", "type": "customer.updated",
                                  "@timestamp": f"{HOURS[i % 3][:10]}T{HOURS[i % 3][11:]}:{i % 60:02d}:00Z",
                                  "customer": customer}) + "\n")


def _answer(spark, config, settings) -> list[tuple]:
    frame = tables_for(spark, config, settings)[0].read()
    frame.createOrReplaceTempView("parts")
    return [tuple(r) for r in spark.sql(
        "SELECT date_format(occurred_at, 'yyyy-MM-dd-HH') AS h, customer.tier, substring(event_id, 1, 3), count(*), "
        "sum(hash(event_id, _offset)) FROM parts GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").collect()]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_every_partition_tuple_lands_measures_and_compacts_on_its_own(fmt, conf_dir, settings, spark, tmp_path):
    config, path = _setup(conf_dir, fmt)
    events = tmp_path / "events.jsonl"
    _events(events, 240)
    assert produce(config, settings, 0, from_file=events).count == 240
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    report = reconcile(config, settings, spark)
    assert report.exact and report.rows == 240 and report.dead_letters == 0

    table = load_table(config.pipeline, path.parent)
    health = collect_health(spark, table, settings)
    keys = [parse_key(p.partition) for p in health.partitions]
    assert health.partition_columns == COLUMNS and health.time_columns == ["occurred_at_hour"]
    assert all([column for column, _ in key] == COLUMNS for key in keys)
    # The same partition values on both formats (bucket numbers are each format's hash: only their range is).
    assert {(k[0][1], k[1][1], k[3][1]) for k in keys} == {(h, t, p) for h in HOURS for t in ("gold", None)
                                                           for p in ("aaa", "bbb")}
    assert {k[2][1] for k in keys} <= {"0", "1"}
    before = _answer(spark, config, settings)
    assert sum(row[3] for row in before) == 240 and any(row[1] is None for row in before)

    # Newest first, one hour at a time: a filter naming only the hour takes every partition of that hour.
    latest = f"{COLUMNS[0]}={HOURS[2]}"
    several = {p.partition for p in health.partitions if p.partition.startswith(latest + "/") and p.files >= 2}
    assert several  # four batches over 24 partitions: some of the newest hour's have more than one file
    dry = compact(spark, table, settings, datetime.now(UTC), dry_run=True, include_hot=True)
    assert dry.partitions[0].partition.startswith(latest + "/")
    done = compact(spark, table, settings, datetime.now(UTC), partitions=[latest], include_hot=True)
    compacted = {p.partition for p in done.partitions if p.status == "compacted"}
    assert compacted == several
    assert len(done.commits) == 1  # several partitions of bucket and truncate transforms, chosen in one commit
    after = {p.partition: p.files for p in collect_health(spark, table, settings).partitions}
    assert all(after[key] == 1 for key in compacted)
    untouched = {p.partition: p.files for p in health.partitions if p.partition not in compacted}
    assert {key: after[key] for key in untouched} == untouched
    assert _answer(spark, config, settings) == before
    analyst = duckdb_query(config, settings, "SELECT count(*), count(DISTINCT event_id), "
                                             "count(*) FILTER (WHERE customer.tier IS NULL) FROM t")[0]
    assert analyst == (240, 240, 120)
    assert any(f"/{COLUMNS[1]}={NULL_VALUE}/" in key for key in after)  # a null tier is a partition too

    # Re-partitioning is refused before anything is written, naming both partitionings.
    other = config.model_copy(update={"sink": config.sink.model_copy(update={"partition": [
        config.sink.partition[0].model_copy(update={"transform": "day", "column": None})]})})
    with pytest.raises(ConfigError, match=r"is partitioned by \[occurred_at_hour.*declares \[occurred_at_day"):
        tables_for(spark, other, settings)[0].ensure()


def test_iceberg_partition_values_read_as_iceberg_computes_them(spark):
    """Iceberg's own transform functions give the ordinals `stored_value` computes from the shown text."""
    from ingest.formats.iceberg_maintenance import shown_value, stored_value
    from ingest.partitioning import PartitionField, Transform
    from pyspark.sql.types import TimestampType

    moment = "TIMESTAMP '2026-11-20 13:45:00'"
    row = spark.sql(f"SELECT lakeline.system.years({moment}), lakeline.system.months({moment}), "
                    f"CAST(lakeline.system.days({moment}) AS STRING), lakeline.system.hours({moment})").first()
    for index, (kind, shown) in enumerate([("year", "2026"), ("month", "2026-11"), ("day", "2026-11-20"),
                                           ("hour", "2026-11-20-13")]):
        field = PartitionField("at", Transform(kind), f"at_{kind}", TimestampType())
        assert shown_value(field, str(row[index])) == shown
        if kind != "day":
            assert stored_value(field, shown) == row[index]


def test_delta_table_of_an_earlier_release_keeps_its_plain_partition_column(conf_dir, settings, spark):
    """A Delta table made before generated columns holds `event_date` as a plain partition column: the pipeline
    (the single-mapping form of earlier releases) fills it with the value the generated column would have. About
    15 s."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import DateType, StructField, StructType

    from ingest.transforms import table_schema
    from tests.helpers import pipeline_dict, write_pipeline

    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta")))
    assert [(f.column, str(f.transform)) for f in config.partitioning] == [("event_date", "day")]
    location = config.delta_location(settings)
    legacy = StructType([*table_schema(config).fields, StructField("event_date", DateType(), True)])
    DeltaTable.createIfNotExists(spark).location(location).addColumns(legacy).partitionedBy("event_date").execute()
    produce(config, settings, 300, seed=9)
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    assert reconcile(config, settings, spark).exact
    wrong = spark.read.format("delta").load(location).where(
        "event_date IS NULL OR event_date != CAST(event_time AS DATE)").count()
    assert wrong == 0
