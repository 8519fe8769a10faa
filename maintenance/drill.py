"""`lakeline drill`: rehearse checkpoint recovery on a copy of a pipeline and prove it with reconcile.

Each scenario runs on its own drill copy of the pipeline: its own Kafka topic or Kinesis stream
(lakeline-drill.<run>.<pipeline>), and a warehouse under <warehouse>/_drills/<pipeline>/<run>/<scenario>/ holding
the Delta tables, the checkpoint and its backups (Iceberg tables go to the namespace drill_<run>_<scenario>). A
drill never touches production data.

The pipeline runs as real `lakeline ingest` driver processes (so kill -9 is real). Scenarios:
- kill:               kill -9 the driver mid-stream while events keep arriving, restart.
- lose-checkpoint:    delete the checkpoint between runs, restart (rebuilds from the table's offsets).
- corrupt-checkpoint: truncate the newest commits entry and garble the oldest offsets entry; `checkpoint repair`
                      diagnoses and fixes; restart.
- stale-restore:      back up the checkpoint, ingest more, restore the old backup, restart.
- shard-split:        (Kinesis) split a shard while the driver runs and events keep arriving; the children are
                      read after their parent, nothing lost or repeated.
Recovery seconds = from the fault to the first new commit reported by the restarted driver (JVM start included).
"""

from __future__ import annotations

import json
import logging
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ingest.adapters.hadoop_fs import HadoopFS
from ingest.adapters.kafka_admin import KafkaAdmin
from ingest.adapters.kinesis import KinesisClient, client_options
from ingest.checkpoint import HEARTBEAT_STALE_SECONDS
from ingest.config import PipelineConfig
from ingest.errors import ConfigError, LakelineError
from ingest.events import BatchCommitted, BatchReplayed, Event, RunStarted, read_events
from ingest.formats import tables_for
from ingest.produce import produce
from ingest.reconcile import reconcile
from ingest.settings import Settings, child_env
from maintenance import checkpoint_repair, checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SCENARIOS = ("kill", "lose-checkpoint", "corrupt-checkpoint", "stale-restore", "shard-split")
KINESIS_ONLY = ("shard-split",)


def scenarios_for(config: PipelineConfig) -> list[str]:
    """Every scenario that applies to the pipeline's source (`--scenario all`)."""
    return [s for s in SCENARIOS if config.source.kind == "kinesis" or s not in KINESIS_ONLY]


@dataclass
class ScenarioReport:
    scenario: str
    format: str
    produced: int = 0
    rows: int = 0
    dead_letters: int = 0
    duplicates: int = 0
    missing: int = 0
    recovery_seconds: float | None = None
    batches_replayed: int = 0
    start_plan: str = ""          # what the restarted driver decided (resume | rebuild) and why
    recovery: str = ""            # what was done between the fault and the restart
    passed: bool = False
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    location: str = ""


@dataclass
class DrillReport:
    pipeline: str
    run_id: str
    started_at: str
    scenarios: list[ScenarioReport] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.scenarios) and all(s.passed for s in self.scenarios)

    def to_json(self) -> dict:
        return {"pipeline": self.pipeline, "run_id": self.run_id, "started_at": self.started_at,
                "passed": self.passed, "scenarios": [asdict(s) for s in self.scenarios]}


@dataclass
class IngestRun:
    """A `lakeline ingest --events -` driver process: its run events as they arrived, and its log."""

    process: subprocess.Popen
    log: Path
    events: list[tuple[float, Event]] = field(default_factory=list)
    reader: threading.Thread | None = None

    def committed(self, after: float = 0.0) -> list[float]:
        """Times at which the driver reported a batch that wrote rows or dead letters."""
        return [at for at, event in self.events if at >= after and isinstance(event, BatchCommitted)
                and event.rows + event.dead_letters > 0]

    @property
    def replayed(self) -> int:
        return sum(1 for _, event in self.events if isinstance(event, BatchReplayed))

    @property
    def start_plan(self) -> str:
        for _, event in self.events:
            if isinstance(event, RunStarted):
                return f"{event.action}: {event.reason}"
        return ""

    def tail(self, count: int = 15) -> str:
        lines = self.log.read_text(errors="replace").splitlines(keepends=True) if self.log.exists() else []
        return "".join(lines[-count:])

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            raise LakelineError(f"drill: ingest run did not finish within {timeout:.0f}s (log {self.log})") from None
        if self.reader:
            self.reader.join(30)
        return code


