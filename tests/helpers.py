"""Test helpers: pipeline YAML builders with unique names, so tests never share topics, tables or checkpoints; a
background producer and the kill -9 loop the Kafka and Kinesis suites share."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BASE_SCHEMA = {
    "fields": [
        {"name": "event_id", "type": "string", "required": True},
        {"name": "event_time", "type": "timestamp", "required": True},
        {"name": "customer_id", "type": "string", "required": True},
        {"name": "order_id", "type": "string", "required": True},
        {"name": "status", "type": "string"},
        {"name": "amount", "type": "double", "required": True},
        {"name": "currency", "type": "string"},
        {"name": "items", "type": "int"},
        {"name": "country", "type": "string"},
    ],
    "max_record_bytes": 4096,
}


def pipeline_dict(fmt: str, name: str | None = None, topic: str | None = None, **overrides) -> dict:
    name = name or f"t_{fmt}_{uuid.uuid4().hex[:8]}"
    data = {
        "pipeline": name,
        "source": {"kind": "kafka", "topics": [topic or name], "starting_offsets": "earliest",
                   "max_offsets_per_trigger": 5000},
        "schema": BASE_SCHEMA,
        "sink": {"format": fmt, "table": name, "namespace": "tests",
                 "partition": {"column": "event_date", "source": "event_time", "transform": "day"}},
        "trigger": "processing-time=1s",
    }
    for key, value in overrides.items():
        data[key] = value
    return data


def write_pipeline(directory: Path, data: dict) -> Path:
    path = directory / f"{data['pipeline']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def events_of(path: Path, *kinds: type) -> list:
    """The run events of `kinds` in a `lakeline ingest --events FILE` stream written so far (a line still being
    written is left for the next look)."""
    from ingest.events import read_events

    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [event for event in read_events(complete) if isinstance(event, kinds)]


def assert_exact(report, produced_total: int, bad_total: int) -> None:
    """A reconcile report of exactly once: nothing duplicated or missing, every produced record a row or a dead
    letter, the dead letters the ones produced bad, the commit ranges chained without gap or overlap."""
    assert report.duplicates == 0, report.duplicate_sample
    assert report.missing == 0, report.missing_sample
    assert report.produced == produced_total
    assert report.rows + report.dead_letters == produced_total
    assert report.dead_letters == bad_total
    assert report.ranges_contiguous and report.ranges_non_overlapping, report.range_problems


def lakeline_json(env: dict[str, str], *args: str, timeout: float = 600) -> dict:
    """Run `lakeline ARGS --output json` in its own process with `env`; its JSON report (the command must
    succeed)."""
    import json

    done = subprocess.run([sys.executable, "-m", "lakeline", *args, "--output", "json"], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def lakeline_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """Run `lakeline ARGS` in this process (no interpreter start): (exit code, stdout, stderr)."""
    import logging

    from lakeline.cli import main

    capsys.readouterr()  # what the test printed before is not the command's
    try:
        code = main(list(args))
    finally:  # the command logs to the captured stderr; later records (the stack's teardown) must go elsewhere
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h.get_name() == "lakeline"]:
            root.removeHandler(handler)
    out, err = capsys.readouterr()
    return code, out, err


def load_dag(dag_id: str):
    """The repo's DAG `dag_id`, from a fresh DagBag of dags/ (which must import without errors); its `.test()` runs it
    with this process's environment (LAKELINE_CONF_DIR among it)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags"))
    assert bag.import_errors == {}, bag.import_errors
    return bag.get_dag(dag_id)


