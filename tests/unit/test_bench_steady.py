"""bench.steady's per-minute rows and summary from recorded samples (no stack)."""

from __future__ import annotations

from bench.steady import (CommitTracker, CpuTotal, _maintained, first_commits, markdown, parse_jstat_gc,
                          per_minute, plot, queue_waits, restart_ratios, slow_batches, summarise)
from ingest.events import BatchCommitted, RunStarted

START = 1_800_000_000_000


def _tracker(rows: list[tuple[int, int]], commits: list[int]) -> CommitTracker:
    tracker = CommitTracker.__new__(CommitTracker)
    tracker.rows, tracker.commit_times = rows, commits
    return tracker


def test_rows_fall_in_the_minute_they_were_meant_to_be_sent_and_cpu_is_a_share_of_the_minute():
    # minute 1: rows sent at +10 s visible 0.5 s later; minute 2: sent at +70 s, visible 3 s later
    rows = [(START + 10_000, START + 10_500)] * 10 + [(START + 70_000, START + 73_000)] * 10
    samples = [{"at_ms": START + s * 1000, "app": (1000.0 + s, s * 0.5)} for s in range(0, 120, 5)]
    layouts = [{"at_ms": START + 1000, "table": "delta", "files": 7, "max_files_per_partition": 3},
               {"at_ms": START + 61_000, "table": "delta", "files": 9, "max_files_per_partition": 5}]
    maintenance = [{"dag": "lakeline_compact__t", "task": "compact", "state": "success",
                    "start_ms": START + 65_000, "end_ms": START + 90_000}]
    out = per_minute(START, 2, _tracker(rows, [START + 10_500, START + 73_000, START + 74_000]), layouts, samples,
                     "delta", ["app"], maintenance)
    assert [(r["minute"], r["p50"], r["rows"], r["commits"]) for r in out] == [(1, 0.5, 10, 1), (2, 3.0, 10, 2)]
    assert [r["max_files_per_partition"] for r in out] == [3, 5]
    assert [r["maintenance_tasks"] for r in out] == [0, 1]
    assert out[0]["app_rss_mb"] == 1055 and out[0]["app_cpu_pct"] == 50


def test_summary_spread_growth_and_files():
    rows = [{"minute": m, "p50": 0.5, "p99": p99, "max_files_per_partition": m, "app_rss_mb": rss}
            for m, p99, rss in [(1, 1.0, 900), (2, 1.0, 950), (3, 1.2, 1000), (4, 1.0, 1000), (5, 1.0, 1000),
                                (6, 3.0, 1050), (7, 1.0, 1100)]]
    summary = summarise(rows, "app")
    assert summary["p99_spread"] == 3.0 and summary["worst_minute_p99"] == 3.0
    assert summary["rss_growth_pct"] == 10.0  # minute 5 -> the last minute
    assert summary["max_files_per_partition"] == 7 and summary["minutes_p50_over_1s"] == 0


def test_maintained_needs_a_successful_compact_and_retain_of_every_table():
    runs = [{"dag": "lakeline_compact__a", "task": "compact", "state": "success"},
            {"dag": "lakeline_retain__a", "task": "retain", "state": "success"},
            {"dag": "lakeline_compact__b", "task": "compact", "state": "success"},
            {"dag": "lakeline_retain__b", "task": "retain", "state": "failed"}]
    assert _maintained(runs, ["a"]) and not _maintained(runs, ["a", "b"])


def test_cpu_of_a_tree_never_goes_down_when_a_process_exits_with_its_time():
    total = CpuTotal()
    assert total.add({(10, 1.0): 5.0, (11, 2.0): 3.0}) == 8.0
    assert total.add({(10, 1.0): 6.0, (11, 2.0): 4.0}) == 10.0
    # 11 exited (its 4 s gone from the tree), 12 started, and a new process reused pid 10
    assert total.add({(10, 1.0): 6.5, (12, 3.0): 1.0}) == 11.5
    assert total.add({(10, 9.0): 0.5, (12, 3.0): 1.0}) == 12.0


