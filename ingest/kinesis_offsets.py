"""Pure offset planning for the Kinesis source: positions, shard order after resharding, per-batch budgets.

No Spark, no boto3: everything here is unit-tested with plain values.

Offset (what Spark stores in offsets/N, JSON of primitives):

    {"stream": "<name>", "shards": {"<shard id>": "<position>"}}

Position of one shard, always "everything up to here is planned":

    "TRIM_HORIZON"          nothing read yet; start at the oldest retained record
    "AT_TIMESTAMP:<epoch>"  nothing read yet; start at the first record at/after epoch seconds (float)
    "AFTER:<seq>"           records up to and including sequence number <seq> are planned
    "DONE:<seq>"            the shard is closed and read to its end (<seq> may be empty: no record read)

Sequence numbers are compared numerically (int(); real ones have ~56 digits) and stored in tables as
fixed-width zero-padded strings (`pad_sequence`) so they also sort correctly in SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

TRIM_HORIZON = "TRIM_HORIZON"
AT_TIMESTAMP = "AT_TIMESTAMP:"
AFTER = "AFTER:"
DONE = "DONE:"
SEQ_WIDTH = 64  # Kinesis sequence numbers seen in practice have up to 56 digits


@dataclass(frozen=True)
class ShardInfo:
    shard_id: str
    parent: str | None = None
    adjacent_parent: str | None = None
    # Set when the shard is closed (split/merged): the highest sequence number the shard can hold.
    ending_sequence: str | None = None

    @property
    def closed(self) -> bool:
        return self.ending_sequence is not None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent, self.adjacent_parent) if p)


def pad_sequence(seq: str | int) -> str:
    text = str(int(seq))
    if len(text) > SEQ_WIDTH:
        raise ValueError(f"Kinesis sequence number {text} is longer than {SEQ_WIDTH} digits")
    return text.zfill(SEQ_WIDTH)


def after(seq: str | int) -> str:
    return AFTER + str(int(seq))


def done(seq: str | int | None) -> str:
    return DONE + ("" if seq is None else str(int(seq)))


def last_sequence(position: str) -> int | None:
    """The last planned sequence number of a position (None: nothing read yet)."""
    for prefix in (AFTER, DONE):
        if position.startswith(prefix):
            rest = position[len(prefix):]
            return int(rest) if rest else None
    if position == TRIM_HORIZON or position.startswith(AT_TIMESTAMP):
        return None
    raise ValueError(f"not a Kinesis shard position: {position!r}")


def is_done(position: str | None) -> bool:
    return position is not None and position.startswith(DONE)


def compare(a: str, b: str) -> int:
    """Order two positions of the same shard: -1, 0, 1. Unread < any sequence; DONE:x > AFTER:x."""
    sa, sb = last_sequence(a), last_sequence(b)
    ka = (-1 if sa is None else sa, 1 if is_done(a) else 0)
    kb = (-1 if sb is None else sb, 1 if is_done(b) else 0)
    return (ka > kb) - (ka < kb)


def initial_position(shard: ShardInfo, starting_position: str, listed: set[str], now: float) -> str:
    """Where a shard first seen starts. A child of a shard we know of always starts at TRIM_HORIZON (all of it
    must be read); a shard present at the start follows the configured starting position."""
    if any(p in listed for p in shard.parents):
        return TRIM_HORIZON
    if starting_position == "LATEST":
        return f"{AT_TIMESTAMP}{now}"
    if starting_position.startswith(AT_TIMESTAMP):
        return starting_position
    return TRIM_HORIZON


def with_new_shards(positions: dict[str, str], shards: list[ShardInfo], starting_position: str,
                    now: float, first: bool = False) -> dict[str, str]:
    """Add shards not seen before. After the first plan every new shard starts at TRIM_HORIZON: it appeared
    after the start (a reshard), so none of its records may be skipped."""
    listed = {s.shard_id for s in shards}
    out = dict(positions)
    for shard in shards:
        if shard.shard_id not in out:
            out[shard.shard_id] = initial_position(shard, starting_position if first else TRIM_HORIZON,
                                                   listed, now)
    return out


def readable_shards(shards: list[ShardInfo], positions: dict[str, str]) -> list[ShardInfo]:
    """Shards this batch may read, in a stable order: not finished, and every parent still listed is DONE.

    A parent that is no longer listed has aged out of retention: it cannot be read, so it does not block its
    children. Children of a parent finished in this plan become readable only in the next plan, so every record
    of a child lands in a later batch than every record of its parents.
    """
    listed = {s.shard_id for s in shards}
    out = []
    for shard in sorted(shards, key=lambda s: s.shard_id):
        if is_done(positions.get(shard.shard_id)):
            continue
        if all(p not in listed or is_done(positions.get(p)) for p in shard.parents):
            out.append(shard)
    return out


def split_budget(limit: int, count: int) -> list[int]:
    """Split a per-batch record limit over `count` shards as evenly as possible (each at least 1)."""
    if count <= 0:
        return []
    base, extra = divmod(max(limit, count), count)
    return [base + (1 if i < extra else 0) for i in range(count)]


@dataclass(frozen=True)
class ShardRange:
    """What one input partition reads: records after `start` up to and including sequence `end`."""
    shard_id: str
    start: str   # a position (TRIM_HORIZON / AT_TIMESTAMP:... / AFTER:seq)
    end: int     # last sequence number included


def plan_ranges(start: dict[str, str], end: dict[str, str]) -> list[ShardRange]:
    """One range per shard whose planned end moved past its start. A shard new in `end` starts at TRIM_HORIZON
    unless `end` itself is an unread position. Deterministic: a replayed batch gets the same ranges."""
    ranges = []
    for shard_id in sorted(end):
        stop = last_sequence(end[shard_id])
        if stop is None:
            continue
        begin = start.get(shard_id, TRIM_HORIZON)
        if is_done(begin):
            continue
        first = last_sequence(begin)
        if first is not None and first >= stop:
            continue
        ranges.append(ShardRange(shard_id, AFTER + str(first) if first is not None else begin, stop))
    return ranges


def offset(stream: str, positions: dict[str, str]) -> dict:
    return {"stream": stream, "shards": dict(sorted(positions.items()))}


def positions_of(off: dict | None) -> dict[str, str]:
    return dict((off or {}).get("shards", {}))


def merge_max(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    """Per shard, the later of two positions (used when Spark tells the reader where a batch ended)."""
    out = dict(a)
    for shard_id, pos in b.items():
        if shard_id not in out or compare(pos, out[shard_id]) > 0:
            out[shard_id] = pos
    return out


# ---- bridge to the pipeline's source-neutral offsets: (stream, shard) -> next position (int) -------------------
def is_kinesis_offset(data: object) -> bool:
    return isinstance(data, dict) and set(data) == {"stream", "shards"} and isinstance(data["shards"], dict)


def next_positions(off: dict) -> dict[tuple[str, str], int]:
    """A source offset as the pipeline's Offsets: per shard, last planned sequence number + 1 (0: none yet)."""
    out = {}
    for shard_id, position in off["shards"].items():
        seq = last_sequence(position)
        out[(off["stream"], shard_id)] = 0 if seq is None else seq + 1
    return out


def starting_positions(table_end: dict[tuple[str, int | str], int], stream: str) -> dict[str, str]:
    """Where a rebuilt checkpoint starts each shard the table knows: after its last recorded sequence number.
    Shards the table has not seen are not listed (they start at TRIM_HORIZON)."""
    return {str(shard): after(end - 1) for (name, shard), end in table_end.items() if name == stream and end > 0}
