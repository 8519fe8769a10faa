"""Many pipelines in one Spark application vs one application per pipeline: driver memory, CPU and commit-visible
latency. Prints a table and writes bench/results/multi-pipeline-<date>.{json,md}.

    .venv/bin/python -m bench.multi_pipeline --counts 1 4 8 --rate 50 --warmup 20 --seconds 60

Per count N and mode: N fresh topics and Delta tables; "one app" is one `lakeline ingest --pipeline ... (N times)`,
"separate" is N `lakeline ingest` processes (each its own local[2] Spark driver). After every pipeline has
committed its priming records, N open-loop loads (bench.load, one per topic) send --warmup + --seconds of events at
--rate each. Measured over the load: resident memory of every process of the drivers (the Python drivers and their
JVMs; mean and peak of 1 s samples), their CPU seconds, and the commit-visible latency of rows sent after the
warm-up (Delta commit timestamp - intended send time) across all N tables; exactness of each table.
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
import threading
import time
import uuid
from pathlib import Path

import yaml

from bench.common import cpu_seconds, document, write
from bench.delta_log import DeltaLogReader, percentiles, row_latencies

MODES = ("one-app", "separate")
PRIMING = 100


def _pipelines(names: list[str], bucket: str, work: Path) -> list[Path]:
    from infra.paths import REPO_ROOT

    template = yaml.safe_load((REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml").read_text())
    paths = []
    for name in names:
        location = f"s3a://{bucket}/{name}"
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "pipeline": name, "source": {"kind": "kafka", "topics": [name], "starting_offsets": "earliest"},
            "schema": template["schema"], "trigger": "processing-time=0ms",
            "sink": {"format": "delta", "table": name, "location": location,
                     "partition": {"column": "event_date", "source": "event_time", "transform": "day"}},
            "checkpoint": {"location": location + "_checkpoint"}}, sort_keys=False))
        paths.append(path)
    return paths


def _tree(pids: list[int]):
    import psutil

    found = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            found += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def _rss_mb(pids: list[int]) -> float:
    import psutil

    total = 0
    for process in _tree(pids):
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def _load(topic: str, rate: float, seconds: float, seed: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.load", "--topic", topic, "--rate", str(rate), "--seconds",
                             str(seconds), "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)


def _sent(loader: subprocess.Popen) -> dict:
    out, _ = loader.communicate(timeout=3600)
    if loader.returncode != 0:
        raise RuntimeError("bench.load failed")
    return json.loads(out.strip().splitlines()[-1])


def measure(count: int, mode: str, rate: float, warmup: float, seconds: float, settings, run_id: str) -> dict:
    from ingest.adapters.kafka_admin import KafkaAdmin
    from ingest.adapters.object_store import s3_client
    from ingest.events import RunStarted, read_events

    names = [f"bench_multi_{run_id}_{mode.replace('-', '_')}_{count}_{i}" for i in range(count)]
    admin = KafkaAdmin(settings)
    for name in names:
        admin.ensure_topic(name, 2)
    bucket = f"bench-multi-{run_id}-{mode}-{count}"
    s3_client(settings).create_bucket(Bucket=bucket)
    work = Path(tempfile.mkdtemp(prefix="lakeline-bench-multi-"))
    paths = _pipelines(names, bucket, work)
    env = {**os.environ, "LAKELINE_WAREHOUSE": f"s3a://{bucket}/warehouse"}
    groups = [[a for p in paths for a in ("--pipeline", str(p))]] if mode == "one-app" else [
        ["--pipeline", str(p)] for p in paths]
    print(f"\n== {count} pipeline(s), {mode}: starting {len(groups)} driver(s) ...", flush=True)
    events = [work / f"driver-{i}.events.jsonl" for i in range(len(groups))]
    drivers = [subprocess.Popen([sys.executable, "-m", "lakeline", "ingest", *args, "--events", str(events[i])],
                                stdout=open(work / f"driver-{i}.log", "w"), stderr=subprocess.STDOUT,
                                start_new_session=True, env=env) for i, args in enumerate(groups)]
    logs = [DeltaLogReader(f"s3a://{bucket}/{name}", settings) for name in names]
    samples: list[float] = []
    try:
        deadline = time.monotonic() + 600
        while sum(isinstance(e, RunStarted) for f in events if f.exists() for e in read_events(f.read_text())) < count:
            if time.monotonic() > deadline or any(d.poll() is not None for d in drivers):
                raise RuntimeError(f"the drivers did not start (see {work})")
            time.sleep(1)
        for loader in [_load(name, PRIMING, 1.0, seed=1) for name in names]:
            _sent(loader)
        while any(sum(c["records"] for c in log.commits()) < PRIMING for log in logs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the priming records were not committed (see {work})")
            time.sleep(1)
        print(f"   primed; sending {rate:g} msg/s to each of {count} topic(s) for {warmup + seconds:.0f}s", flush=True)
        pids = [d.pid for d in drivers]
        cpu_before = sum(cpu_seconds(group=pid) for pid in pids)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                samples.append(_rss_mb(pids))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        loaders = [_load(name, rate, warmup + seconds, seed=2 + i) for i, name in enumerate(names)]
        sent = [_sent(loader) for loader in loaders]
        expected = [PRIMING + s["sent"] for s in sent]
        drain_deadline = time.monotonic() + 300
        while any(sum(c["records"] for c in log.commits()) < want for log, want in zip(logs, expected, strict=True)):
            if time.monotonic() > drain_deadline:
                break
            time.sleep(1)
        cpu = sum(cpu_seconds(group=pid) for pid in pids) - cpu_before
        stop.set()
        sampler.join(5)
    finally:
        for driver in drivers:
            try:
                os.killpg(driver.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for driver in drivers:
            try:
                driver.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
    latencies, exact = [], True
    for name, load, want in zip(names, sent, expected, strict=True):
        since = load["schedule_start_ms"] + int(warmup * 1000)
        values, rows, distinct = row_latencies(f"s3a://{bucket}/{name}", settings, since, load["schedule_end_ms"])
        latencies += values
        exact = exact and rows == distinct == want
    result = {"pipelines": count, "mode": mode, "drivers": len(drivers), "rate_per_pipeline": rate,
              "rss_mean_mb": round(statistics.mean(samples)) if samples else None,
              "rss_max_mb": round(max(samples)) if samples else None, "cpu_s": round(cpu, 1),
              "cpu_s_per_pipeline": round(cpu / count, 1),
              **{f"latency_{k}": v for k, v in percentiles(latencies).items()}, "exact": exact}
    print("   " + json.dumps(result), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multi_pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--counts", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--rate", type=float, default=50, help="msg/s per pipeline (default 50)")
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.settings import load_settings

    stack.up()
    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    results = [measure(count, mode, args.rate, args.warmup, args.seconds, settings, run_id)
               for count in args.counts for mode in args.modes
               if not (count == 1 and mode == "separate" and "one-app" in args.modes)]  # 1 is 1 either way
    table = ["| pipelines | mode | drivers | RSS mean MB | RSS peak MB | CPU s | CPU s / pipeline | p50 s | p99 s | "
             "exact |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    table += [f"| {r['pipelines']} | {r['mode']} | {r['drivers']} | {r['rss_mean_mb']} | {r['rss_max_mb']} | "
              f"{r['cpu_s']} | {r['cpu_s_per_pipeline']} | {r.get('latency_p50')} | {r.get('latency_p99')} | "
              f"{r['exact']} |" for r in results]
    print("\n".join(table))
    if not args.no_write:
        doc = document("multi-pipeline", argv, results, module="multi_pipeline")
        write(doc, "Many pipelines in one application vs one application each",
              f"{args.rate:g} msg/s per pipeline, {args.warmup:g} s warm-up, {args.seconds:g} s measured; memory "
              f"and CPU of every driver process (Python and JVM) over the load.\n\n" + "\n".join(table))
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    raise SystemExit(main())