def test_the_baseline_run_reads_as_one_without_maintenance():
    rows = [{"minute": 1, "p50": 0.5, "p99": 1.0, "max_files_per_partition": 3, "app_rss_mb": 900}]
    table = {"table": "t", "per_minute": rows, "summary": summarise(rows, "app"), "stream_commit_retries": 0,
             "reconcile": {"exact": True}}
    baseline = {"system": "lakeline", "maintenance": "none", "lost_batches": 0, "tables": {"delta": table}}
    text = markdown([baseline])
    assert "No maintenance. Stream commits retried 0, lost batches 0" in text and "Compactions" not in text
    assert "| 1 | 0.5 | 1.0 | 3 | 900 |" in text


def test_a_restart_counts_from_the_kill_to_each_tables_first_batch_with_records():
    events = [RunStarted(pipeline="d", at=101.0, action="resume", reason="", lineage="", spark_seconds=20.0,
                         read_seconds=3.0),
              BatchCommitted(pipeline="d", at=99.0, batch_id=7, rows=5, dead_letters=0),  # before the kill
              BatchCommitted(pipeline="d", at=110.0, batch_id=8, rows=0, dead_letters=0),  # empty: not a commit
              BatchCommitted(pipeline="d", at=130.0, batch_id=9, rows=40, dead_letters=0),
              BatchCommitted(pipeline="i", at=140.0, batch_id=3, rows=0, dead_letters=2)]
    assert first_commits(events, {"delta": "d", "iceberg": "i"}, since=100.0) == {"delta": 130.0, "iceberg": 140.0}
    assert first_commits(events[:4], {"delta": "d", "iceberg": "i"}, since=100.0)["iceberg"] is None


def test_restart_ratio_is_the_day_against_fresh_and_is_printed():
    restarts = restart_ratios({"fresh": {"delta": {"recovery_s": 40.0, "table_commits": 7}},
                               "after_run": {"delta": {"recovery_s": 50.0, "table_commits": 1900}}})
    assert restarts["delta"]["ratio"] == 1.25
    text = markdown([{"system": "lakeline", "maintenance": "none", "lost_batches": 0, "restarts": restarts,
                      "tables": {}}])
    assert "| delta | fresh | 7 | 40.0 |" in text and "| delta | after run | 1900 | 50.0 |" in text
    assert next(line for line in text.splitlines() if "after run" in line).endswith("| 1.25 |")


JSTAT = """    S0C         S1C         S0U         S1U          EC           EU           OC           OU          MC
        0.0     16384.0         0.0     15872.0     693248.0     276480.0     455680.0     322484.0    62912.0
"""


def test_the_drivers_old_generation_is_read_apart_from_its_resident_memory():
    heap = parse_jstat_gc(JSTAT)
    assert heap == {"old_used_mb": 314.9, "heap_committed_mb": 1138.0}
    samples = [{"at_ms": START + 5_000, "app": (2000.0, 1.0), "app_heap": None},
               {"at_ms": START + 30_000, "app": (2100.0, 2.0), "app_heap": heap}]
    [row] = per_minute(START, 1, _tracker([], []), [], samples, "delta", ["app"], [])
    assert (row["app_old_gen_mb"], row["app_heap_committed_mb"]) == (314.9, 1138.0)
    rows = [{"minute": m, "p50": 0.5, "p99": 1.0, "app_rss_mb": 1000 + 100 * m, "app_old_gen_mb": old}
            for m, old in enumerate([300, 310, 305, 300, 300, 320, 300], start=1)]
    summary = summarise(rows, "app")
    assert summary["old_gen_growth_pct"] == 0.0 and summary["rss_growth_pct"] == 13.3


def test_an_airflow_never_started_is_not_a_dead_one(tmp_path):
    from bench.steady import Airflow

    Airflow(tmp_path, {}, slots=6).check_alive()  # --no-maintenance: nothing to check


def test_a_run_of_the_peers_alone_reads_and_plots_without_a_lakeline_result(tmp_path):
    rows = [{"minute": 1, "p50": 0.7, "p99": 2.0, "max_files_per_partition": 40, "app_rss_mb": 1200},
            {"minute": 2, "p50": 0.8, "p99": 2.5, "max_files_per_partition": 80, "app_rss_mb": 1210}]
    peer = {"system": "spark-delta", "rows": 600_000, "sent": 600_000, "exact": True,
            "tables": {"delta": {"table": "t", "per_minute": rows, "summary": summarise(rows, "app")}}}
    text = markdown([peer])
    assert "### spark-delta into delta (t)" in text and "No maintenance. Rows 600,000 / sent 600,000" in text
    assert "| 2 | 0.8 | 2.5 | 80 | 1210 |" in text
    plot(tmp_path / "peers.png", [peer])
    assert (tmp_path / "peers.png").read_bytes()[:4] == b"\x89PNG"


