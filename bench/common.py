"""What the benchmarks share: the sample pipeline they ingest with, the machine description and the results files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, UTC
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
STACK = "local stack: KRaft broker, moto S3, Spark local[2]; all on this machine"


def orders_pipeline(name: str, fmt: str, topic: str, max_offsets_per_trigger: int = 250_000,
                    source: str = "kafka"):
    """The sample orders pipeline (conf/pipelines/orders_delta.yaml's schema) on `topic` (a Kafka topic, or with
    source="kinesis" a Kinesis stream), into table `name`."""
    import yaml

    from infra.paths import REPO_ROOT
    from ingest.config import PipelineConfig

    template = yaml.safe_load((REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml").read_text())
    return PipelineConfig.model_validate({
        "pipeline": name,
        "source": ({"kind": "kafka", "topics": [topic], "starting_offsets": "earliest",
                    "max_offsets_per_trigger": max_offsets_per_trigger} if source == "kafka" else
                   {"kind": "kinesis", "stream": topic, "max_records_per_batch": max_offsets_per_trigger}),
        "schema": template["schema"],
        "sink": {"format": fmt, "table": name, "namespace": "bench",
                 "partition": {"column": "event_date", "source": "event_time", "transform": "day"}},
    })


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": round(mem_kb / 1024 / 1024, 1),
            "python": platform.python_version(),
            "java": subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]}


def document(name: str, argv: list[str] | None, results: list[dict], module: str | None = None, **fields) -> dict:
    """The results document: which benchmark, when, the command as given, the machine and its load, the rows.
    `module` is the bench module when it is not `name` (one module writing several kinds of results)."""
    command = f"python -m bench.{module or name} " + " ".join(argv if argv is not None else sys.argv[1:])
    return {"benchmark": name, "at": datetime.now(UTC).isoformat(timespec="seconds"), "command": command.strip(),
            **fields, "machine": machine(), "load_average_at_end": os.getloadavg(), "results": results}


def result_name(doc: dict) -> str:
    """<benchmark>-<date> (the run's UTC date), then -<tag> when LAKELINE_BENCH_TAG is set (`python -m bench
    --tag`), so a second run on one day does not overwrite the first."""
    tag = os.environ.get("LAKELINE_BENCH_TAG", "").strip()
    return f"{doc['benchmark']}-{doc['at'][:10]}" + (f"-{tag}" if tag else "")


def write(doc: dict, title: str, body: str, stack: str = STACK) -> Path:
    """results/<result_name>.json and .md (title, command, machine, then `body`); returns the stem."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / result_name(doc)
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    stem.with_suffix(".md").write_text(f"# {title}, {doc['at']}\n\nCommand: `{doc['command']}` ({stack})\n\n"
                                       f"Machine: {doc['machine']}\n\n{body.rstrip()}\n")
    print(f"written {stem}.json and .md")
    return stem


def cpu_seconds(parent: int | None = None, group: int | None = None) -> float:
    """user+system CPU seconds, from /proc, of the live processes whose parent pid is `parent` or whose process
    group is `group`."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after the name: state, ppid, pgrp
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == parent or int(fields[2]) == group:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total
