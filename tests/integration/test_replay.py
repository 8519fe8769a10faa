"""Dead-letter replay after a schema fix, twice, beside a running stream: exactly once (about 45 s per format;
Iceberg in the heavy tier). The dead letters and the dry run's records render as rows (milliseconds)."""

from __future__ import annotations

import io
import json
import threading

import pytest
from rich.console import Console

from ingest.config import load_pipeline
from ingest.formats import tables_for
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from ingest.replay import replay, show
from lakeline import render
from tests.helpers import BASE_SCHEMA, pipeline_dict, row_count, wait_for, write_pipeline

pytestmark = pytest.mark.integration


def _rendered(renderable) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _order(i: int, **extra) -> dict:
    event = {"event_id": f"e{i}", "event_time": "2026-11-20T10:00:00Z", "customer_id": "c", "order_id": f"o{i}",
             "amount": 1.5, **extra}
    return {k: v for k, v in event.items() if v is not None}


@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_replay_after_a_schema_fix_twice_beside_a_running_stream_is_exact(fmt, conf_dir, settings, spark, tmp_path):
    data = pipeline_dict(fmt)
    path = write_pipeline(conf_dir, data)
    config = load_pipeline(path)
    lines = [_order(i) for i in range(200)] + [_order(i, order_id=None) for i in range(200, 220)]
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{not json\n" * 5)
    produce(config, settings, 0, partitions=2, from_file=first)

    stream = Pipeline(config, settings, spark=spark, trigger="processing-time=1s")
    runner = threading.Thread(target=lambda: stream.run(install_signal_handlers=False), daemon=True)
    runner.start()
    main, dead = tables_for(spark, config, settings)
    wait_for(lambda: row_count(main) == 200 and row_count(dead) == 25, "the first records to land")
    waiting = show(spark, config, settings, reason="missing_required_field", limit=50)
    assert len(waiting) == 20 and all("order_id" in row["_error_detail"] for row in waiting)
    shown = _rendered(render.dead_letters(waiting))  # rows a person reads: times ISO-8601, no Python reprs
    assert shown.splitlines()[0].split()[:4] == ["topic", "partition", "offset", "ingested_at"]
    assert waiting[0]["_ingested_at"].isoformat(timespec="seconds") in shown and "datetime" not in shown

    # The fix: order_id becomes optional. The stream keeps running on its old config meanwhile.
    fixed = {**data, "schema": {**BASE_SCHEMA, "fields": [{**f, "required": False} if f["name"] == "order_id" else f
                                                          for f in BASE_SCHEMA["fields"]]}}
    fixed_config = load_pipeline(write_pipeline(tmp_path, fixed))
    dry = replay(spark, fixed_config, settings)
    assert (dry.selected, dry.already_replayed, dry.now_parse) == (25, 0, 20)
    assert dry.still_failing == {"malformed_json": 5} and main.read().count() == 200  # a dry run writes nothing
    listed = _rendered(render.replay(dry)).splitlines()
    assert listed[-6].split()[:4] == ["topic", "partition", "offset", "kafka_timestamp"]
    assert all("malformed_json" in line and "+00:00" in line for line in listed[-5:]), listed
    assert "datetime" not in "\n".join(listed) and "{'" not in "\n".join(listed)
    done = replay(spark, fixed_config, settings, reason="missing_required_field", apply=True)
    assert (done.selected, done.now_parse) == (20, 20)
    again = replay(spark, fixed_config, settings, apply=True)
    assert (again.already_replayed, again.now_parse) == (20, 0)

    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps(_order(i)) + "\n" for i in range(220, 270)))
    produce(config, settings, 0, from_file=more)
    wait_for(lambda: row_count(main) == 270, "the stream to go on beside the replays")
    assert runner.is_alive()
    stream.request_stop()
    runner.join(120)

    report = reconcile(config, settings, spark)
    assert report.exact, (report.duplicate_sample, report.missing_sample)
    assert (report.rows, report.dead_letters, report.replayed) == (270, 5, 20)
    assert report.dead_letters_by_reason == {"malformed_json": 5}
    replayed = {r["event_id"] for r in main.read().filter("order_id IS NULL").collect()}
    assert replayed == {f"e{i}" for i in range(200, 220)}
