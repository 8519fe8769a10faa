"""The reading commands' answers, pure or on local folders (no Spark, no stack; about 2 s): records rendered as rows
a person reads (times ISO-8601, long payloads cut with a marker) or as JSON; a table the pipeline has not created
yet found without Spark and named in one line; a never-run pipeline's freshness."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from ingest.config import load_pipeline
from ingest.errors import ExitCode, TableNotFound
from ingest.replay import ReplayReport
from ingest.settings import Settings
from lakeline import render
from lakeline.output import Output
from maintenance.freshness import evaluate
from maintenance.presence import require_tables, says_not_found, spark_missing_tables, table_exists
from tests.helpers import pipeline_dict, write_pipeline

WHEN = datetime(2026, 11, 24, 10, 0, 5, 123456, tzinfo=UTC)
NESTED = json.dumps({"event_id": "e1", "customer": {"id": "c1", "address": {"city": "Lyon", "lines": ["a", "b"]}},
                     "items": [{"sku": "s" * 40, "qty": 1}]}, indent=2)


def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _letter(offset: int, raw: str = NESTED) -> dict:
    return {"_topic": "orders", "_kafka_partition": 0, "_offset": offset, "_kafka_timestamp": WHEN,
            "_error": "type_mismatch", "_error_detail": "amount: expected double, got 'x'", "_ingested_at": WHEN,
            "raw": raw}


def test_dead_letters_print_as_rows_with_iso_times_and_long_payloads_cut_with_a_marker():
    shown = _text(render.dead_letters([_letter(7), _letter(8, "short, not json\nsecond line")]))
    header, first, second = shown.splitlines()[:3]
    assert header.split() == ["topic", "partition", "offset", "ingested_at", "reason", "detail", "raw"]
    assert "2026-11-24T10:00:05+00:00" in first and "datetime.datetime" not in shown
    compact = json.dumps(json.loads(NESTED), separators=(",", ":"))
    assert compact[:render.RAW_WIDTH] in first and f"… +{len(compact) - render.RAW_WIDTH:,} chars" in first
    assert "short, not json second line" in second  # one row per record, whatever the payload holds
    assert "cut at 60 characters" in shown
    assert _text(render.dead_letters([])).strip() == "no dead letters waiting"


def test_json_output_carries_whole_payloads_and_iso_times(capsys):
    Output("json").result([_letter(7)], "unused")
    data = json.loads(capsys.readouterr().out)
    assert data[0]["raw"] == NESTED and data[0]["_ingested_at"] == "2026-11-24T10:00:05.123456+00:00"
    assert data[0]["_kafka_timestamp"] == WHEN.isoformat()


def test_a_replay_dry_run_lists_the_records_still_failing_as_rows(capsys):
    sample = [{"_stream": "s", "_shard": "shardId-000", "_sequence": "0" * 50 + "123", "_arrival_timestamp": WHEN,
               "_error": "malformed_json", "_error_detail": "x" * 200}]
    report = ReplayReport("orders_delta", False, 25, 0, 20, {"malformed_json": 5}, sample)
    shown = _text(render.replay(report))
    assert "would append (dry run" in shown and "still failing: 5 malformed_json" in shown
    row = shown.splitlines()[-1]
    assert row.split()[:4] == ["s", "shardId-000", "123", "2026-11-24T10:00:05+00:00"]
    assert "… +140 chars" in row and "{'" not in shown and "datetime" not in shown
    Output("json").result(report.to_json(), "unused")
    assert json.loads(capsys.readouterr().out)["sample_still_failing"][0]["_arrival_timestamp"] == WHEN.isoformat()


def test_cells_read_as_a_person_expects():
    assert render.cell("x", None) == "-" and render.cell("x", b"caf\xc3\xa9") == "café"
    assert render.cell("_sequence", "000") == "0" and render.cell("_offset", 42) == "42"
    assert render.cell("x", {"a": [1, 2]}) == '{"a":[1,2]}'
    assert render.clip("abc", 3) == "abc" and render.clip("abcd", 3) == "abc… +1 chars"


@pytest.fixture
def local(tmp_path):
    """A pipeline's tables under tmp_path: Delta in a folder, Iceberg in a SQLite catalog."""
    (tmp_path / "conf").mkdir()
    return Settings(warehouse=str(tmp_path / "warehouse"), iceberg_catalog_uri=f"sqlite:///{tmp_path}/catalog.db")


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_not_created_yet_is_one_line_naming_it_and_the_start_that_creates_it(tmp_path, local, fmt):
    path = write_pipeline(tmp_path / "conf", pipeline_dict(fmt))
    config = load_pipeline(path)
    assert table_exists(config, local) is False
    with pytest.raises(TableNotFound) as raised:
        require_tables(config, local, path, None, config.sink.dead_letters)
    message = str(raised.value)
    assert "\n" not in message and raised.value.exit_code == ExitCode.FAILED
    assert f"{fmt.capitalize()} table " in message and "does not exist yet" in message
    assert f"the pipeline {config.pipeline} has not run" in message and f"lakeline ingest --pipeline {path}" in message

    _create_main_table(config, local, fmt)
    assert table_exists(config, local) is True
    with pytest.raises(TableNotFound, match=f"dead-letter table .*{config.sink.dead_letters} does not exist yet"):
        require_tables(config, local, path, None, config.sink.dead_letters)


