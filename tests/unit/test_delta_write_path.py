"""The Delta write path's choices that cost CPU without protecting anything: the txn check on a table that cannot
hold a replay, statistics on Lakeline's own columns."""

from pyspark.sql.types import ArrayType, BooleanType, LongType, MapType, StringType, StructField, StructType

from ingest.batch import BatchCommitter, TableEnds
from ingest.commits import CommitRecord
from ingest.config import PipelineConfig
from ingest.formats.delta import extended_statistics_columns, statistics_columns
from ingest.transforms import dead_letter_schema, table_schema

T = "orders"


class Table:
    """Records whether each append asked the table for its replay check (Delta's txnAppId/txnVersion)."""

    def __init__(self):
        self.checked: list[bool] = []

    def append(self, frame, record, may_be_replay=True):
        self.checked.append(may_be_replay)


def record(batch: int) -> CommitRecord:
    return CommitRecord("p", "L1", batch, {}, {(T, 0): batch * 10}, 10, 0)


def committer(ends: TableEnds) -> tuple[BatchCommitter, Table, Table]:
    main, dead = Table(), Table()
    return BatchCommitter(None, None, None, main, dead, "L1", ends, events=None), main, dead


def test_a_table_without_a_commit_of_the_pipeline_is_not_asked_for_the_replay_check():
    batches, main, dead = committer(TableEnds({}, {}, None))
    batches.commit(dead, None, record(0))
    batches.commit(main, None, record(0))
    assert (main.checked, dead.checked) == ([False], [False])
    # Add mode restarts the query in the same process: its first batch may replay one these tables now hold.
    batches.new_start()
    batches.commit(main, None, record(1))
    batches.commit(dead, None, record(1))
    assert (main.checked, dead.checked) == ([False, True], [False, True])


def test_a_table_holding_a_commit_is_asked_on_the_first_batch_of_a_start_only():
    last = record(4)
    batches, main, dead = committer(TableEnds(dict(last.end), {}, last))
    batches.commit(main, None, record(5))
    batches.commit(dead, None, record(5))  # the dead-letter table holds nothing of the pipeline
    batches.first_batch_of_start = False
    batches.commit(main, None, record(6))
    assert (main.checked, dead.checked) == ([True, False], [False])


def pipeline(**source) -> dict:
    return {"pipeline": "p", "source": {"kind": "kafka", "topics": [T], **source},
            "schema": {"fields": [{"name": "event_id", "type": "string"}, {"name": "event_time", "type": "timestamp"},
                                  {"name": "detail", "type": "struct<code:int,text:string>"}]},
            "sink": {"format": "delta", "table": T}}


def test_statistics_are_collected_on_the_declared_fields_only():
    config = PipelineConfig.model_validate(pipeline(include_key=True, include_headers=True))
    assert statistics_columns(table_schema(config)) == "event_id,event_time,detail.code,detail.text"
    assert {"_rescued_data", "_key", "_headers", "_offset", "_ingested_at"} <= set(table_schema(config).fieldNames())


def test_a_table_without_record_fields_keeps_deltas_default():
    assert statistics_columns(dead_letter_schema()) is None
    assert statistics_columns(StructType([StructField("_rescued_data", StringType())])) is None


def test_statistics_name_only_leaves_delta_can_skip_on():
    """Delta refuses the property when it names an array, a map or a boolean, even inside a struct
    (DELTA_COLUMN_DATA_SKIPPING_NOT_SUPPORTED_TYPE): such a declared field is left out, a struct by its leaves."""
    config = PipelineConfig.model_validate(pipeline() | {"schema": {"fields": [
        {"name": "id", "type": "string"}, {"name": "tags", "type": "array<string>"},
        {"name": "ok", "type": "boolean"}, {"name": "attrs", "type": "map<string,string>"},
        {"name": "repo", "type": "struct<stars:bigint,fork:boolean,topics:array<string>,`a-b`:string>"}]}})
    assert statistics_columns(table_schema(config)) == "id,repo.stars,repo.`a-b`"


def test_evolved_fields_join_the_statistics_columns_when_delta_can_skip_on_them():
    schema = StructType([
        StructField("id", StringType()),
        StructField("repo", StructType([StructField("stars", LongType()), StructField("size", LongType())])),
        StructField("_rescued_data", StringType()), StructField("_offset", LongType()),
        StructField("labels", ArrayType(StructType([StructField("n", LongType())]))),
        StructField("coupon", StringType()), StructField("flag", BooleanType()),
        StructField("meta", StructType([StructField("k", StringType()), StructField("m", MapType(StringType(),
                                                                                                   StringType()))]))])
    added = [("labels",), ("coupon",), ("flag",), ("meta",), ("repo", "size"), ("labels", "element", "n")]
    assert extended_statistics_columns("id,repo.stars", schema, added) == "id,repo.stars,coupon,meta.k,repo.size"
    # Nothing new: the value is unchanged, so no property commit follows.
    assert extended_statistics_columns("id,coupon", schema, [("coupon",), ("labels",)]) == "id,coupon"
    # A field added inside a column that is not listed (e.g. Lakeline's own) stays out.
    assert extended_statistics_columns("id", schema, [("repo", "size")]) == "id"
