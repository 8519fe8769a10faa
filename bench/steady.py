"""Steady state: M minutes of open-loop load into a Delta and an Iceberg pipeline in one Lakeline application while
the real Airflow scheduler compacts, expires and backs up both tables beside it; per-minute latency, files,
reader metadata, memory and CPU. Writes bench/results/steady-<rate>-<date>.{json,md,png}.

    .venv/bin/python -m bench.steady --rate 5000 --minutes 30
    .venv/bin/python -m bench.steady --formats delta    # one pipeline, like for like with a peer (…-delta-<date>)
    .venv/bin/python -m bench.steady --quick            # 3 minutes, compaction every minute, nothing written
    .venv/bin/python -m bench.steady --peers spark-delta delta-rs spark-iceberg

The run: a fresh topic and bucket; table files (a temp conf dir) partition by hour of event_time with a policy
sized for this scale (small files below half of 32MB, a per-run byte budget, the live partition compacted past
60 files, short retention windows; the Delta table's removed-file floor lowered to match). Before the
load, --history bursts of sample events with event times over the past two days make a few dozen settled
partitions of small files, as a day of running leaves behind. Airflow (AIRFLOW_HOME in the temp dir, the repo's
dags/, a SQLite database, the pools of maintenance.pools, LocalExecutor with a task slot per pool slot):
api-server (execution API only), scheduler and dag-processor, the compaction DAGs every --compact-every minutes
(LAKELINE_DAG_COMPACT_EVERY), the files-bound DAGs every --bound-every minutes (LAKELINE_DAG_BOUND_EVERY),
retention after each compaction and the checkpoint backups every --backup-every minutes; the drill and freshness
DAGs stay paused. The load is bench.load in one-minute segments scheduled back to back (one continuous schedule).

Per minute of intended send time: commit-visible latency per table (commit timestamp - intended send time, read
from each commit's own data files as it lands, before compaction rewrites them), commits, files per partition
(max) and in total, what a reader must read (Delta: log entries since the last checkpoint and their bytes;
Iceberg: manifests and metadata.json bytes), resident memory and CPU of the Lakeline application's processes
and of Airflow's (its task processes included), compaction task runs and the stream's retried commits. At the
end: the load stops, the application drains, `lakeline reconcile` checks both pipelines, dead letters = 0.
The start after a long day (not in --quick; --no-restart skips it): the application is killed -9 under
RESTART_LOAD_S of load at the run's rate and started again at once, twice: after the history bursts, on fresh
tables and before Airflow starts, and after the run with Airflow stopped, on the run's history (its thousands of
commits, compacted and expired); per table, seconds from the kill to its first new commit, and the ratio.
Peers (--peers) run after Lakeline, one at a time, at the same rate and length, without maintenance; --peers-only
runs them without a Lakeline run (read them against a Lakeline run's own results file).
--no-maintenance runs Lakeline the same way without Airflow (the baseline: what the box gives the stream alone).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, UTC
from pathlib import Path

import yaml

from bench.common import document, result_name, write

PEERS = ("spark-delta", "delta-rs", "spark-iceberg")
FORMATS = ("delta", "iceberg")  # Lakeline's pipelines in the one application (--formats)
SEGMENT_S = 60  # one bench.load process per minute of schedule, built while the previous one sends
SAMPLE_S = 5  # memory and CPU samples
RESTART_LOAD_S = 120  # the load around a restart measurement (at the run's rate): the kill, then the new commits
RESTART_KILL_AT_S = 20
SLOW_BATCH_S = 5.0  # a stream batch over this is listed by itself in the results (batch, seconds, phases)
NAMESPACE = "bench_steady"
# Scaled so a settled hour partition of the history is over threshold and one run's budget takes a few of them.
POLICY = {"compaction": {"target_file_size": "32MB", "min_small_files": 5, "small_file_ratio": 0.3,
                         "max_bytes_per_run": "2MB", "hot_partition_window": "2m",
                         # The live hour partition gains a file a second: compacted beside the stream past this.
                         "max_files_per_partition": 60},
          "retention": {"retain": "10m", "min_retain": "1m", "orphan_older_than": "10m", "min_orphan_age": "1m",
                        "allow_short_windows": True}}


# ---- the tables and what a reader of them sees ---------------------------------------------------------------
class CommitTracker:
    """Reads each new data commit of one table once, as it lands: its commit time and the intended send time of
    every row it added (so compaction rewriting the files later changes nothing), and the table's layout."""

    def __init__(self, fmt: str, location: str, settings):
        self.fmt, self.location, self.settings = fmt, location, settings
        self.rows: list[tuple[int, int]] = []  # (intended send ms, commit ms)
        self.commit_times: list[int] = []
        self.records = 0  # committed so far, from the commits' own counts
        self.read_from_ms: int | None = None  # read rows of commits from then on (the load's), only count before
        self._seen: set = set()
        if fmt == "delta":
            from bench.delta_log import DeltaLogReader, s3_filesystem

            self._log, self._fs = DeltaLogReader(location, settings), s3_filesystem(settings)

    def poll(self) -> None:
        import pyarrow.parquet as pq

        for at_ms, records, paths, open_file in self._new_commits():
            self.commit_times.append(at_ms)
            self.records += records
            if self.read_from_ms is None or at_ms < self.read_from_ms:
                continue
            for path in paths:
                with open_file(path) as stream:
                    column = pq.read_table(stream, columns=["event_time"]).column("event_time")
                self.rows += [(int(v.timestamp() * 1000), at_ms) for v in column.to_pylist() if v is not None]

    def _new_commits(self):
        if self.fmt == "delta":
            from urllib.parse import unquote

            from ingest.adapters.object_store import split_s3_uri

            bucket, key = split_s3_uri(self.location.rstrip("/"))
            for commit in self._log.commits():
                if commit["version"] in self._seen or not commit["files"] or commit["timestamp_ms"] is None:
                    continue
                self._seen.add(commit["version"])
                yield commit["timestamp_ms"], commit["records"], \
                    [f"{bucket}/{key}/{unquote(p)}" for p in commit["files"]], self._fs.open_input_file
            return
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self._iceberg()
        except NoSuchTableError:
            return
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number or 0):
            operation = str(snapshot.summary.operation.value) if snapshot.summary else ""
            if snapshot.snapshot_id in self._seen or operation not in ("append", "overwrite"):
                continue
            self._seen.add(snapshot.snapshot_id)
            records = int(snapshot.summary.get("added-records") or 0)
            if records == 0:
                continue
            if self.read_from_ms is None or snapshot.timestamp_ms < self.read_from_ms:
                yield snapshot.timestamp_ms, records, [], None
                continue
            added = [entry.data_file.file_path for manifest in snapshot.manifests(table.io)
                     if manifest.added_snapshot_id == snapshot.snapshot_id
                     for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                     if entry.snapshot_id == snapshot.snapshot_id and entry.data_file.content == 0]
            yield snapshot.timestamp_ms, records, added, lambda path: table.io.new_input(path).open()

    def _iceberg(self):
        from bench.iceberg_log import _table_name
        from ingest.formats.iceberg import iceberg_catalog

        return iceberg_catalog(self.settings).load_table(_table_name(self.location))

    def layout(self) -> dict:
        """Files per partition (max) and in total, and what a reader reads before the data."""
        try:
            return self._delta_layout() if self.fmt == "delta" else self._iceberg_layout()
        except Exception as exc:  # noqa: BLE001 - a sample that failed is recorded as such, the run goes on
            return {"layout_error": f"{type(exc).__name__}: {exc}"[:200]}

    def _delta_layout(self) -> dict:
        import re

        from deltalake import DeltaTable

        from ingest.adapters.object_store import s3_client, split_s3_uri
        from ingest.formats.delta import delta_rs_uri, delta_storage_options

        actions = DeltaTable(delta_rs_uri(self.location),
                             storage_options=delta_storage_options(self.settings)).get_add_actions(flatten=True)
        columns = [c for c in actions.schema.names if c.startswith("partition.")]
        keys = list(zip(*[actions.column(c).to_pylist() for c in columns], strict=True)) if columns else []
        per_partition: dict = {}
        for k in keys:
            per_partition[k] = per_partition.get(k, 0) + 1
        client = s3_client(self.settings)
        bucket, prefix = split_s3_uri(self.location.rstrip("/") + "/_delta_log/")
        try:
            checkpoint = json.loads(client.get_object(Bucket=bucket, Key=prefix + "_last_checkpoint")["Body"]
                                    .read())["version"]
        except client.exceptions.NoSuchKey:
            checkpoint = -1
        since = [item["Size"] for page in client.get_paginator("list_objects_v2").paginate(
                     Bucket=bucket, Prefix=prefix, StartAfter=f"{prefix}{max(checkpoint, 0):020d}.json")
                 for item in page.get("Contents", []) if re.fullmatch(r"\d{20}\.json", item["Key"][len(prefix):])]
        return {"files": actions.num_rows, "partitions": len(per_partition),
                "max_files_per_partition": max(per_partition.values(), default=0),
                "log_entries_since_checkpoint": len(since), "log_bytes_since_checkpoint": sum(since)}

    def _iceberg_layout(self) -> dict:
        table = self._iceberg()
        files = table.inspect.files().select(["partition"]).column("partition").to_pylist()
        per_partition: dict = {}
        for partition in files:
            key = json.dumps(partition, sort_keys=True, default=str)
            per_partition[key] = per_partition.get(key, 0) + 1
        snapshot = table.current_snapshot()
        return {"files": len(files), "partitions": len(per_partition),
                "max_files_per_partition": max(per_partition.values(), default=0),
                "manifests": len(snapshot.manifests(table.io)) if snapshot else 0,
                "metadata_json_bytes": len(table.io.new_input(table.metadata_location))}


