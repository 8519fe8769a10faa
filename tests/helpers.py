"""Test helpers: pipeline YAML builders with unique names, so tests never share topics, tables or checkpoints."""

from __future__ import annotations

import uuid
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