@dataclass
class DrillTarget:
    """One scenario's isolated copy of the pipeline."""

    scenario: str
    config: PipelineConfig
    settings: Settings
    yaml_path: Path
    work: Path
    source: str  # the drill's own topic (Kafka) or stream (Kinesis)


class Drill:
    """Runs drill scenarios for one pipeline. `spark` serves reconcile and the checkpoint tools in this process."""

    def __init__(self, config: PipelineConfig, settings: Settings, spark: "SparkSession",
                 run_id: str | None = None, events: int = 3000, batch_size: int = 500, work_dir: Path | None = None,
                 seed: int | None = None):
        if events < 4 * batch_size:
            raise ConfigError(f"drill: --events ({events}) must be at least 4 x the batch size ({batch_size}) so "
                              "that faults land between batches")
        self.config, self.settings, self.spark = config, settings, spark
        if run_id is not None and not re.fullmatch(r"[a-z0-9]{1,40}", run_id):
            raise ConfigError(f"drill: run id {run_id!r} must be 1-40 lowercase letters and digits")
        self.run_id = run_id or datetime.now(UTC).strftime("%Y%m%dt%H%M%S") + uuid.uuid4().hex[:4]
        self.events, self.batch_size = events, batch_size
        self.rng = random.Random(seed)
        from infra.paths import state_dir

        self.work_dir = (work_dir or state_dir() / "drills") / f"{config.pipeline}-{self.run_id}"
        warehouse = settings.require("warehouse", "LAKELINE_WAREHOUSE", "place the drill's tables")
        self.root = f"{warehouse}/_drills/{config.pipeline}/{self.run_id}"

    # ---- setup / teardown ---------------------------------------------------------------------------------
    def setup(self, scenario: str) -> DrillTarget:
        """The drill copy of the pipeline for `scenario`: own topic or stream, tables, checkpoint and backups."""
        suffix = scenario.replace("-", "_")
        data = self.config.model_dump(by_alias=True, mode="json")
        name = f"{self.config.pipeline}_drill_{suffix}"
        source = f"lakeline-drill.{self.run_id}.{name}"
        data["pipeline"] = name
        if self.config.source.kind == "kinesis":
            data["source"].update(stream=source, starting_position="TRIM_HORIZON", starting_timestamp=None,
                                  max_records_per_batch=self.batch_size)
        else:
            data["source"].update(topics=[source], topic_pattern=None, starting_offsets="earliest",
                                  max_offsets_per_trigger=self.batch_size)
        data["sink"].update(location=None, namespace=f"drill_{self.run_id}_{suffix}")
        data["checkpoint"].update(location=None, backup_location=None, keep_backups=3)
        data["trigger"] = "processing-time=1s"
        config = PipelineConfig.model_validate(data)
        settings = self.settings.model_copy(update={"warehouse": f"{self.root}/{suffix}"})
        work = self.work_dir / suffix
        work.mkdir(parents=True, exist_ok=True)
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config.model_dump(by_alias=True, mode="json", exclude_none=True),
                                       sort_keys=False))
        return DrillTarget(scenario, config, settings, path, work, source)

    def teardown(self, target: DrillTarget) -> None:
        """Remove the drill copy: topic or stream, Iceberg tables and namespace, and everything under its prefix."""
        if target.config.source.kind == "kinesis":
            self._kinesis(target).delete_stream(target.source)
        else:
            KafkaAdmin(target.settings).delete_topic(target.source)
        for table in tables_for(self.spark, target.config, target.settings):
            table.maintenance.drop()
        HadoopFS(self.spark).delete(target.settings.warehouse)

    def cleanup(self) -> list[str]:
        """Remove the drill copies of every scenario of this run (setup of a retried run, and teardown)."""
        fs, removed = HadoopFS(self.spark), []
        for scenario in scenarios_for(self.config):
            target = self.setup(scenario)
            if fs.exists(target.settings.warehouse) or self._source_exists(target):
                self.teardown(target)
                removed.append(scenario)
        return removed

    def _source_exists(self, target: DrillTarget) -> bool:
        if target.config.source.kind == "kinesis":
            return self._kinesis(target).stream_exists(target.source)

        return target.source in KafkaAdmin(target.settings).topics()

    @staticmethod
    def _kinesis(target: DrillTarget):
        return KinesisClient(client_options(target.settings))

    # ---- running the pipeline -----------------------------------------------------------------------------
    def start_ingest(self, target: DrillTarget, trigger: str, role: str) -> IngestRun:
        """A real `lakeline ingest` driver process; its run events (JSON lines on stdout) are read as they come,
        its log (stderr) goes to <work>/<role>.log."""
        log = target.work / f"{role}.log"
        env = child_env(warehouse=target.settings.warehouse, crash_at=None)
        process = subprocess.Popen([sys.executable, "-m", "lakeline", "ingest", "--pipeline",
                                    str(target.yaml_path), "--trigger", trigger, "--events", "-"],
                                   stdout=subprocess.PIPE, stderr=open(log, "w"), text=True, env=env)
        run = IngestRun(process, log)

        def read() -> None:
            for line in process.stdout:
                arrived = time.monotonic()
                run.events += [(arrived, event) for event in read_events(line)]

        run.reader = threading.Thread(target=read, name=f"drill-{role}", daemon=True)
        run.reader.start()
        return run

    def ingest(self, target: DrillTarget, role: str, timeout: float = 600) -> IngestRun:
        """Run the pipeline to the end of the backlog (available-now); fails loudly on a non-zero exit."""
        run = self.start_ingest(target, "available-now", role)
        code = run.wait(timeout)
        if code != 0:
            raise LakelineError(f"drill {target.scenario}: `lakeline ingest` ({role}) exited {code}; log "
                                f"{run.log}:\n{run.tail()}")
        return run

    def produce(self, target: DrillTarget, count: int, report: ScenarioReport, bad: dict) -> None:
        result = produce(target.config, target.settings, count, bad_ratio=0.01, seed=self.rng.randrange(1 << 30),
                         partitions=2, record_dir=target.work)
        report.produced += result.count
        bad["total"] = bad.get("total", 0) + result.bad_total

    # ---- scenarios ----------------------------------------------------------------------------------------
    def run(self, scenarios: list[str], keep: bool = False) -> DrillReport:
        """Run `scenarios` one after another; each one's drill copy is removed afterwards unless it failed
        (kept for forensics) or `keep` is set."""
        report = DrillReport(self.config.pipeline, self.run_id, datetime.now(UTC).isoformat(timespec="seconds"))
        for scenario in scenarios:
            if scenario not in scenarios_for(self.config):
                raise ConfigError(f"drill: scenario {scenario!r} does not apply to pipeline {self.config.pipeline} "
                                  f"({self.config.source.kind}); choose from {', '.join(scenarios_for(self.config))}")
            target = self.setup(scenario)
            log.info(f"[drill {scenario}] {self.config.sink.format} copy at {target.settings.warehouse}, "
                     f"{'stream' if target.config.source.kind == 'kinesis' else 'topic'} {target.source}")
            result = self.run_scenario(target)
            report.scenarios.append(result)
            log.info(f"[drill {scenario}] {'PASSED' if result.passed else 'FAILED'} in {result.seconds:.0f}s: "
                     f"recovery {result.recovery_seconds}s, duplicates {result.duplicates}, missing "
                     f"{result.missing}" + "".join(f"\n    ! {p}" for p in result.problems))
            if result.passed and not keep:
                self.teardown(target)
            elif not result.passed:
                log.warning(f"[drill {scenario}] kept for inspection: {target.settings.warehouse}, logs in "
                            f"{target.work}")
        self._write_report(report)
        return report

    def run_scenario(self, target: DrillTarget) -> ScenarioReport:
        report = ScenarioReport(target.scenario, target.config.sink.format, location=target.settings.warehouse)
        started = time.monotonic()
        bad: dict = {}
        body = {"kill": self._kill, "lose-checkpoint": self._lose_checkpoint,
                "corrupt-checkpoint": self._corrupt_checkpoint, "stale-restore": self._stale_restore,
                "shard-split": self._shard_split}
        try:
            fault_at, recovered = body[target.scenario](target, report, bad)
            first = recovered.committed(after=fault_at)
            if not first:
                report.problems.append(f"the restarted driver reported no new commit (log {recovered.log})")
            else:
                report.recovery_seconds = round(first[0] - fault_at, 2)
            report.batches_replayed = recovered.replayed
            report.start_plan = recovered.start_plan
            self._verify(target, report, bad.get("total", 0))
        except LakelineError as exc:
            report.problems.append(str(exc))
        report.passed = not report.problems
        report.seconds = round(time.monotonic() - started, 1)
        return report

    def _kill(self, target: DrillTarget, report: ScenarioReport, bad: dict) -> tuple[float, IngestRun]:
        self.produce(target, self.events, report, bad)
        victim = self.start_ingest(target, "processing-time=1s", "1-victim")
        self._until(victim, lambda: len(victim.committed()) >= 2, "two commits before the kill", 300)
        self.produce(target, self.events, report, bad)  # keeps arriving while the driver dies
        time.sleep(self.rng.uniform(0.0, 2.0))          # land anywhere inside a batch
        victim.process.send_signal(signal.SIGKILL)
        fault_at = time.monotonic()
        victim.wait(60)
        report.recovery = f"kill -9 after {len(victim.committed())} committed batches; restart"
        return fault_at, self.ingest(target, "2-recovery")

    def _lose_checkpoint(self, target: DrillTarget, report: ScenarioReport, bad: dict) -> tuple[float, IngestRun]:
        self.produce(target, self.events, report, bad)
        self.ingest(target, "1-initial")
        self.produce(target, self.events // 2, report, bad)
        HadoopFS(self.spark).delete(target.config.checkpoint_location(target.settings))
        fault_at = time.monotonic()
        report.recovery = "checkpoint deleted; restart (the pipeline rebuilds it from the table's offsets)"
        recovered = self.ingest(target, "2-recovery")
        if not recovered.start_plan.startswith("rebuild"):
            report.problems.append(f"expected a rebuild after losing the checkpoint, got {recovered.start_plan!r}")
        return fault_at, recovered

    def _corrupt_checkpoint(self, target: DrillTarget, report: ScenarioReport, bad: dict) -> tuple[float, IngestRun]:
        self.produce(target, self.events, report, bad)
        self.ingest(target, "1-initial")
        self.produce(target, self.events // 2, report, bad)
        fs = HadoopFS(self.spark)
        location = target.config.checkpoint_location(target.settings)
        commits = sorted(int(n) for n in fs.list_names(f"{location}/commits") if n.isdigit())
        if len(commits) < 4:
            raise LakelineError(f"drill corrupt-checkpoint: only {len(commits)} committed batches; need 4")
        # A crash mid-write on a store without atomic rename leaves an empty newest entry; bit rot garbles an old one.
        fs.write_text(f"{location}/commits/{commits[-1]}", "")
        fs.write_text(f"{location}/offsets/{commits[0]}", "\x00garbage\x00")
        fault_at = time.monotonic()
        table = self._table_commit(target)
        plan = checkpoint_repair.diagnose(fs, location, table)
        found = {(f.path, f.problem) for f in plan.findings}
        for expected in ((f"commits/{commits[-1]}", "truncated"), (f"offsets/{commits[0]}", "garbage")):
            if expected not in found:
                report.problems.append(f"repair did not detect {expected[0]} ({expected[1]}); found {sorted(found)}")
        moved = checkpoint_repair.apply(fs, plan)
        after = checkpoint_repair.diagnose(fs, location, table)
        if not after.healthy:
            report.problems.append(f"checkpoint still needs repair after --apply: {after.explanation}")
        report.recovery = f"repair: {plan.action} ({plan.explanation}); moved to {moved}; restart"
        return fault_at, self.ingest(target, "2-recovery")

    def _stale_restore(self, target: DrillTarget, report: ScenarioReport, bad: dict) -> tuple[float, IngestRun]:
        fs = HadoopFS(self.spark)
        location = target.config.checkpoint_location(target.settings)
        root = target.config.backup_location(target.settings)
        self.produce(target, self.events, report, bad)
        self.ingest(target, "1-initial")
        manifest = checkpoints.backup(fs, location, root, target.config.pipeline, self._table_commit(target),
                                      keep=3)
        self.produce(target, self.events, report, bad)
        self.ingest(target, "2-after-backup")
        self.produce(target, self.events // 2, report, bad)
        fault_at = time.monotonic()
        checkpoints.restore(fs, root, manifest.backup_id, location, HEARTBEAT_STALE_SECONDS)
        report.recovery = f"restored backup {manifest.backup_id} (batch {manifest.last_committed_batch}); restart"
        recovered = self.ingest(target, "3-recovery")
        if not recovered.start_plan.startswith("rebuild"):
            report.problems.append(f"expected a rebuild from a stale backup, got {recovered.start_plan!r}")
        return fault_at, recovered

    def _shard_split(self, target: DrillTarget, report: ScenarioReport, bad: dict) -> tuple[float, IngestRun]:
        self.produce(target, self.events, report, bad)
        run = self.start_ingest(target, "processing-time=1s", "1-split")
        self._until(run, lambda: len(run.committed()) >= 2, "two commits before the split", 300)
        kinesis = self._kinesis(target)
        parent = next(s for s in kinesis.list_shards(target.source) if not s.closed)
        children = kinesis.split_shard(target.source, parent.shard_id)
        fault_at = time.monotonic()
        self.produce(target, self.events // 2, report, bad)  # lands on the open shards, the children among them

        def landed() -> int:
            return sum(e.rows + e.dead_letters for _, e in run.events if isinstance(e, BatchCommitted))

        self._until(run, lambda: landed() >= report.produced, "every record after the split", 300)
        run.process.send_signal(signal.SIGTERM)
        if run.wait(120) != 0:
            raise LakelineError(f"drill shard-split: the driver exited {run.process.returncode} on SIGTERM; log "
                                f"{run.log}:\n{run.tail()}")
        report.recovery = f"split shard {parent.shard_id} into {', '.join(children)} while the driver ran"
        return fault_at, run

    @staticmethod
    def _until(run: IngestRun, done, what: str, timeout: float) -> None:
        """Poll `done` until true; the driver exiting first, or `timeout`, is a failure naming `what`."""
        deadline = time.monotonic() + timeout
        while not done():
            if run.process.poll() is not None:
                raise LakelineError(f"drill: the driver exited ({run.process.returncode}) before {what}; log "
                                    f"{run.log}:\n{run.tail()}")
            if time.monotonic() > deadline:
                run.process.kill()
                raise LakelineError(f"drill: no {what} within {timeout:.0f}s; log {run.log}")
            time.sleep(0.2)

    # ---- verification -------------------------------------------------------------------------------------
    def _table_commit(self, target: DrillTarget):
        return tables_for(self.spark, target.config, target.settings)[0].last_commit()

    def _verify(self, target: DrillTarget, report: ScenarioReport, bad_total: int) -> None:
        audit = reconcile(target.config, target.settings, self.spark)
        report.rows, report.dead_letters = audit.rows, audit.dead_letters
        report.duplicates, report.missing = audit.duplicates, audit.missing
        if not audit.exact:
            report.problems.append(f"not exact: {audit.duplicates} duplicates, {audit.missing} missing "
                                   f"(samples {audit.duplicate_sample[:3]} {audit.missing_sample[:3]})")
        if audit.produced != report.produced:
            report.problems.append(f"the source holds {audit.produced} records, the drill produced {report.produced}")
        if audit.rows + audit.dead_letters != report.produced:
            report.problems.append(f"rows {audit.rows} + dead letters {audit.dead_letters} != produced "
                                   f"{report.produced}")
        if audit.dead_letters != bad_total:
            report.problems.append(f"{audit.dead_letters} dead letters, {bad_total} bad records produced")
        if not (audit.ranges_contiguous and audit.ranges_non_overlapping):
            report.problems.append("committed offset ranges: " + "; ".join(audit.range_problems[:3]))

    def _write_report(self, report: DrillReport) -> None:
        text = json.dumps(report.to_json(), indent=2)
        HadoopFS(self.spark).write_text(f"{self.root}/report.json", text)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "report.json").write_text(text)