# ---- processes: memory and CPU of a tree ---------------------------------------------------------------------
def tree_usage(pids: list[int]) -> tuple[float, dict[tuple[int, float], float]]:
    """(resident MB, CPU seconds so far per process) of the processes under `pids`, each keyed by (pid, start time)
    and counting its reaped children."""
    import psutil

    rss = 0.0
    cpu: dict[tuple[int, float], float] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            members = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in members:
            try:
                key = (process.pid, process.create_time())
                if key in cpu:
                    continue
                times = process.cpu_times()
                rss += process.memory_info().rss
                cpu[key] = times.user + times.system + times.children_user + times.children_system
            except psutil.NoSuchProcess:
                continue
    return rss / 2**20, cpu


class CpuTotal:
    """CPU seconds a changing process tree has used, never going down: each sample adds what every process used
    since the sample before (a new process from zero). Summing the tree's counters instead drops when a process
    exits with its time (Airflow's task processes), which gave negative shares."""

    def __init__(self):
        self.seconds = 0.0
        self._last: dict[tuple[int, float], float] = {}

    def add(self, per_process: dict[tuple[int, float], float]) -> float:
        self.seconds += sum(max(0.0, used - self._last.get(key, 0.0)) for key, used in per_process.items())
        self._last = per_process
        return self.seconds


def _signal_and_wait(process: subprocess.Popen, grace: float) -> None:
    from bench.latency import _signal_group

    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- Airflow ---------------------------------------------------------------------------------------------------
