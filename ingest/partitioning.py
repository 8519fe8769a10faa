"""Partition fields: the table's partitioning as a list of (source field, transform), the same on both formats.

A transform is `identity`, `year`, `month`, `day`, `hour`, `bucket(N)` or `truncate(W)` on a top-level field or a
field inside structs (`customer.tier`). Iceberg holds them as hidden partitioning (ingest.formats.iceberg); Delta
as generated columns (ingest.formats.delta). This module is the neutral part, with no JVM: parsing, which types a
transform takes, the partition's name, and the partition key maintenance uses (`col=value/col=value`).

A partition's value is shown the same way on both formats: year `2026`, month `2026-11`, day `2026-11-20`, hour
`2026-11-20-13`, bucket and truncate and identity as the value itself, null as `__HIVE_DEFAULT_PARTITION__`.
Bucket numbers differ between the formats (Iceberg's bucket hash vs Spark's `hash`), the rest is equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, IntegerType,
                               LongType, ShortType, StringType, StructType, TimestampNTZType, TimestampType)

TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket(N)", "truncate(W)")
TIME_TRANSFORMS = ("year", "month", "day", "hour")
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"
_TRANSFORM = re.compile(r"^\s*(?:(identity|year|month|day|hour)|(bucket|truncate)\s*\(\s*(\d+)\s*\))\s*$")
_SUFFIX = {"year": "year", "month": "month", "day": "day", "hour": "hour", "bucket": "bucket", "truncate": "trunc"}

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_TIMES = (TimestampType, TimestampNTZType)
# What each transform takes (Iceberg's rules, minus what Delta's generated columns could not express the same way).
_ACCEPTS: dict[str, tuple[tuple[type, ...], str]] = {
    "identity": ((StringType, BooleanType, DateType, DecimalType, *_INTEGRAL),
                 "a string, boolean, integer, decimal or date field (a timestamp takes hour or day; a float "
                 "takes bucket)"),
    "year": ((*_TIMES, DateType), "a timestamp or date field"),
    "month": ((*_TIMES, DateType), "a timestamp or date field"),
    "day": ((*_TIMES, DateType), "a timestamp or date field"),
    "hour": (_TIMES, "a timestamp field"),
    "bucket": ((StringType, BinaryType, DateType, DecimalType, *_TIMES, *_INTEGRAL),
               "a string, binary, integer, decimal, date or timestamp field"),
    "truncate": ((StringType, *_INTEGRAL), "a string or integer field"),
}


@dataclass(frozen=True)
class Transform:
    kind: str  # identity, year, month, day, hour, bucket, truncate
    width: int | None = None  # bucket count or truncate width

    @classmethod
    def parse(cls, text: str) -> Transform:
        match = _TRANSFORM.match(text)
        if match is None:
            raise ValueError(f"transform {text!r} is not one of {', '.join(TRANSFORMS)} (e.g. bucket(16))")
        if match.group(1):
            return cls(match.group(1))
        width = int(match.group(3))
        if width < 1:
            raise ValueError(f"transform {text!r}: {match.group(2)} needs a positive number")
        return cls(match.group(2), width)

    def __str__(self) -> str:
        return self.kind if self.width is None else f"{self.kind}({self.width})"

    @property
    def is_time(self) -> bool:
        return self.kind in TIME_TRANSFORMS


@dataclass(frozen=True)
class PartitionField:
    """One resolved partition field: its dotted source path, the source's type, the transform and its name (the
    Delta generated column / Iceberg partition field)."""

    source: str
    transform: Transform
    column: str
    source_type: DataType

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.source.split("."))

    @property
    def is_source_column(self) -> bool:
        """An identity partition on a top-level field named as the field: partitioned by the column itself."""
        return self.transform.kind == "identity" and self.column == self.source


def default_column(source: str, transform: Transform) -> str:
    """`occurred_at` + day -> `occurred_at_day`; `customer.id` + bucket(16) -> `customer_id_bucket`; identity
    keeps a top-level field's own name."""
    flat = source.replace(".", "_")
    return flat if transform.kind == "identity" else f"{flat}_{_SUFFIX[transform.kind]}"


