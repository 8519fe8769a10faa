"""Table files (conf/tables/*.yaml) and the pure decisions: what to compact, what retention may delete."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from ingest.errors import ConfigError
from maintenance.policy import (Compaction, PartitionHealth, Retention, RetentionRequest, TableHealth,
                                bound_run_policy, decide, load_table, parse_duration, parse_size, retention_problems,
                                size_histogram)
from tests.helpers import pipeline_dict, write_pipeline

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
MB = 1024 ** 2


def _table_file(tmp_path, **overrides) -> Path:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir(exist_ok=True)
    pipeline = write_pipeline(pipelines, pipeline_dict("delta", name="p1"))
    data = {"table": "t1", "pipeline": f"../pipelines/{pipeline.name}", **overrides}
    tables = tmp_path / "tables"
    tables.mkdir(exist_ok=True)
    path = tables / "t1.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_table_files_load():
    for name, fmt in (("orders_delta", "delta"), ("orders_iceberg", "iceberg")):
        table = load_table(name, REPO / "conf")
        assert table.name == name and table.format == fmt
        partitioning = [(f.column, str(f.transform), f.source) for f in table.partitioning]
        assert partitioning == [("event_date", "day", "event_time")]
        assert table.policy.compaction.target_bytes == 128 * MB


def test_table_found_by_name_under_conf_dir_or_by_path(tmp_path):
    path = _table_file(tmp_path)
    assert load_table("t1", tmp_path).name == "t1"
    assert load_table(str(path)).pipeline.pipeline == "p1"
    with pytest.raises(ConfigError, match="known tables: t1"):
        load_table("nope", tmp_path)


def test_errors_name_file_key_and_fix(tmp_path):
    path = _table_file(tmp_path, compaction={"target_file_size": "lots", "min_small_file": 3})
    with pytest.raises(ConfigError) as err:
        load_table(str(path))
    text = str(err.value)
    assert f"{path}: compaction.target_file_size: 'lots' is not a size" in text
    assert f"{path}: compaction.min_small_file: unknown key" in text


def test_missing_pipeline_file_is_explained(tmp_path):
    path = _table_file(tmp_path, pipeline="../pipelines/missing.yaml")
    with pytest.raises(ConfigError, match="pipeline: .*missing.yaml does not exist; give the pipeline YAML's path"):
        load_table(str(path))


def test_bad_yaml_in_a_table_file_names_line_and_column(tmp_path):
    path = tmp_path / "tables" / "broken.yaml"
    path.parent.mkdir()
    path.write_text("table: t1\npipeline: ../pipelines/p.yaml\ncompaction: [oops\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML at line 4, column 1"):
        load_table(str(path))
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: expected a mapping of keys \(table, pipeline"):
        load_table(str(path))


def test_retention_floors_are_enforced_at_load(tmp_path):
    with pytest.raises(ConfigError, match="retain 2h is shorter than min_retain 24h"):
        load_table(str(_table_file(tmp_path, retention={"retain": "2h"})))
    with pytest.raises(ConfigError, match="min_orphan_age must be at least 1h; or, for a dev/test table only, "
                                          "set retention.allow_short_windows: true"):
        load_table(str(_table_file(tmp_path, retention={"min_orphan_age": "10m", "orphan_older_than": "10m"})))
    short = load_table(str(_table_file(tmp_path, retention={
        "retain": "30s", "min_retain": "30s", "orphan_older_than": "30s", "min_orphan_age": "30s",
        "allow_short_windows": True})))
    assert short.policy.retention.retain_delta.total_seconds() == 30
    # the table file's own minimum still holds below the floors
    with pytest.raises(ConfigError, match="retain 10s is shorter than min_retain 30s"):
        load_table(str(_table_file(tmp_path, retention={"retain": "10s", "min_retain": "30s",
                                                        "allow_short_windows": True})))


def test_delta_refuses_plain_sort_and_both_layouts_are_exclusive(tmp_path):
    with pytest.raises(ConfigError, match="Delta OPTIMIZE has no plain sort; use zorder_by"):
        load_table(str(_table_file(tmp_path, compaction={"sort_by": ["customer_id"]})))
    with pytest.raises(ConfigError, match="at most one of sort_by and zorder_by"):
        load_table(str(_table_file(tmp_path, compaction={"sort_by": ["a"], "zorder_by": ["b"]})))


def test_sizes_and_durations():
    assert parse_size("128MB") == 128 * MB and parse_size("1.5KB") == 1536 and parse_size(10) == 10
    assert parse_duration("72h") == timedelta(hours=72) and parse_duration("30m") == timedelta(minutes=30)
    with pytest.raises(ValueError):
        parse_duration("3 weeks")


def _part(day: str, files: int, small: int, size: int = MB, age_hours: float = 24) -> PartitionHealth:
    return PartitionHealth(f"event_date={day}", files, files * size, small, NOW - timedelta(hours=age_hours))


def _health(*parts: PartitionHealth) -> TableHealth:
    return TableHealth("t", "delta", "s3a://b/t", ["event_date"], ["event_date"], 128 * MB, 64 * MB, list(parts),
                       10, 9, 1000, None, None, NOW)


POLICY = Compaction(min_small_files=5, small_file_ratio=0.3, max_bytes_per_run="1GB", hot_partition_window="1h")


def test_partitions_under_threshold_are_left_alone():
    plan = decide(_health(_part("2026-11-18", 4, 4), _part("2026-11-19", 20, 5), _part("2026-11-20", 20, 10)),
                  POLICY, NOW)
    assert plan.partitions == ["event_date=2026-11-20"]
    reasons = {s.partition: s.reason for s in plan.skipped}
    assert "4 small files < min_small_files 5" in reasons["event_date=2026-11-18"]
    assert "ratio 0.25 < 0.3" in reasons["event_date=2026-11-19"]


def test_newest_first_and_hot_partition_skipped_unless_asked():
    health = _health(_part("2026-11-19", 10, 10), _part("2026-11-21", 10, 10),
                     _part("2026-11-22", 10, 10, age_hours=0.1))
    plan = decide(health, POLICY, NOW)
    assert plan.partitions == ["event_date=2026-11-21", "event_date=2026-11-19"]
    assert "hot" in plan.skipped[0].reason and plan.skipped[0].partition == "event_date=2026-11-22"
    assert decide(health, POLICY, NOW, include_hot=True).partitions[0] == "event_date=2026-11-22"
    # `now` is a parameter: an hour later the same partition is no longer hot
    assert decide(health, POLICY, NOW + timedelta(hours=1)).partitions[0] == "event_date=2026-11-22"


def test_a_hot_partition_over_max_files_per_partition_is_compacted_beside_the_stream():
    bounded = Compaction(min_small_files=5, small_file_ratio=0.3, max_bytes_per_run="1GB",
                         hot_partition_window="1h", max_files_per_partition=50)
    live = _part("2026-11-22", 60, 60, age_hours=0.01)
    young = _part("2026-11-21", 40, 40, age_hours=0.5)  # hot, under the bound: waits for the window
    plan = decide(_health(live, young), bounded, NOW)
    assert plan.partitions == ["event_date=2026-11-22"]
    assert "hot but over max_files_per_partition 50" in plan.chosen[0].reason
    assert "hot" in plan.skipped[0].reason and plan.skipped[0].partition == "event_date=2026-11-21"
    # Without the bound (the default) both wait; the bound does not lift the small-file thresholds.
    assert decide(_health(live, young), POLICY, NOW).partitions == []
    big_files = _part("2026-11-22", 60, 2, age_hours=0.01)
    assert decide(_health(big_files), bounded, NOW).partitions == []
    # In a scheduler run the live partition is neither the interval's own work nor backlog.
    start, end = NOW - timedelta(hours=1), NOW
    settled = _part("2026-11-20", 10, 10, age_hours=1.5)
    run = decide(_health(live, young, settled), bounded, end, interval=(start, end))
    # the bound first, then the interval's own work
    assert run.partitions == ["event_date=2026-11-22", "event_date=2026-11-20"]
    assert (run.from_interval, run.backlog, run.hot_over_bound) == (1, 0, 1)
    assert "backlog" not in run.chosen[0].reason


def test_the_bound_comes_first_and_outside_the_byte_budget():
    """A budget spent on settled partitions first must not leave the partition the stream writes unbounded, and
    a partition over the bound must not starve the settled ones either."""
    bounded = Compaction(min_small_files=5, small_file_ratio=0.3, max_bytes_per_run="25MB",
                         hot_partition_window="1h", max_files_per_partition=50)
    live = _part("2026-11-22", 300, 300, age_hours=0.01)  # 300MB, far over the budget
    settled = [_part(f"2026-11-{day}", 10, 10, age_hours=30) for day in (19, 20, 21)]  # 10MB each
    plan = decide(_health(*settled, live), bounded, NOW)
    assert plan.partitions == ["event_date=2026-11-22", "event_date=2026-11-21", "event_date=2026-11-20"]
    assert plan.bytes_planned == 320 * MB  # all it rewrites, the bound's partition included
    assert [s.partition for s in plan.skipped] == ["event_date=2026-11-19"]
    assert "max_bytes_per_run 25MB reached" in plan.skipped[0].reason


def test_max_files_per_partition_is_at_least_two():
    with pytest.raises(ValueError, match="max_files_per_partition"):
        Compaction(max_files_per_partition=1)


def test_max_bytes_per_run_caps_the_plan_but_always_takes_one():
    parts = [_part(f"2026-11-{d}", 10, 10, size=40 * MB) for d in (18, 19, 20)]  # 400MB each
    plan = decide(_health(*parts), POLICY, NOW)
    assert plan.partitions == ["event_date=2026-11-20", "event_date=2026-11-19"]
    assert plan.bytes_planned == 800 * MB
    assert "max_bytes_per_run 1GB reached" in plan.skipped[0].reason
    huge = decide(_health(_part("2026-11-20", 10, 10, size=200 * MB)), POLICY, NOW)
    assert huge.partitions == ["event_date=2026-11-20"]  # one oversized partition still makes progress


def test_interval_takes_its_own_partitions_first_then_the_backlog():
    # NOW is 12:00, hot window 1h. The run for [10:00, 11:00) decides as of 11:00; its own partitions went quiet
    # in [09:00, 10:00) (quiet for a whole hot window by 11:00).
    start, end = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    health = _health(_part("2026-11-17", 10, 10, age_hours=0.2),   # newest file 11:48: after the interval end
                     _part("2026-11-18", 10, 10, age_hours=3.5),   # 08:30: backlog from before the interval
                     _part("2026-11-19", 10, 10, age_hours=3.0),   # 09:00: went quiet in it (inclusive start)
                     _part("2026-11-20", 10, 10, age_hours=2.5),   # 09:30: went quiet in it
                     _part("2026-11-21", 10, 10, age_hours=1.9),   # 10:06: still hot at 11:00
                     _part("2026-11-22", 1, 1, age_hours=9.0))     # under threshold
    plan = decide(health, POLICY, end, interval=(start, end))
    assert plan.partitions == ["event_date=2026-11-20", "event_date=2026-11-19", "event_date=2026-11-18"]
    assert (plan.from_interval, plan.backlog) == (2, 1)
    assert "went quiet in this interval" in plan.chosen[0].reason and "backlog" in plan.chosen[2].reason
    reasons = {s.partition: s.reason for s in plan.skipped}
    assert "hot" in reasons["event_date=2026-11-17"] and "hot" in reasons["event_date=2026-11-21"]
    assert "min_small_files" in reasons["event_date=2026-11-22"]


def test_a_byte_budget_never_leaves_a_settled_partition_behind():
    # Two 600MB partitions go quiet in the same hour; the 1GB budget takes one. The next hour takes the other.
    start, end = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    parts = [_part("2026-11-19", 10, 10, size=60 * MB, age_hours=2.5), _part("2026-11-20", 10, 10, size=60 * MB,
                                                                             age_hours=2.5)]
    first = decide(_health(*parts), POLICY, end, interval=(start, end))
    assert first.partitions == ["event_date=2026-11-20"] and "max_bytes_per_run" in first.skipped[0].reason
    compacted = [_part("2026-11-19", 10, 10, size=60 * MB, age_hours=2.5), _part("2026-11-20", 1, 1, age_hours=0.5)]
    second = decide(_health(*compacted), POLICY, NOW, interval=(end, NOW))
    assert second.partitions == ["event_date=2026-11-19"] and (second.from_interval, second.backlog) == (0, 1)
    # A retry of the first run, after it compacted 11-20: that partition is now under threshold.
    retry = decide(_health(*compacted), POLICY, end, interval=(start, end))
    assert retry.partitions == ["event_date=2026-11-19"]


def test_partition_filter_accepts_values_and_reports_unknown():
    health = _health(_part("2026-11-19", 10, 10), _part("2026-11-20", 10, 10))
    plan = decide(health, POLICY, NOW, only=["2026-11-19", "event_date=2026-01-01"])
    assert plan.partitions == ["event_date=2026-11-19"]
    assert [(s.partition, s.reason) for s in plan.skipped] == [("event_date=2026-01-01", "no such partition")]


def test_multi_field_partitions_newest_first_by_their_time_column_and_filtered_by_part_of_the_key():
    # bucket first in the declared order: "newest first" still follows the hour column, not the key's text
    def part(bucket: int, hour: str) -> PartitionHealth:
        return PartitionHealth(f"customer_id_bucket={bucket}/occurred_at_hour={hour}", 10, 10 * MB, 10,
                               NOW - timedelta(hours=24))

    health = TableHealth("t", "iceberg", "s3a://b/t", ["customer_id_bucket", "occurred_at_hour"],
                         ["occurred_at_hour"], 128 * MB, 64 * MB,
                         [part(9, "2026-11-19-23"), part(0, "2026-11-20-01"), part(3, "2026-11-20-00")],
                         10, 9, 1000, None, None, NOW)
    assert decide(health, POLICY, NOW).partitions == [
        "customer_id_bucket=0/occurred_at_hour=2026-11-20-01", "customer_id_bucket=3/occurred_at_hour=2026-11-20-00",
        "customer_id_bucket=9/occurred_at_hour=2026-11-19-23"]
    plan = decide(health, POLICY, NOW, only=["occurred_at_hour=2026-11-20-00", "customer_id_bucket=9",
                                              "customer_id_bucket=5"])
    assert plan.partitions == ["customer_id_bucket=3/occurred_at_hour=2026-11-20-00",
                               "customer_id_bucket=9/occurred_at_hour=2026-11-19-23"]
    assert [(s.partition, s.reason) for s in plan.skipped] == [("customer_id_bucket=5", "no such partition")]
    # a bare value is ambiguous with two partition columns: it names no partition
    bare = decide(health, POLICY, NOW, only=["9"])
    assert bare.partitions == [] and "name it as column=value" in bare.skipped[0].reason


def test_size_histogram_relative_to_target():
    hist = size_histogram([1, 5 * MB, 20 * MB, 100 * MB, 200 * MB], 128 * MB)
    assert hist == {"<1%": 1, "1-10%": 1, "10-50%": 1, "50-100%": 1, ">=100%": 1}


def test_retention_guards_say_why_and_what_to_change():
    policy = Retention(retain="168h", min_retain="24h", orphan_older_than="72h", min_orphan_age="24h")
    assert retention_problems(policy, RetentionRequest(timedelta(hours=168), timedelta(hours=72))) == []
    short = retention_problems(policy, RetentionRequest(timedelta(hours=2), timedelta(hours=72)))
    assert len(short) == 1 and "shorter than retention.min_retain 24h" in short[0] and "time-travel" in short[0]
    delta = retention_problems(policy, RetentionRequest(timedelta(hours=48), timedelta(hours=72)),
                               timedelta(hours=168), "delta.deletedFileRetentionDuration")
    assert "delta.deletedFileRetentionDuration (168h)" in delta[0]
    orphan = retention_problems(policy, RetentionRequest(timedelta(hours=168), timedelta(hours=1)))
    assert "commit in flight" in orphan[0] and "at least 24h" in orphan[0]


def test_delta_vacuum_is_given_whole_hours_rounded_up_never_a_shorter_window():
    # Delta rounds VACUUM's RETAIN to the nearest whole hour: 1h20m would keep 1h, 10m would be 0 and refused.
    from ingest.formats.delta_maintenance import vacuum_hours

    assert [vacuum_hours(timedelta(minutes=m)) for m in (10, 60, 80, 90, 150)] == [1, 1, 2, 2, 3]
    assert vacuum_hours(timedelta(days=7)) == 168


def test_a_bound_only_plan_keeps_the_hot_partitions_over_the_bound_and_leaves_the_rest():
    bounded = Compaction(min_small_files=5, small_file_ratio=0.3, max_bytes_per_run="1GB",
                         hot_partition_window="1h", max_files_per_partition=50)
    live = _part("2026-11-22", 60, 60, age_hours=0.01)
    settled = _part("2026-11-20", 10, 10, age_hours=30)
    plan = decide(_health(live, settled), bounded, NOW)
    assert plan.partitions == ["event_date=2026-11-22", "event_date=2026-11-20"]
    only = plan.bound_only()
    assert only.partitions == ["event_date=2026-11-22"] and only.hot == ["event_date=2026-11-22"]
    assert only.bytes_planned == 60 * MB
    left = {s.partition: s.reason for s in only.skipped}
    assert left["event_date=2026-11-20"] == "not over max_files_per_partition: left to the compaction run"
    # Nothing over the bound: nothing to do.
    assert decide(_health(settled), bounded, NOW).bound_only().partitions == []
    # A bound run acts at half the bound, leaving the rest for what the stream adds until the next run.
    filling = _part("2026-11-22", 30, 30, age_hours=0.01)
    assert decide(_health(filling), bounded, NOW).partitions == []
    assert decide(_health(filling), bound_run_policy(bounded), NOW).bound_only().partitions == ["event_date=2026-11-22"]
    assert bound_run_policy(POLICY) == POLICY  # no bound: nothing to act at
    assert bound_run_policy(Compaction(max_files_per_partition=3)).max_files_per_partition == 2


def test_a_bound_run_logs_the_partitions_the_stream_writes_and_counts_the_rest():
    from maintenance.compaction import skip_lines

    bounded = Compaction(min_small_files=5, small_file_ratio=0.3, max_bytes_per_run="1GB",
                         hot_partition_window="1h", max_files_per_partition=50)
    filling = _part("2026-11-22", 20, 20, age_hours=0.01)
    history = [_part(f"2026-11-{day:02d}", 10, 10, age_hours=24 * (22 - day)) for day in range(1, 21)]
    plan = decide(_health(filling, *history), bound_run_policy(bounded), NOW).bound_only()
    assert len(plan.skipped) == 21 and [s.partition for s in plan.skipped if s.writing] == ["event_date=2026-11-22"]
    lines = skip_lines(plan, bound_only=True)
    assert lines[0].startswith("  skip event_date=2026-11-22: hot: newest file 36s old")
    assert lines[1:] == ["  20 partition(s) the stream is not writing: left to the compaction runs"]
    # Other runs name every partition they leave, and why.
    assert skip_lines(plan, bound_only=False) == [f"  skip {s.partition}: {s.reason}" for s in plan.skipped]


def test_a_file_newer_than_the_decision_time_is_hot_without_a_negative_age():
    """A scheduled run decides as of its interval's end; the stream goes on writing after it (seen on bench.steady:
    'newest file -9s old')."""
    plan = decide(_health(_part("2026-11-22", 10, 10, age_hours=-0.01)), POLICY, NOW)
    [skipped] = plan.skipped
    assert skipped.reason.startswith("hot: newest file written after the decision time <"), skipped.reason
    assert "-" not in skipped.reason.split("<")[0]