class Airflow:
    """The real scheduler: api-server (execution API only), scheduler and dag-processor in AIRFLOW_HOME=`home`,
    each in its own process group; `stop()` ends all three and whatever tasks they started."""

    COMMANDS = (["api-server", "--apps", "execution", "--host", "127.0.0.1"], ["scheduler"], ["dag-processor"])

    def __init__(self, home: Path, env: dict[str, str], slots: int):
        from infra.paths import REPO_ROOT

        self.home, self.port = home, _free_port()
        # an Airflow of its own: nothing inherited (a test session's AIRFLOW__DATABASE__SQL_ALCHEMY_CONN, say)
        self.env = {**{k: v for k, v in env.items() if not k.startswith("AIRFLOW")}, "AIRFLOW_HOME": str(home),
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    # a worker per pool slot (maintenance.pools): the LocalExecutor takes whatever the pools let
                    # through, so the files bound never waits behind a backup in its queue
                    "AIRFLOW__CORE__PARALLELISM": str(slots), "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                    "AIRFLOW__API__PORT": str(self.port),
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
                    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                    # the settings do not change during a run: parse the DAG files once
                    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3600",
                    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2"}
        self.processes: list[subprocess.Popen] = []
        self.airflow = str(Path(sys.executable).with_name("airflow"))

    def cli(self, *args: str) -> str:
        done = subprocess.run([self.airflow, *args], env=self.env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def start(self, pools: dict) -> None:
        """Start the three processes with `pools` (`airflow pools import` form) created."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.cli("db", "migrate")
        pool_file = self.home / "pools.json"
        pool_file.write_text(json.dumps(pools))
        self.cli("pools", "import", str(pool_file))
        for command in self.COMMANDS:
            log = open(self.home / f"{command[0]}.log", "w")
            self.processes.append(subprocess.Popen([self.airflow, *command], env=self.env, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True))

    def wait_parsed(self, dag_ids: list[str], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not set(dag_ids) <= set(self.query("SELECT dag_id FROM dag")):
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"Airflow did not parse {dag_ids} (see {self.home}/dag-processor.log)")
            time.sleep(2)

    def unpause(self, pattern: str) -> None:
        self.cli("dags", "unpause", "--treat-dag-id-as-regex", "-y", pattern)

    def check_alive(self) -> None:
        if not self.processes:  # not started (--no-maintenance) or stopped
            return
        for process, command in zip(self.processes, self.COMMANDS, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"airflow {command[0]} exited ({process.returncode}); see "
                                   f"{self.home}/{command[0]}.log")

    def query(self, sql: str) -> list:
        try:
            with sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=10) as db:
                rows = db.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []  # not migrated yet, or locked past the timeout: the next poll reads it
        return [row[0] if len(row) == 1 else row for row in rows]

    def task_runs(self) -> list[dict]:
        """Every Lakeline maintenance task instance: dag, task, run, state, pool, queued/start/end (epoch ms),
        tries."""
        rows = self.query("SELECT dag_id, task_id, run_id, state, pool, queued_dttm, start_date, end_date, "
                          "try_number FROM task_instance WHERE dag_id LIKE 'lakeline_%' ORDER BY start_date")

        def ms(value):
            return int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp() * 1000) if value else None

        return [{"dag": d, "task": t, "run": r, "state": s, "pool": p, "queued_ms": ms(q), "start_ms": ms(a),
                 "end_ms": ms(b), "tries": n} for d, t, r, s, p, q, a, b, n in rows]

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        for process in self.processes:  # the scheduler first ends its task processes
            if process.poll() is None:
                _signal_and_wait(process, 30)


# ---- the run -------------------------------------------------------------------------------------------------
def write_conf(conf: Path, run_id: str, topic: str, bucket: str,
               formats: tuple[str, ...] = FORMATS) -> dict[str, dict]:
    """Pipeline and table files for a pipeline of each format on `topic`; {format: {pipeline, table file,
    location}}."""
    from infra.paths import REPO_ROOT

    template = yaml.safe_load((REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml").read_text())
    (conf / "pipelines").mkdir(parents=True)
    (conf / "tables").mkdir()
    out = {}
    partition = [{"column": "event_hour", "source": "event_time", "transform": "hour"}]
    for fmt in formats:
        name = f"steady_{fmt}_{run_id}"
        sink = {"format": fmt, "table": name, "partition": partition}
        if fmt == "delta":
            location = sink["location"] = f"s3a://{bucket}/{name}"
        else:
            sink["namespace"] = NAMESPACE
            location = f"lakeline.{NAMESPACE}.{name}"
        pipeline = conf / "pipelines" / f"{name}.yaml"
        pipeline.write_text(yaml.safe_dump({
            "pipeline": name, "source": {"kind": "kafka", "topics": [topic], "starting_offsets": "earliest"},
            "schema": template["schema"], "sink": sink, "trigger": "processing-time=1s",
            "checkpoint": {"location": f"s3a://{bucket}/_checkpoints/{name}", "keep_backups": 3}}, sort_keys=False))
        table = conf / "tables" / f"{name}.yaml"
        table.write_text(yaml.safe_dump({"table": name, "pipeline": f"../pipelines/{name}.yaml", "which": "main",
                                         **POLICY}, sort_keys=False))
        out[fmt] = {"pipeline": pipeline, "table": name, "location": location}
    return out


class Load:
    """One open-loop schedule of `minutes` at `rate`, as back-to-back one-minute bench.load segments: each is
    started early enough to build its events, with --start-at the previous one's end."""

    def __init__(self, topic: str, rate: int, seconds: float, seed: int = 2):
        self.topic, self.rate, self.seconds, self.seed = topic, rate, seconds, seed
        # seconds to build a segment's events before it is due, with room for a busy machine
        self.lead = 30 + rate * SEGMENT_S / 10_000
        self.start_s = time.time() + self.lead
        self.results: list[dict] = []
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._live: list[subprocess.Popen] = []

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        offset, index, running = 0.0, 0, []
        while offset < self.seconds and self.error is None:
            length = min(SEGMENT_S, self.seconds - offset)
            process = subprocess.Popen([sys.executable, "-m", "bench.load", "--topic", self.topic, "--rate",
                                        str(self.rate), "--seconds", str(length), "--seed", str(self.seed + index),
                                        "--start-at", str(self.start_s + offset)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            self._live.append(process)
            running.append(process)
            # the next segment starts building `lead` seconds before it is due
            while time.time() < self.start_s + offset + length - self.lead and self.error is None:
                self._collect(running)
                time.sleep(1)
            offset, index = offset + length, index + 1
        while running:
            self._collect(running)
            time.sleep(1)

    def _collect(self, running: list[subprocess.Popen]) -> None:
        for process in [p for p in running if p.poll() is not None]:
            running.remove(process)
            out, err = process.communicate()
            if process.returncode != 0:
                self.error = f"bench.load failed:\n{err[-2000:]}"
            else:
                self.results.append(json.loads(out.strip().splitlines()[-1]))

    def wait(self) -> dict:
        self._thread.join()
        if self.error:
            raise RuntimeError(self.error)
        return {"sent": sum(r["sent"] for r in self.results),
                "schedule_start_ms": min(r["schedule_start_ms"] for r in self.results),
                "schedule_end_ms": max(r["schedule_end_ms"] for r in self.results),
                "producer_worst_behind_s": max(r["producer_worst_behind_s"] for r in self.results)}

    def kill(self) -> None:
        self.error = self.error or "stopped"
        for process in self._live:
            if process.poll() is None:
                process.kill()


class Sampler:
    """Every SAMPLE_S: memory and CPU of the watched process trees; every minute: each table's new commits and
    layout."""

    def __init__(self, trackers: dict[str, CommitTracker], groups: dict[str, list[int]]):
        self.trackers, self.groups = trackers, groups
        self.samples: list[dict] = []
        self._cpu = {name: CpuTotal() for name in groups}
        self.layouts: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_layout = time.time()
        while not self._stop.wait(SAMPLE_S):
            sample: dict = {"at_ms": int(time.time() * 1000)}
            for name, pids in self.groups.items():
                rss, per_process = tree_usage(pids)
                sample[name] = (rss, self._cpu[name].add(per_process))
            self.samples.append(sample)
            if time.time() >= next_layout:
                next_layout += 60
                if "app" in self.groups:
                    sample["app_heap"] = jvm_heap(self.groups["app"])
                for name, tracker in self.trackers.items():
                    try:
                        tracker.poll()
                    except Exception as exc:  # noqa: BLE001 - a poll that failed is retried next minute
                        print(f"   {name}: poll failed ({exc}); retried next minute", flush=True)
                    self.layouts.append({"at_ms": int(time.time() * 1000), "table": name, **tracker.layout()})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        for tracker in self.trackers.values():
            tracker.poll()


def parse_jstat_gc(text: str) -> dict[str, float]:
    """`jstat -gc PID` (a header line and a value line, KB): the old generation's use and the committed heap, MB."""
    header, values = (line.split() for line in text.strip().splitlines()[-2:])
    kb = dict(zip(header, map(float, values), strict=True))
    return {"old_used_mb": round(kb["OU"] / 1024, 1),
            "heap_committed_mb": round(sum(kb[k] for k in ("S0C", "S1C", "EC", "OC")) / 1024, 1)}


def jvm_heap(pids: list[int]) -> dict[str, float] | None:
    """The heap of the first JVM under `pids`, from the jstat beside its java binary; None without one. Resident
    memory grows while the JVM expands its heap towards -Xmx; the old generation's use is what a leak grows."""
    import psutil

    for pid in pids:
        try:
            members = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
            java = next((m for m in members if m.name() == "java"), None)
            if java is None:
                continue
            done = subprocess.run([str(Path(java.exe()).with_name("jstat")), "-gc", str(java.pid)],
                                  capture_output=True, text=True, timeout=20)
            return parse_jstat_gc(done.stdout) if done.returncode == 0 else None
        except (psutil.Error, OSError, subprocess.TimeoutExpired, ValueError, KeyError):
            return None
    return None


def per_minute(start_ms: int, minutes: int, tracker: CommitTracker, layouts: list[dict], samples: list[dict],
               table: str, groups: list[str], maintenance: list[dict]) -> list[dict]:
    """One row per minute of intended send time."""
    from bench.delta_log import percentiles

    rows = []
    for minute in range(minutes):
        low, high = start_ms + minute * 60_000, start_ms + (minute + 1) * 60_000
        latency = percentiles([(c - s) / 1000 for s, c in tracker.rows if low <= s < high])
        layout = [x for x in layouts if x["table"] == table and low <= x["at_ms"] < high + 60_000]
        window = [s for s in samples if low <= s["at_ms"] < high]
        before = [s for s in samples if s["at_ms"] < low]
        row = {"minute": minute + 1, "p50": latency.get("p50"), "p99": latency.get("p99"),
               "max": latency.get("max"), "rows": latency["n"],
               "commits": sum(1 for t in tracker.commit_times if low <= t < high),
               **{k: v for k, v in (layout[0] if layout else {}).items() if k not in ("at_ms", "table")},
               "maintenance_tasks": sum(1 for m in maintenance if m["start_ms"] and m["start_ms"] < high
                                        and (m["end_ms"] or high) > low)}
        for group in groups:
            if window:
                row[f"{group}_rss_mb"] = round(max(s[group][0] for s in window))
                start_cpu = (before[-1] if before else window[0])[group][1]
                row[f"{group}_cpu_pct"] = round(100 * (window[-1][group][1] - start_cpu)
                                                / max(1, (window[-1]["at_ms"] - (before[-1] if before else window[0])
                                                          ["at_ms"]) / 1000))
            heaps = [s[f"{group}_heap"] for s in window if s.get(f"{group}_heap")]
            if heaps:
                row[f"{group}_old_gen_mb"] = heaps[-1]["old_used_mb"]
                row[f"{group}_heap_committed_mb"] = heaps[-1]["heap_committed_mb"]
        rows.append(row)
    return rows


def restart_ratios(restarts: dict[str, dict]) -> dict:
    """{format: {fresh: figures, after_run: figures, ratio: after_run / fresh seconds}} from the restarts made."""
    out: dict[str, dict] = {}
    for when, per_table in restarts.items():
        for fmt, figures in per_table.items():
            out.setdefault(fmt, {})[when] = figures
    for figures in out.values():
        if "fresh" in figures and "after_run" in figures:
            figures["ratio"] = round(figures["after_run"]["recovery_s"] / figures["fresh"]["recovery_s"], 2)
    return out


def summarise(rows: list[dict], group: str) -> dict:
    p50 = [r["p50"] for r in rows if r.get("p50") is not None]
    p99 = [r["p99"] for r in rows if r.get("p99") is not None]
    rss = [r.get(f"{group}_rss_mb") for r in rows if r.get(f"{group}_rss_mb")]
    from_minute = rss[4] if len(rss) > 5 else (rss[0] if rss else None)
    old = [r.get(f"{group}_old_gen_mb") for r in rows if r.get(f"{group}_old_gen_mb")]
    old_from = old[4] if len(old) > 5 else (old[0] if old else None)
    return {"worst_minute_p50": max(p50, default=None), "worst_minute_p99": max(p99, default=None),
            "p99_spread": round(max(p99) / statistics.median(p99), 2) if p99 else None,
            "max_files_per_partition": max((r.get("max_files_per_partition", 0) for r in rows), default=0),
            "rss_growth_pct": round(100 * (rss[-1] - from_minute) / from_minute, 1) if rss and from_minute else None,
            "old_gen_growth_pct": round(100 * (old[-1] - old_from) / old_from, 1) if old and old_from else None,
            "minutes_p50_over_1s": sum(1 for v in p50 if v > 1.0)}


def queue_waits(runs: list[dict]) -> dict | None:
    """Seconds from queued to started of the task runs that started: median and worst (None when none did)."""
    waits = [(m["start_ms"] - m["queued_ms"]) / 1000 for m in runs if m.get("start_ms") and m.get("queued_ms")]
    return {"median": round(statistics.median(waits), 1), "worst": round(max(waits), 1)} if waits else None


def _waits_text(waits: dict | None) -> str:
    return f"queued to started median {waits['median']} s, worst {waits['worst']} s" if waits else "none started"


def _events(path: Path) -> list:
    from ingest.events import read_events

    return read_events(path.read_text()) if path.exists() else []


def _wait(condition, what: str, timeout: float, alive=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(1)


def first_commits(events: list, pipelines: dict[str, str], since: float) -> dict[str, float | None]:
    """Per table: the time of the first batch with records that its pipeline committed after `since`, or None."""
    from ingest.events import BatchCommitted

    return {fmt: next((e.at for e in events if isinstance(e, BatchCommitted) and e.pipeline == name
                       and e.rows + e.dead_letters and e.at > since), None) for fmt, name in pipelines.items()}


def slow_batches(events: list, pipeline: str, since: float, until: float, over: float = SLOW_BATCH_S) -> list[dict]:
    """The pipeline's batches committed between `since` and `until` (the load's minutes; a restart's catch-up
    after them is measured apart) that took over `over` seconds: when, how long, where."""
    from ingest.events import BatchCommitted

    return [{"batch": e.batch_id, "at": round(e.at, 1), "seconds": round(e.seconds, 1),
             "phases": {k: round(v, 1) for k, v in {**e.phases, **e.spark_phases}.items()}}
            for e in events if isinstance(e, BatchCommitted) and e.pipeline == pipeline and since < e.at <= until
            and e.seconds > over]


def turn_waits(events: list, pipeline: str, since: float, until: float) -> dict | None:
    """The pipeline's batches between `since` and `until` whose append waited for a rewrite's commit turn (the
    `turn` phase): how many, and the median, worst and total seconds; None when none waited."""
    from ingest.events import BatchCommitted

    waits = [e.phases["turn"] for e in events if isinstance(e, BatchCommitted) and e.pipeline == pipeline
             and since < e.at <= until and e.phases.get("turn")]
    return {"batches": len(waits), "median": round(statistics.median(waits), 2), "worst": round(max(waits), 2),
            "total": round(sum(waits), 1)} if waits else None


def restart_under_load(app: subprocess.Popen, start_app, topic: str, rate: int, pipelines: dict[str, str],
                       seed: int) -> tuple[dict, subprocess.Popen, int]:
    """kill -9 the application RESTART_KILL_AT_S into RESTART_LOAD_S of load at `rate`, start it again at once and
    wait for each table's first new commit. Returns ({format: seconds from the kill to that commit and where they
    went}, the new application, the records sent)."""
    from bench.latency import _restart_times
    from bench.restart import kill_and_restart

    load = Load(topic, rate, RESTART_LOAD_S, seed=seed)
    load.start()
    while time.time() < load.start_s + RESTART_KILL_AT_S:  # places the kill in the load; nothing waits on it
        time.sleep(0.2)
    restarted: dict = {}

    def restart() -> subprocess.Popen:
        restarted["app"], restarted["events"] = start_app()
        return restarted["app"]

    def all_committed(killed: float) -> float | None:
        firsts = first_commits(_events(restarted["events"]), pipelines, killed) if restarted else {None: None}
        return None if None in firsts.values() else max(firsts.values())

    try:
        _, killed, new = kill_and_restart(app, restart, all_committed)
        sent = load.wait()["sent"]
    except BaseException:
        load.kill()
        if restarted:
            _signal_and_wait(restarted["app"], 60)
        raise
    events = _events(restarted["events"])
    firsts = first_commits(events, pipelines, killed)
    return ({fmt: {"recovery_s": round(firsts[fmt] - killed, 2),
                   **_restart_times([e for e in events if e.pipeline == name], int(killed * 1000))}
             for fmt, name in pipelines.items()}, new, sent)


def run_lakeline(args, settings, run_id: str, work: Path) -> dict:
    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.adapters.object_store import s3_client
    from ingest.config import load_pipeline
    from ingest.events import CommitRetried, PipelineFailed, RunStarted
    from ingest.formats import format_for
    from ingest.produce import produce
    from maintenance.pools import import_file, pools, slots_needed

    topic, bucket = f"bench_steady_{run_id}", f"bench-steady-{run_id}"
    KafkaAdmin(settings).ensure_topic(topic, 4)
    s3_client(settings).create_bucket(Bucket=bucket)
    conf = work / "conf"
    tables = write_conf(conf, run_id, topic, bucket, tuple(args.formats))
    # The Delta table's own removed-file floor (7 days by default) would refuse the policy's short retention.
    spark_conf = {**json.loads(os.environ.get("LAKELINE_SPARK_CONF") or "{}"),
                  "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration": "interval 1 minute"}
    env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse", "LAKELINE_CONF_DIR": str(conf),
           "LAKELINE_SPARK_CONF": json.dumps(spark_conf),
           "LAKELINE_DAG_COMPACT_EVERY": str(args.compact_every), "LAKELINE_DAG_BACKUP_EVERY": str(args.backup_every),
           "LAKELINE_DAG_BOUND_EVERY": str(args.bound_every),
           "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                     os.environ.get("PYTHONPATH")) if p)}
    events_files: list[Path] = []  # one per start of the application
    trackers = {fmt: CommitTracker(fmt, t["location"], settings) for fmt, t in tables.items()}
    declared_pools = pools(conf)
    airflow = Airflow(work / "airflow", env, slots=slots_needed(declared_pools))
    app = load = sampler = None
    pipelines = {fmt: f"steady_{fmt}_{run_id}" for fmt in tables}  # write_conf's pipeline names
    restarts: dict[str, dict] = {}

    def start_app() -> tuple[subprocess.Popen, Path]:
        name = "lakeline" + (f"-{len(events_files)}" if events_files else "")
        events_files.append(work / f"{name}.events.jsonl")
        return subprocess.Popen([sys.executable, "-m", "lakeline", "ingest",
                                 *[a for t in tables.values() for a in ("--pipeline", str(t["pipeline"]))],
                                 "--events", str(events_files[-1])], stdout=open(work / f"{name}.log", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True, env=env), events_files[-1]

    def drained(want: int) -> None:
        _wait(lambda: all((t.poll(), t.records >= want)[1] for t in trackers.values()), "the application to drain",
              600, app_alive)

    def restart(when: str, label: str, seed: int, sent: int) -> int:
        """kill -9 and restart the application under load (restart_under_load) and wait for both tables to hold
        what was sent; the records sent so far."""
        nonlocal app
        commits = {fmt: (t.poll(), len(t.commit_times))[1] for fmt, t in trackers.items()}
        restarts[when], app, restart_sent = restart_under_load(app, start_app, topic, args.rate, pipelines, seed)
        for fmt, figures in restarts[when].items():
            figures["table_commits"] = commits[fmt]
        drained(sent + restart_sent)
        print(f"   restart {label}: " + ", ".join(f"{fmt} {r['recovery_s']} s" for fmt, r in restarts[when].items()),
              flush=True)
        return sent + restart_sent

    try:
        print(f"== Lakeline, {_formats_text(args.formats)} in one application, {args.rate:,} msg/s for "
              f"{args.minutes} min; "
              + ("no maintenance" if args.no_maintenance else f"compaction every {args.compact_every} min, backups "
                 f"every {args.backup_every} min"), flush=True)
        app, _ = start_app()

        def app_alive() -> None:
            if app.poll() is not None:
                log = str(events_files[-1]).replace(".events.jsonl", ".log")
                raise RuntimeError(f"the application exited (see {log})")

        _wait(lambda: sum(isinstance(e, RunStarted) for e in _events(events_files[-1])) >= len(tables),
              "the application to start", 600, app_alive)
        # History: settled partitions of small files, one burst per batch, as hours of running leave them.
        config = load_pipeline(next(iter(tables.values()))["pipeline"])  # one topic: any pipeline's schema
        sent = 0
        for burst in range(args.history):
            sent += produce(config, settings, args.history_records, seed=1000 + burst).count
            for tracker in trackers.values():
                _wait(lambda t=tracker, want=sent: (t.poll(), t.records >= want)[1], "the history commits",
                      300, app_alive)
        print(f"   {sent:,} history records in {args.history} bursts committed to both tables", flush=True)
        if not args.no_restart:  # the fresh figure: kill -9 and restart on tables with only those few commits
            sent = restart("fresh", "on fresh tables", 500, sent)
        if not args.no_maintenance:
            airflow.start(import_file(declared_pools))
        dag_ids = [f"lakeline_{kind}__{t['table']}" for t in tables.values()
                   for kind in ("compact", "retain", "checkpoint_backup")] + \
            [f"lakeline_bound__{t['table']}" for fmt, t in tables.items() if format_for(fmt).rewrites_without_spark]
        groups = {"app": [app.pid]}
        if not args.no_maintenance:
            airflow.wait_parsed(dag_ids)
            airflow.unpause(f"^lakeline_(compact|bound|retain|checkpoint_backup)__steady_.*_{run_id}$")
            groups["airflow"] = airflow.pids()
        sampler = Sampler(trackers, groups)
        load = Load(topic, args.rate, args.minutes * 60)
        for tracker in trackers.values():
            tracker.read_from_ms = int(load.start_s * 1000)
        load.start()
        sampler.start()
        print(("   no maintenance" if args.no_maintenance else "   Airflow running (DAGs unpaused)")
              + f"; load from {datetime.fromtimestamp(load.start_s, UTC):%H:%M:%S}", flush=True)
        while load._thread.is_alive():
            app_alive()
            airflow.check_alive()
            time.sleep(5)
        window = load.wait()
        expected = sent + window["sent"]
        drained(expected)
        sampler.stop()
        if args.wait_maintenance and not args.no_maintenance:
            names = [t["table"] for t in tables.values()]
            print("   drained; waiting for a compaction and a retention of each table", flush=True)
            _wait(lambda: _maintained(airflow.task_runs(), names), "a compaction and a retention of each table",
                  args.wait_maintenance * 60, lambda: (app_alive(), airflow.check_alive()))
        maintenance = [] if args.no_maintenance else airflow.task_runs()
        if not args.no_restart:  # the start after the run's day: its history, compacted and expired
            airflow.stop()  # as quiet as the fresh restart, which ran before Airflow started
            expected = restart("after_run", "after the run", 900, expected)
    finally:
        if load is not None:
            load.kill()
        if app is not None:
            _signal_and_wait(app, 120)
        airflow.stop()
    reconciled = {}
    for fmt, table in tables.items():
        done = subprocess.run([sys.executable, "-m", "lakeline", "reconcile", "--pipeline", str(table["pipeline"]),
                               "--output", "json"], env=env, capture_output=True, text=True, timeout=900)
        report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {"error": done.stderr[-2000:]}
        reconciled[fmt] = report
    all_events = [e for path in events_files for e in _events(path)]
    retried = [e for e in all_events if isinstance(e, CommitRetried)]
    failed = [e for e in all_events if isinstance(e, PipelineFailed)]
    minutes = args.minutes
    result = {"system": "lakeline", "rate": args.rate, "minutes": minutes, "history_records": sent,
              "maintenance": "none" if args.no_maintenance else "airflow",
              "sent": expected, "schedule_start_ms": window["schedule_start_ms"],
              "producer_worst_behind_s": window["producer_worst_behind_s"],
              "compact_every_min": args.compact_every, "backup_every_min": args.backup_every,
              "maintenance_runs": maintenance, "commit_retries": [{"table": e.table, "batch": e.batch_id,
                                                                   "error": e.error[:200], "at": e.at}
                                                                  for e in retried],
              "lost_batches": len(failed), "restarts": restart_ratios(restarts), "tables": {}}
    for fmt, table in tables.items():
        ran = [m for m in maintenance if m["dag"].endswith(table["table"])]
        rows = per_minute(window["schedule_start_ms"], minutes, trackers[fmt], sampler.layouts, sampler.samples,
                          fmt, list(groups), ran)
        report = reconciled[fmt]
        result["tables"][fmt] = {
            "table": table["table"], "per_minute": rows, "summary": summarise(rows, "app"),
            "compactions": sum(1 for m in ran if m["task"] == "compact" and m["state"] == "success"),
            "compactions_failed": sum(1 for m in ran if m["task"] == "compact" and m["state"] == "failed"),
            "compaction_retries": sum(max(0, (m["tries"] or 1) - 1) for m in ran if m["task"] == "compact"),
            "retentions": sum(1 for m in ran if m["task"] == "retain" and m["state"] == "success"),
            "bound_runs": sum(1 for m in ran if m["task"] == "bound" and m["state"] == "success"),
            "bound_queued_s": queue_waits([m for m in ran if m["task"] == "bound"]),
            "backups": sum(1 for m in maintenance if m["dag"] == f"lakeline_checkpoint_backup__{table['table']}"
                           and m["task"] == "verify" and m["state"] == "success"),
            "stream_commit_retries": sum(1 for e in retried if table["table"] in e.table),
            "slow_batches": slow_batches(all_events, pipelines[fmt], window["schedule_start_ms"] / 1000,
                                         window["schedule_start_ms"] / 1000 + minutes * 60 + 60),
            "turn_waits": turn_waits(all_events, pipelines[fmt], window["schedule_start_ms"] / 1000,
                                     window["schedule_start_ms"] / 1000 + minutes * 60 + 60),
            "reconcile": {k: report.get(k) for k in ("exact", "rows", "duplicates", "missing", "dead_letters",
                                                      "error")},
            "exact": bool(report.get("exact")) and report.get("dead_letters") == 0}
    result["exact"] = all(t["exact"] for t in result["tables"].values())
    return result


def _formats_text(formats: list[str]) -> str:
    """['delta', 'iceberg'] -> 'a Delta and an Iceberg pipeline'."""
    names = {"delta": "a Delta", "iceberg": "an Iceberg"}
    return " and ".join(names[f] for f in formats) + " pipeline"


def _maintained(runs: list[dict], tables: list[str]) -> bool:
    """Each table has a successful compact task and a successful retain task."""
    done = {(m["dag"], m["task"]) for m in runs if m["state"] == "success"}
    return all({(f"lakeline_compact__{t}", "compact"), (f"lakeline_retain__{t}", "retain")} <= done for t in tables)


def run_peer(system: str, args, settings, run_id: str, work: Path) -> dict:
    """One peer at the same rate and length, without maintenance."""
    from bench import latency
    from bench.delta_log import row_latencies
    from bench.iceberg_log import rows_and_ids
    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.adapters.object_store import s3_client

    topic = f"bench_steady_{run_id}_{system.replace('-', '_')}"
    bucket = topic.replace("_", "-")
    KafkaAdmin(settings).ensure_topic(topic, 4)
    s3_client(settings).create_bucket(Bucket=bucket)
    env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse"}
    fmt = latency.FORMAT[system]
    location = f"s3a://{bucket}/{topic}" if fmt == "delta" else \
        f"{settings.iceberg_catalog_name}.{NAMESPACE}.{topic}"
    tracker = CommitTracker(fmt, location, settings)
    print(f"== {system}, {args.rate:,} msg/s for {args.minutes} min, no maintenance", flush=True)
    (work / system).mkdir()
    process, _log = latency._start(system, topic, location, work / system, env)
    load = sampler = None
    try:
        primed = latency._load(topic, latency.PRIMING_RATE, 1.0, seed=1)["sent"]
        _wait(lambda: (tracker.poll(), tracker.records >= primed)[1], f"{system} to commit the priming records",
              300)
        sampler = Sampler({fmt: tracker}, {"app": [process.pid]})
        load = Load(topic, args.rate, args.minutes * 60)
        tracker.read_from_ms = int(load.start_s * 1000)
        load.start()
        sampler.start()
        window = load.wait()
        expected = primed + window["sent"]
        _wait(lambda: (tracker.poll(), tracker.records >= expected)[1], f"{system} to drain", 600)
        sampler.stop()
    finally:
        if load is not None:
            load.kill()
        latency._stop(process)
    if fmt == "delta":
        _, rows, distinct = row_latencies(location, settings, 0, 0)
    else:
        rows, distinct = rows_and_ids(location, settings)
    per = per_minute(window["schedule_start_ms"], args.minutes, tracker, sampler.layouts, sampler.samples, fmt,
                     ["app"], [])
    return {"system": system, "rate": args.rate, "minutes": args.minutes, "maintenance": "none",
            "sent": expected, "rows": rows, "distinct_ids": distinct, "exact": rows == distinct == expected,
            "producer_worst_behind_s": window["producer_worst_behind_s"],
            "tables": {fmt: {"table": topic, "per_minute": per, "summary": summarise(per, "app")}}}


# ---- results -------------------------------------------------------------------------------------------------
RESTART_COLUMNS = {"table_commits": "table commits at the kill", "recovery_s": "kill -> first new commit s",
                   # kill -> plan includes the Spark session: one application starts it before its pipelines
                   "restart_to_plan_s": "kill -> plan s",
                   "restart_read_s": "tables + checkpoint read s", "restart_first_batch_s": "first batch s"}


def restart_markdown(restarts: dict) -> list[str]:
    """The restart table: per format, fresh and after the run, and the ratio."""
    out = ["### Restart after kill -9 under load\n",
           "| format | tables | " + " | ".join(RESTART_COLUMNS.values()) + " | ratio to fresh |",
           "| --- | --- | " + " | ".join("---:" for _ in RESTART_COLUMNS) + " | ---: |"]
    for fmt, figures in restarts.items():
        for when in ("fresh", "after_run"):
            if when in figures:
                ratio = figures.get("ratio", "") if when == "after_run" else "1.00"
                out.append(f"| {fmt} | {when.replace('_', ' ')} | "
                           + " | ".join(str(figures[when].get(k, "")) for k in RESTART_COLUMNS) + f" | {ratio} |")
    return out + [""]


def markdown(results: list[dict]) -> str:
    out = []
    for result in results:
        if result.get("restarts"):
            out += restart_markdown(result["restarts"])
        for fmt, table in result["tables"].items():
            s = table["summary"]
            out.append(f"### {result['system']} into {fmt} ({table['table']})\n")
            if result["system"] == "lakeline" and result.get("maintenance") == "none":
                out.append(f"No maintenance. Stream commits retried {table['stream_commit_retries']}, lost batches "
                           f"{result['lost_batches']}; reconcile {table['reconcile']}.\n")
            elif result["system"] == "lakeline":
                out.append(f"Compactions {table['compactions']} (failed {table['compactions_failed']}, retried "
                           f"{table['compaction_retries']}), files-bound runs {table.get('bound_runs', 0)} "
                           f"({_waits_text(table.get('bound_queued_s'))}), "
                           f"retentions {table['retentions']}, checkpoint backups "
                           f"verified {table['backups']}, stream commits retried {table['stream_commit_retries']}, "
                           f"lost batches {result['lost_batches']}; reconcile {table['reconcile']}.\n")
            if result["system"] == "lakeline" and "slow_batches" in table:
                slow = table["slow_batches"]
                out.append(f"Stream batches over {SLOW_BATCH_S:g} s: {len(slow)}"
                           + (": " + "; ".join(f"batch {b['batch']} {b['seconds']} s (table {b['phases'].get('table')}"
                                                f" s)" for b in slow[:10]) if slow else "") + ".\n")
                waits = table.get("turn_waits")
                if waits:
                    out.append(f"Appends that waited for a rewrite's commit turn: {waits['batches']} (median "
                               f"{waits['median']} s, worst {waits['worst']} s, {waits['total']} s in all).\n")
            if result["system"] != "lakeline":
                out.append(f"No maintenance. Rows {result['rows']:,} / sent {result['sent']:,}, exact "
                           f"{result['exact']}.\n")
            out.append(f"Worst minute p50 {s['worst_minute_p50']} s, p99 {s['worst_minute_p99']} s; p99 spread "
                       f"(max / median minute) {s['p99_spread']}; minutes with p50 > 1 s: "
                       f"{s['minutes_p50_over_1s']}; max files per partition {s['max_files_per_partition']}; "
                       f"memory growth minute 5 -> end {s['rss_growth_pct']} % (resident), "
                       f"{s.get('old_gen_growth_pct')} % (the driver's old generation).\n")
            keys = [k for k in table["per_minute"][0] if k != "minute"] if table["per_minute"] else []
            out.append("| minute | " + " | ".join(keys) + " |")
            out.append("| ---: | " + " | ".join("---:" for _ in keys) + " |")
            out += [f"| {r['minute']} | " + " | ".join(str(r.get(k, "")) for k in keys) + " |"
                    for r in table["per_minute"]]
            out.append("")
    return "\n".join(out)


def plot(path: Path, results: list[dict]) -> None:
    """One figure: latency per minute (maintenance runs shaded), files over time, memory over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, files, mem) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    lat.set_xlim(0.5, max(len(t["per_minute"]) for r in results for t in r["tables"].values()) + 0.5)
    for result in results:
        for fmt, table in result["tables"].items():
            label = f"{result['system']} {fmt}" if result["system"] == "lakeline" else result["system"]
            rows = table["per_minute"]
            minutes = [r["minute"] for r in rows]
            line, = lat.plot(minutes, [r.get("p99") for r in rows], marker="o", label=f"{label} p99")
            lat.plot(minutes, [r.get("p50") for r in rows], linestyle="--", color=line.get_color(),
                     label=f"{label} p50")
            files.plot(minutes, [r.get("max_files_per_partition") for r in rows], color=line.get_color(),
                       label=label)
        rows = next(iter(result["tables"].values()))["per_minute"]  # one application for all its tables
        for group in ("app", "airflow"):
            if any(r.get(f"{group}_rss_mb") for r in rows):
                mem.plot([r["minute"] for r in rows], [r.get(f"{group}_rss_mb") for r in rows], marker=".",
                         label=f"{result['system']} {group}")
        if result["system"] == "lakeline":
            origin = result["schedule_start_ms"]
            for run in result["maintenance_runs"]:
                if run["dag"].startswith(("lakeline_compact__", "lakeline_retain__")) and run["start_ms"]:
                    end = run["end_ms"] or origin + len(rows) * 60_000
                    lat.axvspan(0.5 + (run["start_ms"] - origin) / 60_000, 0.5 + (end - origin) / 60_000,
                                color="#999999" if run["task"] in ("compact", "retain") else "#dddddd", alpha=0.3)
    lat.axhline(1.0, color="#228833", linestyle=":", linewidth=1, label="p50 target 1 s")
    lat.set_ylabel("commit-visible latency s\n(shaded: compaction DAG tasks;\ndarker: compact, retain)")
    files.set_ylabel("max files per partition")
    mem.set_ylabel("resident MB")
    mem.set_xlabel("minute of load")
    for ax in (lat, files, mem):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000, help="msg/s (default 5000)")
    parser.add_argument("--minutes", type=int, default=30, help="minutes of load (default 30)")
    parser.add_argument("--compact-every", type=int, default=5, help="minutes between compaction runs (default 5)")
    parser.add_argument("--backup-every", type=int, default=2, help="minutes between checkpoint backups (default 2)")
    parser.add_argument("--bound-every", type=int, default=1,
                        help="minutes between runs of the files-bound DAGs (default 1)")
    parser.add_argument("--history", type=int, default=6, help="bursts of history before the load (default 6)")
    parser.add_argument("--history-records", type=int, default=3000, help="records per history burst")
    parser.add_argument("--wait-maintenance", type=float, default=0, metavar="MIN",
                        help="after the drain, wait up to MIN minutes for a compaction and a retention of each table "
                             "(the quick mode: 15)")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                        help="the Lakeline pipelines, all in one application (default: delta iceberg); one format "
                             "is the like-for-like of a peer, which writes one table")
    parser.add_argument("--peers", nargs="*", choices=PEERS, default=[], help="peers after Lakeline, no maintenance")
    parser.add_argument("--peers-only", action="store_true",
                        help="run only the --peers (no Lakeline run); results steady-<rate>-peers-<date>")
    parser.add_argument("--no-restart", action="store_true",
                        help="skip the two kill -9 restarts under load (before the run on fresh tables, after it on "
                             "the run's history); the quick mode skips them")
    parser.add_argument("--no-maintenance", action="store_true",
                        help="Lakeline without Airflow: the baseline the maintenance runs are read against")
    parser.add_argument("--quick", action="store_true", help="3 minutes, compaction and backups every minute, "
                                                             "nothing written unless --results-dir")
    parser.add_argument("--results-dir", help="write the results here instead of bench/results")
    parser.add_argument("--output", choices=["text", "json"], default="text")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write results")
    args = parser.parse_args(argv)
    if args.peers_only and not args.peers:
        parser.error("--peers-only needs --peers SYSTEM [SYSTEM ...]")
    if args.quick:
        args.minutes, args.compact_every, args.backup_every, args.history = 3, 1, 1, 5
        args.wait_maintenance = args.wait_maintenance or 15
        args.no_restart = True
    from ingest.settings import compact_cron

    try:
        compact_cron(args.compact_every)
    except ValueError as exc:
        parser.error(f"--compact-every: {exc}")

    from infra import stack
    from ingest.settings import load_settings

    # SIGTERM unwinds like Ctrl-C, so the cleanup (application, Airflow, loaders) runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    work = Path(tempfile.mkdtemp(prefix="lakeline-bench-steady-"))
    print(f"work folder {work}", flush=True)
    results = [] if args.peers_only else [run_lakeline(args, settings, run_id, work)]
    results += [run_peer(system, args, settings, run_id, work) for system in args.peers]
    body = markdown(results)
    name = f"steady-{args.rate}" + ("-peers" if args.peers_only else "-no-maintenance" if args.no_maintenance else "") \
        + ("" if args.peers_only or len(args.formats) == len(FORMATS) else "-" + "-".join(args.formats))
    doc = document(name, argv, results, module="steady", minutes=args.minutes,
                   compact_every_min=args.compact_every, backup_every_min=args.backup_every,
                   peers_maintenance="none: the peers have no maintenance of their own and ran without it")
    if args.output == "json":
        print(json.dumps(doc))
    else:
        print(body)
    if not args.no_write and (not args.quick or args.results_dir):
        if args.results_dir:
            import bench.common

            bench.common.RESULTS = Path(args.results_dir)
        maintained = ("the peers alone, without maintenance" if args.peers_only else
                      "without maintenance (the baseline)" if args.no_maintenance else "with maintenance beside it")
        how = ("no Airflow, no maintenance" if args.no_maintenance else
               f"the real Airflow scheduler compacts every {args.compact_every} min (retention after each "
               f"compaction) and backs the checkpoints up every {args.backup_every} min")
        stem = write(doc, f"Steady state at {args.rate:,} msg/s for {args.minutes} min {maintained}",
                     ("" if args.peers_only else
                      f"Lakeline: {_formats_text(args.formats)} in one application; {how}. ")
                     + "Peers: no maintenance, one at a time. "
                     f"Latency per minute of intended send time.\n\n![per minute]({result_name(doc)}.png)\n\n"
                     + body)
        plot(Path(f"{stem}.png"), results)
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    raise SystemExit(main())
