"""The commit record Lakeline writes into every table commit: which pipeline, which checkpoint lineage and batch,
and the source offsets the table now holds. The table, not the Spark checkpoint, is the record of truth."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

COMMIT_KEY = "lakeline.commit"  # Iceberg snapshot-summary key; Delta keeps the JSON in commitInfo.userMetadata

# (topic or stream, partition or shard) -> next offset to read (one past the last offset the table covers).
# Kafka: (topic, int partition) -> offset. Kinesis: (stream, shard id string) -> last sequence number + 1 (Python
# ints have no size limit; JSON keeps them exact).
Offsets = dict[tuple[str, int | str], int]


def _partition_key(part: str) -> int | str:
    return int(part) if part.lstrip("-").isdigit() else part


def _count(value) -> int | None:
    return None if value is None else int(value)


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, part), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(offset)
    return out


def offsets_from_json(data: dict[str, dict[str, int]]) -> Offsets:
    return {(topic, _partition_key(part)): int(offset)
            for topic, parts in data.items() for part, offset in parts.items()}


@dataclass(frozen=True)
class CommitRecord:
    pipeline: str
    lineage: str
    batch_id: int
    # Per partition: the first offset this batch covered and the table's next offset after it.
    start: Offsets
    end: Offsets
    # Records counted at commit; None for a one-pass batch, whose counts are observed on the write itself (its run
    # event has them; the table's own metrics too).
    rows: int | None
    dead_letters: int | None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "lakeline": 1, "pipeline": self.pipeline, "lineage": self.lineage, "batch_id": self.batch_id,
            "start": offsets_to_json(self.start), "end": offsets_to_json(self.end),
            "rows": self.rows, "dead_letters": self.dead_letters, **self.extra,
        }, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str | None) -> "CommitRecord | None":
        """Parse a commit record; None if `text` is not one of ours (another writer's metadata, compaction)."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(data, dict) or data.get("lakeline") != 1:
            return None
        known = {"lakeline", "pipeline", "lineage", "batch_id", "start", "end", "rows", "dead_letters"}
        return CommitRecord(
            pipeline=data["pipeline"], lineage=data["lineage"], batch_id=int(data["batch_id"]),
            start=offsets_from_json(data["start"]), end=offsets_from_json(data["end"]),
            rows=_count(data.get("rows")), dead_letters=_count(data.get("dead_letters")),
            extra={k: v for k, v in data.items() if k not in known},
        )
