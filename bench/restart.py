"""The start after a long day: seconds from a kill -9 of a running `lakeline ingest` under open-loop load to the
first new commit of the restarted driver, on a table with a long history (thousands of commits written by
Lakeline, then compacted and expired by `lakeline compact` and `lakeline retain`, as a day of the DAGs leaves it)
and on a fresh table, same run, same rate. Prints the ratio and writes bench/results/restart-<date>.{json,md}.

    .venv/bin/python -m bench.restart --commits 3000 --formats delta iceberg

One format at a time (one pipeline per driver): each restart's breakdown then comes from one pipeline's run
events (`lakeline ingest --events`), and the history of one table cannot slow the other's start. Per format:
(a) the history is built on its own topic and table: a fast trigger (processing-time=0ms) and a small load until
the table holds --commits of the pipeline's commits, then a clean stop, `lakeline compact --include-hot` and
`lakeline retain --delete` with windows short enough to expire; (b) a fresh table on a topic of its own. Both are
then measured alike: start, prime, --rate msg/s for --seconds, kill -9 (the whole process group) at --kill-at,
restart at once, drain, `lakeline reconcile`. The breakdown (run events of the restarted driver): kill -> plan
(process, imports, JVM and Spark session: spark_s; tables and checkpoint read: read_s), then the first batch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.common import document, write
from bench.latency import PRIMING_RATE, _events_file, _load, _restart_times, _signal_group, _start, _stop
from ingest.events import BatchCommitted, read_events

SYSTEM = {"delta": "lakeline", "iceberg": "lakeline-iceberg"}  # bench.latency's system names
FAST_LIST_FROM = "delta.enableFastS3AListFrom"  # the Delta LogStore's listing from a version (jvm/); false: folder


def _lakeline(*args: str, env: dict, timeout: float = 1800) -> dict:
    """One `lakeline ... --output json` command in its own process; its JSON result (raises on failure)."""
    done = subprocess.run([sys.executable, "-m", "lakeline", *args, "--output", "json"], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if done.returncode not in (0, 3):  # 3: reconcile's "not exact", reported as a result
        raise RuntimeError(f"lakeline {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    start = done.stdout.find("\n{") + 1 if not done.stdout.startswith("{") else 0  # after any line before it
    try:
        return {**json.loads(done.stdout[start:]), "exit_code": done.returncode}
    except json.JSONDecodeError:
        raise RuntimeError(f"lakeline {' '.join(args)}: no JSON result:\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-2000:]}") from None


def _batches(events_file: Path) -> list[BatchCommitted]:
    if not events_file.exists():
        return []
    return [e for e in read_events(events_file.read_text()) if isinstance(e, BatchCommitted)]


def first_commit_after(events_file: Path, since: float) -> float | None:
    """The time (UNIX s) of the first batch with rows a driver reported committed after `since`, or None."""
    return next((e.at for e in _batches(events_file) if e.rows + e.dead_letters and e.at > since), None)


def kill_and_restart(process: subprocess.Popen, restart: Callable[[], subprocess.Popen],
                     first_commit: Callable[[float], float | None], timeout: float = 600,
                     poll: float = 0.2) -> tuple[float, float, subprocess.Popen]:
    """kill -9 the process group of a running `lakeline ingest` (one pipeline or a folder of them), start it again
    at once with `restart()`, and wait for `first_commit(killed_at)` to report the restarted driver's first new
    commit. Returns (seconds from the kill to that commit, the kill's UNIX time, the new process)."""
    _signal_group(process, signal.SIGKILL)
    killed = time.time()
    process.wait(60)
    new = restart()
    deadline = time.monotonic() + timeout
    while (at := first_commit(killed)) is None:
        if new.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the restarted driver made no commit within {timeout:.0f}s (exit {new.poll()})")
        time.sleep(poll)
    return at - killed, killed, new


class Case:
    """One table (a topic, a bucket, a pipeline file) measured by this benchmark."""

    def __init__(self, fmt: str, label: str, run_id: str, settings):
        from ingest.adapters.kafka_admin import KafkaAdmin
        from ingest.adapters.object_store import s3_client

        self.fmt, self.label, self.system, self.settings = fmt, label, SYSTEM[fmt], settings
        self.topic = f"bench_restart_{run_id}_{fmt}_{label}"
        KafkaAdmin(settings).ensure_topic(self.topic, 4)
        bucket = self.topic.replace("_", "-")  # a bucket of its own: moto lists a bucket by scanning all of it
        s3_client(settings).create_bucket(Bucket=bucket)
        self.env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse"}
        self.location = (f"s3a://{bucket}/{self.topic}" if fmt == "delta"
                         else f"{settings.iceberg_catalog_name}.bench_latency.{self.topic}")
        self.work = Path(tempfile.mkdtemp(prefix=f"lakeline-bench-restart-{fmt}-{label}-"))
        self.attempt = 0
        self.variant_env: dict[str, str] = {}  # over env, for the driver only (a before/after variant)

    def start(self) -> tuple[subprocess.Popen, Path]:
        process, log = _start(self.system, self.topic, self.location, self.work, {**self.env, **self.variant_env},
                              attempt=self.attempt)
        self.attempt += 1
        return process, log

    @property
    def pipeline(self) -> Path:
        return self.work / "pipeline.yaml"  # written by bench.latency's _start

    def table_file(self) -> Path:
        """A table policy for `lakeline compact` / `retain`, with windows short enough that retention really
        expires (a day of the DAGs, compressed)."""
        path = self.work / "tables" / f"{self.label}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump({
            "table": f"bench_restart_{self.label}", "pipeline": "../pipeline.yaml", "which": "main",
            "compaction": {"target_file_size": "128MB", "min_small_files": 5, "small_file_ratio": 0.3,
                           "max_bytes_per_run": "10GB", "hot_partition_window": "1h"},
            "retention": {"retain": "1m", "min_retain": "1m", "orphan_older_than": "1m", "min_orphan_age": "1m",
                          "allow_short_windows": True}}, sort_keys=False))
        return path


