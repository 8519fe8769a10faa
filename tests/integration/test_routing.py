"""Fan-out (`sink.route`) against the real broker, moto S3 and Spark, both formats: one topic routed by a header
into several tables in add mode, killed with -9 between two routed tables' commits, then restarted: reconcile
exact across every table, each table's rows and schema its own, a value past max_tables in the default table, and
(Delta) one past it in the dead letters with `overflow: dead_letter`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ingest.config import load_pipeline
from ingest.formats import format_for, routed_tables_for, tables_for
from ingest.pipeline import Pipeline
from ingest.reconcile import reconcile
from ingest.routing import table_config
from tests.helpers import assert_exact, lakeline_in_process, pipeline_dict, produce_with_headers, write_pipeline

pytestmark = pytest.mark.integration

KINDS = ["push", "Issues", "star", "fork", "watch"]
# each kind's own field (add mode gives it to that kind's table only)
EXTRA = {"push": ("ref", "main"), "Issues": ("labels", ["bug"]), "star": ("stars", 3), "fork": ("forkee", "x/y"),
         "watch": ("action", "started")}


def _corpus(count: int) -> tuple[list[tuple[bytes, dict[str, str]]], dict[str, int], int]:
    """(records, good records per header value ("" for none), bad records). Every 10th record has no header,
    every 25th is malformed JSON."""
    records, good, bad = [], {}, 0
    for i in range(count):
        kind = "" if i % 10 == 9 else KINDS[i % len(KINDS)]
        event = {"event_id": f"e{i}", "event_time": "2026-11-27T10:00:00Z", "customer_id": f"c{i % 7}",
                 "order_id": f"o{i}", "amount": 1.5, "status": "paid"}
        if kind:
            name, value = EXTRA[kind]
            event[name] = value
        payload = json.dumps(event).encode()
        if i % 25 == 24:
            payload, bad = payload[:-3], bad + 1
        else:
            good[kind] = good.get(kind, 0) + 1
        records.append((payload, {"X-Event": kind} if kind else {}))
    return records, good, bad


def _routed_pipeline(conf_dir, fmt, **route):
    data = pipeline_dict(fmt)
    data["source"]["include_headers"] = True
    data["source"]["max_offsets_per_trigger"] = 400
    data["schema"] = {**data["schema"], "evolution": "add"}
    data["sink"]["route"] = {"by": "header:X-Event", "table": data["pipeline"] + "_{value}", **route}
    path = write_pipeline(conf_dir, data)
    return path, load_pipeline(path)


def _count(spark, table) -> int:
    return table.read().count()


# Measured on the 2-core box (one driver process killed, then one in-process run): 107 s Delta; 140 s Iceberg,
# in soak (the default tier's budget).
@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_routed_pipeline_killed_between_routed_commits_is_exact(fmt, conf_dir, settings, spark):
    path, config = _routed_pipeline(conf_dir, fmt, max_tables=3)
    records, good, bad = _corpus(1200)
    produce_with_headers(settings, config.source.topics[0], records)
    cmd = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(path), "--trigger", "available-now"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "LAKELINE_CRASH_AT": "after-route-commit@1"})
    assert run.returncode == -signal.SIGKILL, run.stdout[-2000:] + run.stderr[-3000:]
    assert "SIGKILL at after-route-commit of batch 1" in run.stdout

    summary = Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    assert summary.batches and summary.batches[0].batch_id == 1 and not summary.batches[0].replayed

    report = reconcile(config, settings, spark)
    assert_exact(report, len(records), bad)
    main, dead = tables_for(spark, config, settings)
    routed = {t.display_name.rsplit("/", 1)[-1].rsplit(".", 1)[-1]: t for t in routed_tables_for(spark, config,
                                                                                                  settings)}
    p = config.pipeline
    # max_tables 3: the first three names in order (fork, issues, push) are tables; star and watch go to default
    assert sorted(routed) == [f"{p}_fork", f"{p}_issues", f"{p}_push"]
    for kind, name in (("fork", f"{p}_fork"), ("Issues", f"{p}_issues"), ("push", f"{p}_push")):
        assert _count(spark, routed[name]) == good[kind], name
    assert _count(spark, main) == good[""] + good["star"] + good["watch"]
    assert _count(spark, dead) == bad
    # each table evolved on its own records only
    columns = {name: set(t.table_schema().fieldNames()) for name, t in routed.items()}
    assert "ref" in columns[f"{p}_push"] and "labels" not in columns[f"{p}_push"]
    assert "labels" in columns[f"{p}_issues"] and "ref" not in columns[f"{p}_issues"]
    assert "forkee" in columns[f"{p}_fork"] and "stars" not in columns[f"{p}_fork"]
    main_columns = set(main.table_schema().fieldNames())
    assert {"stars", "action"} <= main_columns and not {"ref", "labels", "forkee"} & main_columns
    # every routed table's records carry its own end; the main table's newest record lists the routed tables
    assert sorted(main.last_commit().extra["routes"]) == sorted(routed)
    for table in routed.values():
        assert table.last_commit().end == main.last_commit().end or table.last_commit().batch_id < \
            main.last_commit().batch_id


# Measured on the 2-core box: 32 s; in process, two runs of one batch each.
def test_route_past_max_tables_to_dead_letters(conf_dir, settings, spark, capsys):
    path, config = _routed_pipeline(conf_dir, "delta", max_tables=2, overflow="dead_letter")
    records, good, bad = _corpus(200)
    produce_with_headers(settings, config.source.topics[0], records)
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    main, dead = tables_for(spark, config, settings)
    p = config.pipeline
    routed = routed_tables_for(spark, config, settings)
    fmt = format_for("delta")
    assert sorted(t.location for t in routed) == sorted(
        fmt.ref(table_config(config, n), settings) for n in (f"{p}_fork", f"{p}_issues"))
    overflowed = good["push"] + good["star"] + good["watch"]
    reasons = {r["_error"]: r["count"] for r in dead.read().groupBy("_error").count().collect()}
    assert reasons == {"malformed_json": bad, "route_overflow": overflowed}
    assert _count(spark, main) == good[""]
    report = reconcile(config, settings, spark)
    assert report.duplicates == 0 and report.missing == 0 and report.dead_letters == bad + overflowed
    # `lakeline tables` lists the routed tables beside the main and dead-letter tables, without Spark
    code, out, err = lakeline_in_process(capsys, "tables", "--pipeline", str(path), "--output", "json")
    assert code == 0, err
    listed = {row["table"]: row for row in json.loads(out)}
    assert sorted(listed) == sorted([p, f"{p}_dead_letters", f"{p}_fork", f"{p}_issues"])
    assert listed[f"{p}_fork"]["kind"] == "routed" and listed[f"{p}_fork"]["rows"] == good["fork"]

    # a batch with no rows for the main table still ends with its commit (the record that says "batch done")
    before = main.last_commit()
    more = [(json.dumps({"event_id": f"f{i}", "event_time": "2026-11-27T10:00:00Z", "customer_id": "c",
                         "order_id": f"f{i}", "amount": 2.0}).encode(), {"X-Event": "fork"}) for i in range(30)]
    produce_with_headers(settings, config.source.topics[0], more)
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    after = main.last_commit()
    assert after.batch_id > before.batch_id and after.rows == 0 and after.end != before.end
    assert _count(spark, main) == good[""]
    report = reconcile(config, settings, spark)
    assert report.exact and report.produced == len(records) + len(more) and report.ranges_contiguous