@contextmanager
def captured_task_logs() -> Iterator[io.StringIO]:
    """Everything the DAG runs inside write: stdout, stderr and every logging record at INFO and above. Airflow's
    logging handlers keep the stream they were made with, so when an earlier test in the process configured them,
    redirecting the streams alone misses their lines; a root handler for the duration catches them wherever they go."""
    import logging

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    if level > logging.INFO:  # NOTSET (0) on the root already lets every record through
        root.setLevel(logging.INFO)
    try:
        with redirect_stdout(text), redirect_stderr(text):
            yield text
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def wait_for(check, what: str, timeout: float = 180, every: float = 1.0) -> None:
    """Poll `check` until it holds, or fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def row_count(table) -> int:
    """Rows in a LakeTable; -1 while the stream has not created it yet."""
    from pyspark.errors import AnalysisException

    try:
        return table.read().count()
    except AnalysisException:
        return -1


@dataclass
class Produced:
    """What a background producer has sent so far."""

    count: int = 0
    bad: int = 0


@contextmanager
def producing(config, settings, chunk: int, rate: float, seed: int, produced: Produced | None = None
              ) -> Iterator[Produced]:
    """Keep producing `chunk` events at `rate`/s (1% bad) in a thread until the block ends; yields the running
    counts (add to `produced` to continue an earlier tally)."""
    from ingest.produce import produce

    tally = produced or Produced()
    stop = threading.Event()

    def keep_producing() -> None:
        next_seed = seed
        while not stop.is_set():
            result = produce(config, settings, chunk, rate=rate, bad_ratio=0.01, seed=next_seed)
            tally.count += result.count
            tally.bad += result.bad_total
            next_seed += 1

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        yield tally
    finally:
        stop.set()
        producer.join(60)


@dataclass
class KillLoop:
    """The outcome of `kill_loop`: what was produced, when each driver was killed, and the draining run."""

    produced: Produced
    killed_after: list[float] = field(default_factory=list)
    final: subprocess.CompletedProcess | None = None


def kill_loop(config, settings, pipeline_path: Path, logs: Path, kills: int) -> KillLoop:
    """kill -9 `lakeline ingest` at `kills` random moments (12-40 s after each start, seeded by LAKELINE_TEST_SEED)
    while a producer keeps writing 500 events/s; then drain what is left with an available-now run. The caller
    reconciles. Shared by the Kafka and Kinesis suites so both exercise the same fault."""
    rng = random.Random(int(os.environ.get("LAKELINE_TEST_SEED", "9")))
    command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(pipeline_path)]
    outcome = KillLoop(Produced())
    with producing(config, settings, chunk=1000, rate=500, seed=100, produced=outcome.produced):
        for attempt in range(kills):
            log_path = logs / f"run{attempt}.log"
            with open(log_path, "w") as log:
                driver = subprocess.Popen(command + ["--trigger", "processing-time=500ms"], stdout=log,
                                          stderr=subprocess.STDOUT, env=os.environ.copy())
                delay = rng.uniform(12, 40)
                time.sleep(delay)  # the fault lands at a random moment: this wait is the test, not a poll
                assert driver.poll() is None, log_path.read_text()[-3000:]
                driver.send_signal(signal.SIGKILL)
                driver.wait(30)
                outcome.killed_after.append(round(delay, 1))
    print(f"killed after {outcome.killed_after} seconds")
    outcome.final = subprocess.run(command + ["--trigger", "available-now"], capture_output=True, text=True,
                                   env=os.environ.copy(), timeout=900)
    assert outcome.final.returncode == 0, outcome.final.stdout[-3000:] + outcome.final.stderr[-3000:]
    return outcome


class LocalFS:
    """The file-ops protocol of ingest.adapters.hadoop_fs.HadoopFS on the local disk (unit tests)."""

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def list_names(self, path: str) -> list[str]:
        p = Path(path)
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []

    def list_files(self, path: str) -> list[str]:
        root = Path(path)
        return sorted(str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()) if root.is_dir() else []

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def read_text(self, path: str) -> str:
        return Path(path).read_text()

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode())

    def rename(self, src: str, dst: str) -> None:
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        Path(src).rename(dst)

    def delete(self, path: str) -> None:
        import shutil

        p = Path(path)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def produce_with_headers(settings, topic: str, records: "list[tuple[bytes, dict[str, str]]]",
                         partitions: int = 2) -> None:
    """Send `records` (payload, headers) to `topic`, made with `partitions` partitions if new, and wait for every
    delivery (`lakeline produce` sends sample records without headers)."""
    from confluent_kafka import Producer

    from ingest.adapters.kafka_admin import KafkaAdmin, librdkafka_config, new_client

    KafkaAdmin(settings).ensure_topic(topic, partitions)
    producer = new_client(Producer, {**librdkafka_config(settings), "enable.idempotence": True})
    failed: list[str] = []
    for index, (payload, headers) in enumerate(records):
        producer.produce(topic, payload, key=str(index).encode(), headers=list(headers.items()),
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]