def _wait_for(what: str, check: Callable[[], bool], process: subprocess.Popen, timeout: float,
              poll: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f}s (driver exit {process.poll()})")
        time.sleep(poll)


def _short_deleted_file_retention(case: Case) -> None:
    """A Delta table keeps its own VACUUM floor (delta.deletedFileRetentionDuration, 7 days): lowered on the
    history table so that `lakeline retain --delete` really removes what compaction replaced."""
    code = ("from ingest.settings import load_settings; from ingest.spark import build_spark; "
            f"build_spark(load_settings(), 'bench-restart-alter').sql(\"ALTER TABLE delta.`{case.location}` SET "
            "TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 1 minutes')\")")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=case.env, timeout=600)
    if done.returncode:
        raise RuntimeError(f"ALTER TABLE failed:\n{done.stderr[-3000:]}")


def build_history(case: Case, commits: int, rate: float = 100, timeout: float = 7200) -> dict:
    """A long history on `case`'s table, as a day of the stream and the DAGs leave it: Lakeline itself commits
    until the table holds `commits` of the pipeline's commits (processing-time=0ms under `rate` msg/s), stops
    cleanly; then `lakeline compact --include-hot` and `lakeline retain --delete` (windows of a minute, so
    retention expires). Returns what it did and how long each step took."""
    started = time.monotonic()
    process, log = case.start()
    events = _events_file(log)
    loader = subprocess.Popen([sys.executable, "-m", "bench.load", "--topic", case.topic, "--rate", str(rate),
                               "--seconds", str(timeout), "--seed", "7"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        last_print = 0.0
        def enough() -> bool:
            nonlocal last_print
            done = len(_batches(events))
            if time.monotonic() - last_print > 60:
                print(f"   history: {done:,} / {commits:,} commits", flush=True)
                last_print = time.monotonic()
            return done >= commits
        deadline = time.monotonic() + timeout
        _wait_for("history commits", lambda: enough() or time.monotonic() > deadline, process, timeout + 60,
                  poll=5)
    finally:
        loader.kill()
        loader.wait(30)
    time.sleep(3)  # the loader's last sends reach a batch or the next run; reconcile counts them either way
    _stop(process)
    built = time.monotonic() - started
    table = str(case.table_file())
    if case.fmt == "delta":
        _short_deleted_file_retention(case)
    time.sleep(61)  # past the one-minute retention windows
    t0 = time.monotonic()
    compact = _lakeline("compact", "--table", table, "--include-hot", env=case.env)
    t1 = time.monotonic()
    # Delta refuses a VACUUM window under 1 h unless its own safety check is off: the bench turns it off for this
    # one retention run (nothing writes the table meanwhile), as an operator expiring a test table would.
    retain_env = case.env if case.fmt != "delta" else {
        **case.env, "LAKELINE_SPARK_CONF": json.dumps({"spark.databricks.delta.retentionDurationCheck.enabled":
                                                       "false"})}
    try:
        retain = _lakeline("retain", "--table", table, "--delete", env=retain_env)
    except RuntimeError as exc:  # recorded, and the restart measured on the table as compaction left it
        retain = {"failed": str(exc).splitlines()[0] + " " + next(
            (line for line in str(exc).splitlines() if "Exception" in line or "Error" in line), "")}
    t2 = time.monotonic()
    batches = _batches(events)
    return {"commits": len(batches), "rows": sum(b.rows for b in batches), "build_s": round(built, 1),
            "compact_s": round(t1 - t0, 1), "retain_s": round(t2 - t1, 1),
            "compact": {k: v for k, v in compact.items() if not isinstance(v, list | dict) or k == "partitions"},
            "retain": {k: retain.get(k) for k in ("snapshots_expired", "files_deleted_count", "orphan_files_count",
                                                   "notes", "failed") if k in retain}}


def measure_restart(case: Case, rate: int, seconds: float, kill_at: float) -> dict:
    """Start the pipeline, prime it, send `rate` msg/s for `seconds`, kill -9 it `kill_at` s into the load and
    restart it at once; then drain, stop and reconcile. Returns the recovery seconds and their breakdown."""
    process, log = case.start()
    loader = None
    try:
        priming_since = time.time()
        _load(case.topic, PRIMING_RATE, 1.0, seed=1)
        _wait_for("priming commit", lambda: first_commit_after(_events_file(log), priming_since) is not None,
                  process, 300)
        loader = subprocess.Popen([sys.executable, "-m", "bench.load", "--topic", case.topic, "--rate", str(rate),
                                   "--seconds", str(seconds), "--seed", "2"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        while (line := loader.stderr.readline()) and "schedule started" not in line:
            pass
        time.sleep(kill_at)
        restarted: dict = {}

        def restart() -> subprocess.Popen:
            restarted["process"], restarted["log"] = case.start()
            return restarted["process"]

        print(f"   kill -9 about {kill_at:.0f}s into the load; restarting", flush=True)
        recovery, killed, process = kill_and_restart(process, restart,
                                                     lambda since: first_commit_after(_events_file(restarted["log"]),
                                                                                      since) if restarted else None)
        log = restarted["log"]
        out, err = loader.communicate(timeout=3600)
        if loader.returncode != 0:
            raise RuntimeError(f"bench.load failed:\n{err[-3000:]}")
        sent = json.loads(out.strip().splitlines()[-1])

        from ingest.adapters.kafka_admin import KafkaAdmin

        ends = {p: high for p, (_, high) in KafkaAdmin(case.settings).watermarks(case.topic).items()}

        def drained() -> bool:  # the restarted driver's newest batch ends at the topic's end on every partition
            batches = _batches(_events_file(log))
            covered = batches[-1].end.get(case.topic, {}) if batches else {}
            return all(int(covered.get(str(p), covered.get(p, -1))) >= high for p, high in ends.items())
        _wait_for("drain", drained, process, 900)
    finally:
        _stop(process)
        if loader is not None and loader.poll() is None:
            loader.kill()
    events = read_events(_events_file(log).read_text())
    reconcile = _lakeline("reconcile", "--pipeline", str(case.pipeline), env=case.env)
    return {"recovery_s": round(recovery, 2), "sent": sent["sent"], "exact": reconcile["exit_code"] == 0,
            "reconcile": {k: v for k, v in reconcile.items() if not isinstance(v, list | dict)},
            **_restart_times(events, int(killed * 1000))}


_REQUESTS = {"object_list_request": "LIST", "action_http_get_request": "GET", "action_http_head_request": "HEAD",
             "object_put_request": "PUT"}


def startup_reads(pipeline_file: str, runs: int = 3) -> list[dict]:
    """The start-up plan of a pipeline (ingest.startup.prepare: open and check both tables, read their newest
    commit records and the checkpoint) in this process's Spark session, `runs` times with the Delta LogStore
    listing the log from a version and as many with the whole folder, alternating: seconds and S3 requests (S3A's
    counters) of each, after one run not counted (a new JVM's first use). Run on a stopped pipeline (its
    checkpoint agrees with the table: the plan is a resume)."""
    from ingest.config import load_pipeline
    from ingest.events import Events
    from ingest.settings import load_settings
    from ingest.spark import build_spark
    from ingest.startup import prepare

    config, settings = load_pipeline(pipeline_file), load_settings()
    spark = build_spark(settings, "bench-restart-startup-reads")
    jvm, hadoop = spark.sparkContext._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001 - py4j
    # the table's and checkpoint's bucket (bench tables keep both in one): its S3A instance counts their requests
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(config.checkpoint_location(settings)), hadoop)

    def counters() -> dict[str, int]:
        stats = fs.getIOStatistics().counters()
        return {label: int(stats.get(key) or 0) for key, label in _REQUESTS.items()}

    for table in (start := prepare(spark, config, settings, Events())).main, start.dead:
        table.close()
    out = []
    for run in range(2 * runs):
        fast = run % 2 == 1
        hadoop.setBoolean(FAST_LIST_FROM, fast)
        before, started = counters(), time.perf_counter()
        start = prepare(spark, config, settings, Events())
        seconds = time.perf_counter() - started
        after = counters()
        for table in (start.main, start.dead):
            table.close()
        out.append({"listing": "from a version" if fast else "whole folder", "seconds": round(seconds, 2),
                    "plan": start.plan.action, **{k: after[k] - before[k] for k in after}})
        print("   " + json.dumps(out[-1]), flush=True)
    spark.stop()
    return out


def listing_probe(versions: int, settings) -> dict:
    """What one listing of a Delta log of `versions` commits (a .json and a .crc each) costs on the stack's S3,
    Spark-free: the whole folder (Delta's stock Hadoop store) against the keys after the newest versions (S3
    StartAfter, Lakeline's LogStore), as ListObjectsV2 pages and seconds."""
    from concurrent.futures import ThreadPoolExecutor

    from ingest.adapters.object_store import s3_client

    client = s3_client(settings)
    bucket = f"bench-restart-listing-{uuid.uuid4().hex[:6]}"
    client.create_bucket(Bucket=bucket)
    prefix = "table/_delta_log/"

    def put(version: int) -> None:
        for suffix in ("json", "crc"):
            client.put_object(Bucket=bucket, Key=f"{prefix}{version:020d}.{suffix}", Body=b"{}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(versions)))
    out = {"versions": versions, "keys": 2 * versions}
    for label, extra in (("whole_folder", {}), ("from_version", {"StartAfter": f"{prefix}{versions - 10:020d}"})):
        started, keys, pages = time.perf_counter(), 0, 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, **extra):
            keys, pages = keys + len(page.get("Contents", [])), pages + 1
        out.update({f"{label}_s": round(time.perf_counter() - started, 3), f"{label}_pages": pages,
                    f"{label}_keys": keys})
    print("   " + json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["delta", "iceberg"], choices=list(SYSTEM))
    parser.add_argument("--commits", type=int, default=3000, help="the history's commits (default 3000)")
    parser.add_argument("--history-rate", type=float, default=100, help="msg/s while the history is built")
    parser.add_argument("--history-minutes", type=float, default=120,
                        help="stop building the history after this long even short of --commits (default 120)")
    parser.add_argument("--rate", type=int, default=2000, help="msg/s of the load the kill lands in (default 2000)")
    parser.add_argument("--seconds", type=float, default=40, help="seconds of load (default 40)")
    parser.add_argument("--kill-at", type=float, default=15, help="seconds into the load to kill -9 (default 15)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument("--startup-reads", nargs="+", metavar="LABEL=PIPELINE_YAML",
                        help="only measure the start-up plan's table reads (seconds, S3 requests) of stopped "
                             "pipelines, Delta's log listed from a version and whole (e.g. a run's history and "
                             "fresh pipeline files), then exit")
    parser.add_argument("--listing-probe", nargs="+", type=int, metavar="VERSIONS",
                        help="only time one listing of a Delta log of VERSIONS commits on the stack's S3, whole and "
                             "from a version (Spark-free), then exit")
    args = parser.parse_args(argv)
    if args.listing_probe:
        from infra import stack
        from ingest.settings import load_settings

        stack.up()
        results = [listing_probe(versions, load_settings()) for versions in args.listing_probe]
        rows = ["| log versions | keys | whole folder: pages | s | from a version: pages | s |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        rows += [f"| {r['versions']:,} | {r['keys']:,} | {r['whole_folder_pages']} | {r['whole_folder_s']} | "
                 f"{r['from_version_pages']} | {r['from_version_s']} |" for r in results]
        print("\n".join(rows))
        if not args.no_write:
            write(document("restart-listing", argv, results, module="restart"),
                  "One Delta log listing on the stack's S3: the whole folder vs from a version", "\n".join(rows))
        return 0
    if args.startup_reads:
        results = [{"table": label, "reads": startup_reads(path)}
                   for label, path in (item.split("=", 1) for item in args.startup_reads)]
        rows = ["| table | listing | seconds (median) | LIST | GET | HEAD |",
                "| --- | --- | ---: | ---: | ---: | ---: |"]
        for r in results:
            for listing in ("whole folder", "from a version"):
                runs = [x for x in r["reads"] if x["listing"] == listing]
                mid = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]
                rows.append(f"| {r['table']} | {listing} | {mid['seconds']} | {mid['LIST']} | {mid['GET']} | "
                            f"{mid['HEAD']} |")
        print("\n".join(rows))
        if not args.no_write:
            write(document("restart-startup-reads", argv, results, module="restart"),
                  "The start-up plan's table reads: Delta log listed whole vs from a version", "\n".join(rows))
        return 0
    if not 0 < args.kill_at < args.seconds:
        parser.error("--kill-at must be inside the load (0 < kill-at < seconds)")

    from infra import stack
    from ingest.settings import load_settings

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    results = []
    for fmt in args.formats:
        history = Case(fmt, "history", run_id, settings)
        print(f"\n== {fmt}: building {args.commits:,} commits of history ...", flush=True)
        built = build_history(history, args.commits, args.history_rate, args.history_minutes * 60)
        print("   " + json.dumps(built), flush=True)
        runs = [(history, "")]
        if fmt == "delta":  # before/after: the LogStore's listing of the whole log folder, then from a version
            runs.insert(0, (history, "folder listing"))
        runs.append((Case(fmt, "fresh", run_id, settings), ""))
        for case, variant in runs:
            print(f"\n== {fmt}, {case.label} table{f' ({variant})' if variant else ''}: restart under "
                  f"{args.rate:,} msg/s", flush=True)
            case.variant_env = {"LAKELINE_SPARK_CONF": json.dumps({f"spark.hadoop.{FAST_LIST_FROM}": "false"})} \
                if variant else {}
            result = {"format": fmt, "table": case.label + (f" ({variant})" if variant else ""), "rate": args.rate,
                      **({"history": built} if case is history else {}),
                      **measure_restart(case, args.rate, args.seconds, args.kill_at)}
            print("   " + json.dumps(result), flush=True)
            results.append(result)
    table = ["| format | table | history commits | recovery s (kill → first new commit) | kill → plan s | "
             "Spark session s | tables + checkpoint read s | plan → first commit s | ratio to fresh | exact |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        fresh = next(f for f in results if f["format"] == r["format"] and f["table"] == "fresh")
        built = r.get("history", {})
        table.append(f"| {r['format']} | {r['table']} | {built.get('commits', 0):,} | "
                     f"{r['recovery_s']} | {r.get('restart_to_plan_s')} | {r.get('restart_spark_s')} | "
                     f"{r.get('restart_read_s')} | {r.get('restart_plan_to_first_commit_s')} | "
                     f"{r['recovery_s'] / fresh['recovery_s']:.2f} | {r['exact']} |")
    print("\n".join(table))
    if not args.no_write:
        doc = document("restart", argv, results)
        write(doc, "The start after a long day: restart after kill -9, long history vs fresh table",
              "One format at a time; same run, same rate.\n\n" + "\n".join(table))
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    raise SystemExit(main())
