"""Recovery drills and checkpoint repair against the real broker, moto S3 and Spark driver processes.

Default run: one scenario per format (lost and stale checkpoints are also covered by test_exactly_once and
test_checkpoint_backup). Heavy (CI): every scenario on both formats, and a drill that must fail.
"""

from __future__ import annotations

import json

import pytest

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.commits import CommitRecord
from ingest.config import load_pipeline
from ingest.pipeline import Pipeline
from ingest.produce import produce
from ingest.reconcile import reconcile
from ingest.formats import tables_for
from maintenance import checkpoint_repair
from maintenance.drill import Drill, scenarios_for
from tests.helpers import pipeline_dict, write_pipeline

pytestmark = pytest.mark.integration

EXPECTED_START = {"kill": "resume", "lose-checkpoint": "rebuild", "corrupt-checkpoint": "resume",
                  "stale-restore": "rebuild", "shard-split": "fresh"}


def _drill(fmt, conf_dir, settings, spark, tmp_path, **kwargs):
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict(fmt)))
    return Drill(config, settings, spark, events=2000, batch_size=400, work_dir=tmp_path / "drills", seed=5,
                 **kwargs)


def _assert_drill(drill, report, scenarios, spark):
    print(json.dumps(report.to_json(), indent=1))
    assert report.passed, [s.problems for s in report.scenarios]
    assert [s.scenario for s in report.scenarios] == scenarios
    fs = HadoopFS(spark)
    for result in report.scenarios:
        assert result.duplicates == 0 and result.missing == 0
        assert result.produced >= 2000 and result.rows + result.dead_letters == result.produced
        assert result.dead_letters > 0  # 1% bad records of every kind went to the dead-letter table
        assert result.recovery_seconds is not None and result.recovery_seconds > 0
        assert result.start_plan.startswith(EXPECTED_START[result.scenario]), result.start_plan
        assert not fs.exists(result.location), "a passed scenario's drill copy is removed"
    stored = json.loads(fs.read_text(f"{drill.root}/report.json"))
    assert stored["passed"] and len(stored["scenarios"]) == len(scenarios)
    assert (drill.work_dir / "report.json").is_file()
    corrupt = next((s for s in report.scenarios if s.scenario == "corrupt-checkpoint"), None)
    if corrupt:
        # repair moved the truncated commits entry aside, so Spark re-ran that batch and the tables skipped it
        assert corrupt.batches_replayed == 1 and "drop-tail" in corrupt.recovery


# The Iceberg kill drill in the heavy tier (CI runs it); kill -9 itself is in the default run's exactly-once tests.
@pytest.mark.parametrize("fmt,scenarios", [("delta", ["corrupt-checkpoint"]),
                                           pytest.param("iceberg", ["kill"], marks=pytest.mark.soak)])
def test_drill_scenarios_pass_and_clean_up(fmt, scenarios, conf_dir, settings, spark, tmp_path):
    drill = _drill(fmt, conf_dir, settings, spark, tmp_path)
    _assert_drill(drill, drill.run(scenarios), scenarios, spark)
    topics = KafkaAdmin(settings).topics()
    assert not [t for t in topics if drill.run_id in t], "drill topics are deleted after a passed scenario"


@pytest.mark.soak
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_drill_all_scenarios(fmt, conf_dir, settings, spark, tmp_path):
    drill = _drill(fmt, conf_dir, settings, spark, tmp_path)
    scenarios = scenarios_for(drill.config)
    assert "shard-split" not in scenarios  # Kinesis only
    _assert_drill(drill, drill.run(scenarios), scenarios, spark)


# Soak (about 12 min per format: five scenarios, each with two or three drivers). The moto server of
# tests/conftest.py (`moto_kinesis`) splits shards the way Kinesis does.
@pytest.mark.soak
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_kinesis_drill_all_scenarios_and_a_shard_split(fmt, conf_dir, settings, spark, tmp_path, monkeypatch,
                                                       moto_kinesis):
    from ingest.adapters.kinesis import KinesisClient, client_options

    endpoint = moto_kinesis["endpoint"]
    monkeypatch.setenv("LAKELINE_KINESIS_ENDPOINT", endpoint)  # the drill's driver processes
    local = settings.model_copy(update={"kinesis_endpoint": endpoint})
    data = pipeline_dict(fmt)
    data["source"] = {"kind": "kinesis", "stream": f"{data['pipeline']}-source"}
    config = load_pipeline(write_pipeline(conf_dir, data))
    drill = Drill(config, local, spark, events=2000, batch_size=400, work_dir=tmp_path / "drills", seed=7)
    scenarios = scenarios_for(config)
    assert scenarios[-1] == "shard-split"
    report = drill.run(scenarios)
    _assert_drill(drill, report, scenarios, spark)
    split = report.scenarios[-1]
    assert "split shard" in split.recovery and split.produced == 3000, split
    kinesis = KinesisClient(client_options(local))
    assert not any(kinesis.stream_exists(f"lakeline-drill.{drill.run_id}.{config.pipeline}_drill_{s}")
                   for s in ("kill", "shard_split")), "drill streams are deleted after a passed scenario"