def test_peers_only_without_peers_is_refused_before_anything_starts(capsys):
    import pytest

    from bench.steady import main

    with pytest.raises(SystemExit) as stopped:
        main(["--peers-only"])
    assert stopped.value.code == 2 and "--peers-only needs --peers" in capsys.readouterr().err


def test_a_stream_batch_over_five_seconds_in_the_load_is_listed_with_its_phases():
    slow = BatchCommitted(pipeline="d", at=150.0, batch_id=8, rows=5, dead_letters=0, seconds=10.4,
                          phases={"table": 10.37}, spark_phases={"offsets": 0.2})
    events = [BatchCommitted(pipeline="d", at=120.0, batch_id=7, rows=5, dead_letters=0, seconds=1.2), slow,
              BatchCommitted(pipeline="i", at=150.0, batch_id=3, rows=5, dead_letters=0, seconds=9.0),
              BatchCommitted(pipeline="d", at=90.0, batch_id=1, rows=5, dead_letters=0, seconds=30.0),  # start
              BatchCommitted(pipeline="d", at=400.0, batch_id=99, rows=5, dead_letters=0, seconds=20.0)]  # restart
    listed = slow_batches(events, "d", since=100.0, until=300.0)
    assert listed == [{"batch": 8, "at": 150.0, "seconds": 10.4, "phases": {"table": 10.4, "offsets": 0.2}}]
    rows = [{"minute": 1, "p50": 0.5, "p99": 1.0, "max_files_per_partition": 3, "app_rss_mb": 900}]
    table = {"table": "t", "per_minute": rows, "summary": summarise(rows, "app"), "stream_commit_retries": 0,
             "reconcile": {"exact": True}, "slow_batches": listed}
    text = markdown([{"system": "lakeline", "maintenance": "none", "lost_batches": 0, "tables": {"delta": table}}])
    assert "Stream batches over 5 s: 1: batch 8 10.4 s (table 10.4 s)." in text


def test_queue_waits_count_only_the_runs_that_started():
    runs = [{"queued_ms": START, "start_ms": START + 2_000}, {"queued_ms": START, "start_ms": START + 180_000},
            {"queued_ms": START, "start_ms": START + 4_000}, {"queued_ms": START, "start_ms": None}]
    assert queue_waits(runs) == {"median": 4.0, "worst": 180.0}
    assert queue_waits([{"queued_ms": None, "start_ms": None}]) is None


def test_one_format_writes_one_pipeline_and_sizes_the_pools_for_it(tmp_path):
    from bench.steady import _formats_text, write_conf
    from maintenance.pools import BOUND_POOL, pools, slots_needed

    tables = write_conf(tmp_path, "abc123", "topic", "bucket", ("delta",))
    assert list(tables) == ["delta"] and tables["delta"]["location"] == "s3a://bucket/steady_delta_abc123"
    assert [p.name for p in (tmp_path / "pipelines").iterdir()] == ["steady_delta_abc123.yaml"]
    declared = {p.name: p.slots for p in pools(tmp_path)}
    assert declared["lakeline_table__steady_delta_abc123"] == 1 and declared[BOUND_POOL] == 1
    assert slots_needed(pools(tmp_path)) == 4  # the table's, the bound's, the steps' and the drills' slot
    assert _formats_text(["delta", "iceberg"]) == "a Delta and an Iceberg pipeline"


def test_turn_waits_count_only_the_pipelines_batches_that_waited_in_the_window():
    from bench.steady import turn_waits

    def batch(at, turn=None, pipeline="p"):
        return BatchCommitted(pipeline=pipeline, at=at, batch_id=int(at), rows=1, dead_letters=0,
                              phases={"table": 1.0, **({"turn": turn} if turn else {})})

    events = [batch(10, 0.5), batch(11), batch(12, 1.5), batch(13, 2.5), batch(14, 9.0, pipeline="q"),
              batch(99, 4.0)]
    assert turn_waits(events, "p", 0, 50) == {"batches": 3, "median": 1.5, "worst": 2.5, "total": 4.5}
    assert turn_waits(events, "q", 0, 13) is None