def _create_main_table(config, settings: Settings, fmt: str) -> None:
    import pyarrow as pa

    from ingest.formats import format_for

    ref = format_for(fmt).ref(config, settings)
    data = pa.table({"event_id": pa.array(["e1"])})
    if fmt == "delta":
        from deltalake import write_deltalake

        write_deltalake(ref, data)
        return
    from ingest.formats.iceberg import iceberg_catalog

    catalog = iceberg_catalog(settings)
    catalog.create_namespace(config.sink.namespace)
    catalog.create_table(ref.split(".", 1)[1], data.schema, location=f"file://{settings.warehouse}/iceberg")


def test_an_iceberg_jdbc_catalog_is_left_to_spark_which_answers_with_the_same_line(tmp_path):
    config = load_pipeline(write_pipeline(tmp_path, pipeline_dict("iceberg")))
    jdbc = Settings(warehouse=str(tmp_path), iceberg_catalog_uri="jdbc:postgresql://db/catalog")
    assert table_exists(config, jdbc) is None
    require_tables(config, jdbc, "p.yaml")  # passes: only Spark can tell

    class AnalysisException(Exception):
        def getCondition(self):  # noqa: N802 - pyspark's name
            return "TABLE_OR_VIEW_NOT_FOUND"

    assert says_not_found(AnalysisException("[TABLE_OR_VIEW_NOT_FOUND] ..."))
    assert not says_not_found(RuntimeError("TABLE_OR_VIEW_NOT_FOUND in a message is not the condition"))
    with pytest.raises(TableNotFound, match=f"dead-letter table .*{config.sink.dead_letters} does not exist yet"), \
            spark_missing_tables(config, jdbc, "p.yaml", None, config.sink.dead_letters):
        raise AnalysisException(f"[TABLE_OR_VIEW_NOT_FOUND] lakeline.sales.{config.sink.dead_letters}")
    with pytest.raises(ValueError, match="other"), spark_missing_tables(config, jdbc, "p.yaml"):
        raise ValueError("other")


def test_a_never_run_pipeline_is_stale_once_records_wait_and_fresh_while_the_source_is_empty():
    config = load_pipeline_dict()
    now = datetime(2026, 11, 24, tzinfo=UTC)
    waiting = evaluate(config, None, 12, now, table_exists=False)
    assert not waiting.ok and "12 records waiting and no commit yet (the table does not exist" in waiting.problems[0]
    assert waiting.to_json()["table_exists"] is False
    assert evaluate(config, None, 0, now, table_exists=False).ok
    assert evaluate(config, now - timedelta(days=1), 0, now).to_json()["table_exists"] is True


def load_pipeline_dict():
    from ingest.config import PipelineConfig

    return PipelineConfig.model_validate(pipeline_dict("delta"))