class _BrokenRecoveryDrill(Drill):
    """A recovery that writes a batch twice (what a naive restart from a stale checkpoint would do)."""

    def _lose_checkpoint(self, target, report, bad):
        fault_at, recovered = super()._lose_checkpoint(target, report, bad)
        main, _ = tables_for(self.spark, target.config, target.settings)
        last = main.last_commit()
        main.append(main.read().filter("_offset < 5"), CommitRecord(last.pipeline, "naive", 0, {}, last.end, 0, 0))
        return fault_at, recovered


@pytest.mark.soak
def test_a_drill_that_finds_duplicates_fails_and_keeps_its_copy(conf_dir, settings, spark, tmp_path):
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta")))
    drill = _BrokenRecoveryDrill(config, settings, spark, events=1600, batch_size=400,
                                 work_dir=tmp_path / "drills", seed=6)
    report = drill.run(["lose-checkpoint"])
    result = report.scenarios[0]
    assert not report.passed and not result.passed
    assert result.duplicates > 0 and any("not exact" in p for p in result.problems)
    assert HadoopFS(spark).exists(result.location), "a failed drill keeps its copy for inspection"
    drill.teardown(drill.setup("lose-checkpoint"))
    assert not HadoopFS(spark).exists(result.location)


@pytest.mark.parametrize("fmt", ["delta", pytest.param("iceberg", marks=pytest.mark.soak)])
def test_repair_fixes_a_real_checkpoint_and_the_next_run_is_exact(fmt, conf_dir, settings, spark):
    """Damage a real Spark checkpoint on S3 three ways; repair detects and fixes each; runs stay exact."""
    data = pipeline_dict(fmt)
    data["source"]["max_offsets_per_trigger"] = 500
    config = load_pipeline(write_pipeline(conf_dir, data))
    fs = HadoopFS(spark)
    location = config.checkpoint_location(settings)
    main, _ = tables_for(spark, config, settings)

    def run():
        return Pipeline(config, settings, spark=spark, trigger="available-now").run(
            install_signal_handlers=False)

    def batches(log):
        return sorted(int(n) for n in fs.list_names(f"{location}/{log}") if n.isdigit())

    produced, bad = 0, 0
    for seed, damage in enumerate(("truncated-commit", "garbage-offsets", "gap")):
        result = produce(config, settings, 1500, bad_ratio=0.02, seed=40 + seed)
        produced, bad = produced + result.count, bad + result.bad_total
        run()
        last = batches("commits")[-1]
        if damage == "truncated-commit":
            fs.write_text(f"{location}/commits/{last}", "v1\n")
            expected = {(f"commits/{last}", "truncated")}
        elif damage == "garbage-offsets":
            fs.write_text(f"{location}/offsets/{last}", "\x00\x01 not an offsets file")
            fs.write_text(f"{location}/commits/{last}", "")
            expected = {(f"offsets/{last}", "garbage"), (f"commits/{last}", "truncated")}
        else:  # SPARK-38033: an offsets entry beyond a missing one
            text = fs.read_text(f"{location}/offsets/{last}")
            fs.write_text(f"{location}/offsets/{last + 2}", text)
            expected = {(f"offsets/{last + 1}", "gap")}
        plan = checkpoint_repair.diagnose(fs, location, main.last_commit())
        assert expected <= {(f.path, f.problem) for f in plan.findings}, plan.findings
        assert plan.action == "drop-tail" and all(f.blocking for f in plan.findings if f.problem != "no-lineage")
        moved = checkpoint_repair.apply(fs, plan)
        assert fs.exists(moved) and checkpoint_repair.diagnose(fs, location, main.last_commit()).healthy
        summary = run()
        assert summary.plan.action in ("resume", "rebuild")
        assert reconcile(config, settings, spark).exact
    final = reconcile(config, settings, spark)
    assert final.produced == produced and final.dead_letters == bad and final.rows + final.dead_letters == produced


def test_pipeline_start_rebuilds_on_damage_it_cannot_read(conf_dir, settings, spark):
    """Without running repair, a start over a truncated newest commit rebuilds from the table instead of
    failing inside Spark; the damaged checkpoint is moved aside, not deleted."""
    config = load_pipeline(write_pipeline(conf_dir, pipeline_dict("delta")))
    fs = HadoopFS(spark)
    location = config.checkpoint_location(settings)
    bad = produce(config, settings, 1000, bad_ratio=0.02, seed=50).bad_total
    Pipeline(config, settings, spark=spark, trigger="available-now").run(install_signal_handlers=False)
    last = max(int(n) for n in fs.list_names(f"{location}/commits") if n.isdigit())
    fs.write_text(f"{location}/commits/{last}", "")
    bad += produce(config, settings, 1000, bad_ratio=0.02, seed=51).bad_total
    summary = Pipeline(config, settings, spark=spark, trigger="available-now").run(
        install_signal_handlers=False)
    assert summary.plan.action == "rebuild" and f"commits/{last}" in summary.plan.reason
    assert summary.rows + summary.dead_letters == 1000
    parent = location.rsplit("/", 1)[0]
    assert any(n.startswith(location.rsplit("/", 1)[1] + ".replaced-") for n in fs.list_names(parent))
    report = reconcile(config, settings, spark)
    assert report.exact and report.produced == 2000 and report.dead_letters == bad