def source_type(schema: StructType, source: str) -> tuple[str, DataType]:
    """The canonical dotted path and type of `source` in `schema` (through structs; names case-insensitive).
    ValueError names the part that is missing, or the array or map it would have to reach into."""
    current: DataType = schema
    names: list[str] = []
    for part in source.split("."):
        if not isinstance(current, StructType):
            raise ValueError(f"{'.'.join(names)!r} is {current.simpleString()}: a partition source must be a "
                             "field reached through structs only (not inside an array or map)")
        found = next((f for f in current.fields if f.name.lower() == part.lower()), None)
        if found is None:
            where = f" in {'.'.join(names)!r}" if names else ""
            raise ValueError(f"{part!r} is not a field{where}; declared: "
                             f"{', '.join(f.name for f in current.fields)}")
        names.append(found.name)
        current = found.dataType
    return ".".join(names), current


def resolve(source: str, transform: str, column: str | None, schema: StructType) -> PartitionField:
    """Check one partition entry against the declared schema (ValueError says what is wrong and what fits)."""
    parsed = Transform.parse(transform)
    path, data_type = source_type(schema, source)
    accepted, what = _ACCEPTS[parsed.kind]
    if not isinstance(data_type, accepted):
        raise ValueError(f"transform {parsed} needs {what}; {path!r} is {data_type.simpleString()}")
    return PartitionField(path, parsed, column or default_column(path, parsed), data_type)


def check_fields(fields: list[PartitionField]) -> None:
    """Names unique; no two fields with the same source and transform; one time transform per source (Iceberg
    calls day and hour of the same field redundant)."""
    seen: dict[str, PartitionField] = {}
    for field in fields:
        if field.column.lower() in seen:
            raise ValueError(f"two partition fields are named {field.column!r}; give one a `column`")
        seen[field.column.lower()] = field
    for index, field in enumerate(fields):
        for other in fields[:index]:
            if other.source.lower() == field.source.lower() and (
                    other.transform == field.transform or (other.transform.is_time and field.transform.is_time)):
                raise ValueError(f"{field.source!r} is partitioned by both {other.transform} and {field.transform}; "
                                 "keep one (a finer time transform already implies the coarser one)")


# ---- partition keys: how maintenance names one partition ------------------------------------------------------
def partition_key(values: list[tuple[str, str | None]]) -> str:
    """`col=value/col=value` in the declared order ('' for an unpartitioned table). `/`, `=` and `%` in a value
    are percent-escaped, as Hive does in paths; null is `__HIVE_DEFAULT_PARTITION__`."""
    return "/".join(f"{column}={NULL_VALUE if value is None else quote(value, safe='')}"
                    for column, value in values)


def parse_key(key: str) -> list[tuple[str, str | None]]:
    """The (column, value) pairs of a partition key (None for null). ValueError for a malformed key."""
    if not key:
        return []
    pairs = []
    for part in key.split("/"):
        column, sep, value = part.partition("=")
        if not sep or not column:
            raise ValueError(f"partition {key!r}: {part!r} is not column=value")
        pairs.append((column, None if value == NULL_VALUE else unquote(value)))
    return pairs


def key_matches(key: str, wanted: str) -> bool:
    """Whether partition `key` is selected by `wanted`, a key naming some or all of its columns (so
    `occurred_at_day=2026-11-20` selects every bucket of that day). A malformed `wanted` selects nothing."""
    if "=" not in wanted:
        return False
    have = dict(parse_key(key))
    return all(column in have and have[column] == value for column, value in parse_key(wanted))


def recency_key(key: str, time_columns: list[str]) -> tuple:
    """Sort key that puts the newest partition last: the time columns' values in declared order (their text sorts
    chronologically), then the whole key. Nulls sort oldest."""
    values = dict(parse_key(key))
    return (*[values.get(c) or "" for c in time_columns], key)
