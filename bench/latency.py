"""Commit-visible latency, open loop, into Delta: Lakeline vs plain Spark (built-in Delta sink) vs a Python consumer
writing with delta-rs, one at a time against the same broker, S3 and load; or into Iceberg: Lakeline vs plain
Spark's Iceberg sink vs Flink's (the opt-in peer). Prints a table and writes
bench/results/latency[-iceberg]-<date>.{json,md}.

    .venv/bin/python -m bench.latency --rates 5000 20000 --warmup 20 --seconds 60
    .venv/bin/python -m bench.latency --systems lakeline-iceberg spark-iceberg flink-iceberg --rates 20 5000

Per system and rate: a fresh topic and table; the system starts in its own process; bench.load (its own process)
sends --warmup + --seconds of events at the rate, each stamped with its intended send time; the system drains;
then it is stopped. Before the load, 100 priming records are sent and committed, so the JVM start and table
creation are not in the figures (as in a long-running deployment). Latency per row = timestamp of the Delta
commit (Iceberg snapshot) that added the row's file (from the table's log or manifests) - intended send time, over
rows sent after the warm-up.
Also: commits and median gap between commits in the measured window, rows and distinct ids in the table vs sent
(exactness of a steady run), and for Lakeline the medians of its per-batch breakdown (scan = read + decode,
table = the table commit). At a trickle rate (20 msg/s) the median gap between commits is the fixed overhead of
a batch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from bench.common import document, result_name, write
from ingest.events import RunStarted, StandbyReady, read_events
from bench import delta_log, iceberg_log
from bench.delta_log import DeltaLogReader, percentiles

SYSTEMS = ("lakeline", "spark-delta", "delta-rs", "lakeline-iceberg", "spark-iceberg", "flink-iceberg")
FORMAT = {"lakeline": "delta", "spark-delta": "delta", "delta-rs": "delta", "lakeline-iceberg": "iceberg",
          "spark-iceberg": "iceberg", "flink-iceberg": "iceberg"}
DELTA_SYSTEMS = tuple(s for s in SYSTEMS if FORMAT[s] == "delta")  # the default; --systems picks Iceberg's
# The Flink peer's own environment (bash infra/flink.sh; opt-in).
FLINK_PYTHON = Path(__file__).resolve().parents[1] / ".lakeline" / "flink-venv" / "bin" / "python"
PRIMING_RATE = 100  # records in the one-second priming load
QUIET_SECONDS = 10  # no new commit for this long (and every record in) = drained
# Lakeline: its run_started / standby_ready event
READY_MARKERS = {"spark-delta": "READY", "spark-iceberg": "READY", "flink-iceberg": "READY", "delta-rs": "READY"}


def _start(system: str, topic: str, location: str, work: Path, env: dict, attempt: int = 0,
           standby: bool = False) -> tuple[subprocess.Popen, Path]:
    """Start one system's process; return once it says it is ready. `standby` (Lakeline only): a warm standby
    driver, ready once warm and waiting for the running driver's lock."""
    from infra.paths import REPO_ROOT

    log = work / f"{system}-{attempt}{'-standby' if standby else ''}.log"
    if system in ("lakeline", "lakeline-iceberg"):
        template = yaml.safe_load((REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml").read_text())
        pipeline = work / "pipeline.yaml"
        partition = {"column": "event_date", "source": "event_time", "transform": "day"}
        if system == "lakeline":
            sink = {"format": "delta", "table": topic, "location": location, "partition": partition}
            checkpoint = location + "_checkpoint"
        else:  # location is the Iceberg table's catalog.namespace.table
            _, namespace, table = location.split(".")
            sink = {"format": "iceberg", "namespace": namespace, "table": table, "partition": partition}
            checkpoint = f"{env['LAKELINE_WAREHOUSE']}/_checkpoints/{table}"
        pipeline.write_text(yaml.safe_dump({
            "pipeline": f"bench_latency_{topic}", "source": {"kind": "kafka", "topics": [topic],
                                                            "starting_offsets": "earliest"},
            "schema": template["schema"], "sink": sink, "checkpoint": {"location": checkpoint},
            "trigger": "processing-time=0ms"}, sort_keys=False))
        command = [sys.executable, "-m", "lakeline", "ingest", "--pipeline", str(pipeline), "--events",
                   str(_events_file(log))]
        command += ["--standby"] if standby else []
    elif system == "spark-delta":
        command = [sys.executable, "-m", "bench.peers.spark_plain", "--topic", topic, "--location", location,
                   "--checkpoint", location + "_checkpoint"]
    elif system == "spark-iceberg":
        command = [sys.executable, "-m", "bench.peers.spark_plain", "--format", "iceberg", "--topic", topic,
                   "--location", location,
                   "--checkpoint", f"{env['LAKELINE_WAREHOUSE']}/_checkpoints/{location.rsplit('.', 1)[1]}"]
    elif system == "flink-iceberg":
        from infra.paths import state_dir

        if not FLINK_PYTHON.exists():
            raise RuntimeError("the Flink peer is not installed: run `bash infra/flink.sh` (opt-in, about 900 MB)")
        command = [str(FLINK_PYTHON), str(REPO_ROOT / "bench" / "peers" / "flink_iceberg.py"), "--topic", topic,
                   "--table", location, "--env-file", str(state_dir() / "stack" / "stack.env"),
                   "--checkpoint-dir", f"file://{work / 'flink-checkpoints'}"]
        env = {**env, "FLINK_LOG_DIR": str(work / "flink-logs")}
    else:
        command = [sys.executable, "-m", "bench.peers.deltars", "--topic", topic, "--location", location,
                   "--group", f"bench-{topic}"]
    process = subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                               env=env)
    deadline = time.monotonic() + 240
    def ready() -> bool:
        if not system.startswith("lakeline"):
            return READY_MARKERS[system] in log.read_text()
        events = _events_file(log)
        return events.exists() and any(isinstance(e, StandbyReady if standby else RunStarted)
                                       for e in read_events(events.read_text()))

    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            raise RuntimeError(f"{system} did not start (see {log}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return process, log


def _events_file(log: Path) -> Path:
    """Where a Lakeline driver started with `log` writes its run events (`lakeline ingest --events`)."""
    return log.with_suffix(".events.jsonl")


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # the whole group: a Spark peer's JVM must not outlive the measurement
    except ProcessLookupError:
        pass  # the group is already gone


def _stop(process: subprocess.Popen) -> None:
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait(30)


def _load(topic: str, rate: float, seconds: float, seed: int) -> dict:
    load = subprocess.run([sys.executable, "-m", "bench.load", "--topic", topic, "--rate", str(rate),
                           "--seconds", str(seconds), "--seed", str(seed)], capture_output=True, text=True,
                          timeout=3600)
    if load.returncode != 0:
        raise RuntimeError(f"bench.load failed:\n{load.stderr[-3000:]}")
    return json.loads(load.stdout.strip().splitlines()[-1])


def _records(log: DeltaLogReader) -> tuple[int, int]:
    """(records committed so far, newest version that added data: an idle Flink sink still commits empty
    snapshots now and then, which must not count as activity)."""
    seen = log.commits()
    data = [c for c in seen if c["files"]]
    return sum(c["records"] for c in seen), data[-1]["version"] if data else -1


def wait_drained(system: str, process: subprocess.Popen, log: Path, table_log: DeltaLogReader, expected: int,
                 timeout: float, poll: float) -> tuple[int, float]:
    """Wait until at least `expected` records are committed and no new commit came for QUIET_SECONDS (an
    at-least-once peer that replays a batch reaches the count before its last distinct rows land), or `timeout`
    seconds. Returns (records committed, seconds waited). Raises if the system exits meanwhile."""
    started = quiet_since = time.monotonic()
    last_version = None
    while True:
        landed, version = _records(table_log)
        if version != last_version:
            quiet_since, last_version = time.monotonic(), version
        if landed >= expected and time.monotonic() - quiet_since >= QUIET_SECONDS:
            break
        if process.poll() is not None:
            raise RuntimeError(f"{system} exited while draining (see {log}):\n{log.read_text()[-3000:]}")
        if time.monotonic() - started > timeout:
            break
        time.sleep(poll)
    return landed, time.monotonic() - started


def measure(system: str, rate: int, warmup: float, seconds: float, settings, run_id: str,
            kill_at: float | None = None, standby: bool = False) -> dict:
    """One system at one rate. With `kill_at`, the system is killed (SIGKILL, its whole process group) that many
    seconds into the load and restarted at once; the result then has the seconds from the kill to the first new
    commit, and duplicates/missing. With `standby` (Lakeline), a warm standby driver started beside it takes
    over instead of a restart."""
    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.adapters.object_store import s3_client

    kind = ("recovery_standby" if standby else "recovery") if kill_at else "latency"
    topic = f"bench_{kind}_{run_id}_{system.replace('-', '_')}_{rate}"
    KafkaAdmin(settings).ensure_topic(topic, 4)
    # A bucket of its own per measurement: moto lists a bucket by scanning all of it, so a shared bucket would
    # make each later system's log listings slower than the earlier ones'.
    bucket = topic.replace("_", "-")
    s3_client(settings).create_bucket(Bucket=bucket)
    env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse"}
    work = Path(tempfile.mkdtemp(prefix=f"lakeline-bench-{system}-"))
    if FORMAT[system] == "delta":
        location = f"s3a://{bucket}/{topic}"
        table_log, table_rows = DeltaLogReader(location, settings), delta_log.row_latencies
    else:  # the stack's Iceberg catalog; the table's files go under this measurement's bucket
        location = f"{settings.iceberg_catalog_name}.bench_latency.{topic}"
        table_log, table_rows = iceberg_log.IcebergLogReader(location, settings), iceberg_log.row_latencies
    print(f"\n== {system} at {rate:,} msg/s: starting ...", flush=True)
    process, log = _start(system, topic, location, work, env)
    loader = spare = None
    try:
        # Priming: the measured load starts only once the system has committed a first batch (JVM, session and
        # table ready), as in a long-running deployment. These records are sent before the window.
        primed = _load(topic, PRIMING_RATE, 1.0, seed=1)["sent"]
        deadline = time.monotonic() + 300
        while _records(table_log)[0] < primed:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{system} did not commit the priming records (see {log}):\n"
                                   f"{log.read_text()[-3000:]}")
            time.sleep(0.5)
        if standby:
            spare, spare_log = _start(system, topic, location, work, env, attempt=1, standby=True)
            print("   warm standby ready", flush=True)
        print(f"   primed; sending for {warmup + seconds:.0f}s ({warmup:.0f}s warm-up)", flush=True)
        killed_ms = None
        if kill_at is None:
            sent = _load(topic, rate, warmup + seconds, seed=2)
        else:
            loader = subprocess.Popen([sys.executable, "-m", "bench.load", "--topic", topic, "--rate", str(rate),
                                       "--seconds", str(warmup + seconds), "--seed", "2"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            # The loader builds its events first; the fault is timed from the start of its schedule.
            while (line := loader.stderr.readline()) and "schedule started" not in line:
                pass
            time.sleep(kill_at)  # the fault lands at a wall-clock moment; the exact offset is reported below
            _signal_group(process, signal.SIGKILL)
            killed_ms = int(time.time() * 1000)
            process.wait(60)
            if spare is not None:
                print(f"   kill -9 about {kill_at:.0f}s into the load; the standby takes over", flush=True)
                (process, log), spare = (spare, spare_log), None
            else:
                print(f"   kill -9 about {kill_at:.0f}s into the load; restarting", flush=True)
                process, log = _start(system, topic, location, work, env, attempt=1)
            out, err = loader.communicate(timeout=3600)
            if loader.returncode != 0:
                raise RuntimeError(f"bench.load failed:\n{err[-3000:]}")
            sent = json.loads(out.strip().splitlines()[-1])
        expected = primed + sent["sent"]
        landed, drain_seconds = wait_drained(system, process, log, table_log, expected, timeout=600, poll=1.0)
    finally:
        _stop(process)
        if spare is not None:
            _stop(spare)
        if loader is not None and loader.poll() is None:
            loader.kill()
    since = sent["schedule_start_ms"] + int(warmup * 1000)
    events = read_events(_events_file(log).read_text()) if system.startswith("lakeline") else []
    breakdown = _lakeline_batch_times(events) if events else {}
    if events and killed_ms is not None and not standby:
        breakdown.update(_restart_times(events, killed_ms))
    latencies, rows, distinct = table_rows(location, settings, since, sent["schedule_end_ms"])
    all_commits = table_log.commits()
    window = [c["timestamp_ms"] for c in all_commits
              if c["files"] and c["timestamp_ms"] and since <= c["timestamp_ms"] < sent["schedule_end_ms"]]
    gaps = [(b - a) / 1000 for a, b in zip(window, window[1:], strict=False)]
    recovery = {}
    if killed_ms is not None:
        after = [c["timestamp_ms"] for c in all_commits
                 if c["files"] and c["timestamp_ms"] and c["timestamp_ms"] > killed_ms]
        recovery = {"kill_at_s": round((killed_ms - sent["schedule_start_ms"]) / 1000, 1),
                    "recovery_s": round((after[0] - killed_ms) / 1000, 1) if after else None,
                    "duplicates": rows - distinct, "missing": expected - distinct}
    result = {"system": system + (" (warm standby)" if standby else ""), "rate": rate, **recovery,
              **{f"latency_{k}": v for k, v in percentiles(latencies).items()},
              "commits_in_window": len(window), "median_commit_gap_s": round(statistics.median(gaps), 3) if gaps
              else None, "sent": expected, "rows": rows, "distinct_ids": distinct,
              "exact": rows == distinct == expected,
              "producer_worst_behind_s": sent["producer_worst_behind_s"], "landed_at_stop": landed,
              "drain_seconds_incl_quiet": round(drain_seconds, 1), **breakdown}
    print("   " + json.dumps(result), flush=True)
    return result


def _lakeline_batch_times(events: list) -> dict:
    """Medians of Lakeline's own per-batch breakdown (`BatchCommitted.seconds` as took, and its phases: scan, dlq,
    table) and of Spark's phases of the same batch (spark_trigger, spark_offsets, spark_wal, ...), after batch 0."""
    from ingest.events import BatchCommitted

    batches = [{"took": e.seconds, **e.phases, **{f"spark_{k}": v for k, v in e.spark_phases.items()}}
               for e in events if isinstance(e, BatchCommitted)][1:]
    names = sorted({name for phases in batches for name in phases})
    return {f"batch_{name}_median_s": round(statistics.median(p[name] for p in batches if name in p), 3)
            for name in names}


def _restart_times(events: list, killed_ms: int) -> dict:
    """Where a restart's seconds went, from the restarted driver's run events: kill to the start plan (process,
    imports, JVM and Spark session: `spark_s`; the tables and checkpoint read: `read_s`), then its first batch."""
    from ingest.events import BatchCommitted, RunStarted

    started = next((e for e in events if isinstance(e, RunStarted)), None)
    first = next((e for e in events if isinstance(e, BatchCommitted) and e.rows + e.dead_letters), None)
    if started is None:
        return {}
    times = {"restart_to_plan_s": round(started.at - killed_ms / 1000, 2),
             "restart_spark_s": round(started.spark_seconds, 2), "restart_read_s": round(started.read_seconds, 2)}
    if first is not None:
        times.update({"restart_first_batch_s": round(first.seconds, 2), "restart_first_batch_rows": first.rows,
                      "restart_first_batch_phases": first.phases,
                      "restart_plan_to_first_commit_s": round(first.at - started.at, 2)})
    return times


def plot_latency(path: str | Path, results: list[dict]) -> None:
    """PNG: one panel per rate, p50/p95/p99 bars per system on a log scale, with the issue's targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({r["rate"] for r in results})
    systems = list(dict.fromkeys(r["system"] for r in results))
    fig, axes = plt.subplots(1, len(rates), figsize=(4.5 * len(rates), 4), squeeze=False, sharey=True)
    colors = {"latency_p50": "#4477aa", "latency_p95": "#66ccee", "latency_p99": "#ee6677"}
    for ax, rate in zip(axes[0], rates, strict=True):
        rows = {r["system"]: r for r in results if r["rate"] == rate}
        for i, (key, color) in enumerate(colors.items()):
            ax.bar([j + (i - 1) * 0.27 for j in range(len(systems))],
                   [rows.get(system, {}).get(key) or 0 for system in systems], width=0.27, color=color,
                   label=key.split("_")[1])
        ax.axhline(1.0, color="#228833", linestyle="--", linewidth=1, label="target p50 1.0 s")
        ax.axhline(2.5, color="#cc3311", linestyle="--", linewidth=1, label="target p99 2.5 s")
        ax.set_xticks(range(len(systems)), systems)
        ax.set_yscale("log")
        ax.set_title(f"{rate:,} msg/s")
    highest = max((r.get(key) or 0) for r in results for key in colors)
    axes[0][0].set_ylim(0.1, max(highest, 2.5) * 1.5)  # shared y: set once, after every panel is drawn
    axes[0][0].set_ylabel("commit-visible latency (s, log scale)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(DELTA_SYSTEMS), choices=SYSTEMS,
                        help="one table format per run (default: the Delta systems; lakeline-iceberg, spark-iceberg "
                             "and flink-iceberg, the Flink peer once `bash infra/flink.sh` installed it, measure "
                             "into Iceberg and write latency-iceberg-<date>)")
    parser.add_argument("--rates", nargs="+", type=int, default=[20, 5000, 20000],
                        help="msg/s (default 20 5000 20000; at the trickle rate the median commit gap is the fixed "
                             "overhead per batch)")
    parser.add_argument("--warmup", type=float, default=20, help="seconds of load not measured (default 20)")
    parser.add_argument("--seconds", type=float, default=60, help="measured seconds of load (default 60)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument("--plot-from", metavar="JSON", help="only draw the PNG of an earlier results JSON, then exit")
    args = parser.parse_args(argv)
    if args.plot_from:
        target = Path(args.plot_from).with_suffix(".png")
        plot_latency(target, json.loads(Path(args.plot_from).read_text())["results"])
        print(f"written {target}")
        return 0

    formats = {FORMAT[system] for system in args.systems}
    if len(formats) > 1:
        parser.error("--systems: measure one table format per run (the Delta systems, or the Iceberg ones)")
    fmt = formats.pop()
    from infra import stack
    from ingest.settings import load_settings

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    results = [measure(system, rate, args.warmup, args.seconds, settings, run_id)
               for rate in args.rates for system in args.systems]

    doc = document("latency" if fmt == "delta" else "latency-iceberg", argv, results, warmup_s=args.warmup,
                   measured_s=args.seconds)
    table = ["| system | rate msg/s | rows measured | p50 s | p95 s | p99 s | max s | commits | median gap s | "
             "producer behind s | rows / sent | exact |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    table += [f"| {r['system']} | {r['rate']:,} | {r.get('latency_n', 0):,} | {r.get('latency_p50')} | "
              f"{r.get('latency_p95')} | {r.get('latency_p99')} | {r.get('latency_max')} | {r['commits_in_window']} | "
              f"{r['median_commit_gap_s']} | {r['producer_worst_behind_s']} | {r['rows']:,} / {r['sent']:,} | "
              f"{r['exact']} |" for r in results]
    print("\n".join(table))
    if not args.no_write:
        commit = "Delta commit timestamp" if fmt == "delta" else "timestamp of the Iceberg snapshot that added the row"
        stem = write(doc, f"Commit-visible latency into {fmt.capitalize()}",
                     f"One system at a time. Latency = {commit} - intended send time, rows sent after "
                     f"the {args.warmup:.0f} s warm-up, {args.seconds:.0f} s measured.\n\n" + "\n".join(table)
                     + f"\n\n![latency by system and rate]({result_name(doc)}.png)\n")
        plot_latency(f"{stem}.png", results)
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()  # progress from the library (produce, compaction) on stderr
    raise SystemExit(main())
