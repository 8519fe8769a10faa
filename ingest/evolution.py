"""Schema changes between the declared schema and the table, decided without Spark (pure).

In `add` mode, fields that records carry and the table lacks become new nullable columns, typed from the values
(`additions`): JSON true/false -> boolean, integers -> bigint, other numbers -> double, strings -> string (with
`schema.infer_timestamps`, timestamp or date when every value parses as ISO-8601), objects -> struct, arrays -> array
of their elements' type. A key that is not a valid column name stays in _rescued_data. A field seen only as null (or
an empty array/object) is not added until a batch carries a value. `infer` is the one typing of JSON values: `lakeline
schema infer` uses it too. All the changes of one evolution are one table commit (`LakeTable.evolve`).

At start, the declared columns are compared with the table's: a column or nested field the table lacks is added
(nullable); a widening the two formats both support (int→long, float→double, decimal(p,s)→decimal(p2,s) with
p2 > p, tinyint/smallint→a wider integer) is applied with the format's own evolution; anything else (a narrowing,
a different kind of type) is refused before anything is written, naming the column, both types and the fix.
Columns the table has and the YAML does not are left alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime

from pyspark.sql.types import (ArrayType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, ShortType, StringType, StructField,
                               StructType, TimestampType)

from ingest.config import NAME

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class SchemaChange:
    """One change to apply to a table: `add` a (nested) field, or `widen` its type. A path names a nested field
    through struct fields, `element` (of an array) and `value` (of a map), as Spark's ALTER TABLE does."""

    kind: str                 # "add" | "widen"
    path: tuple[str, ...]
    data_type: DataType
    was: DataType | None = None

    def describe(self) -> str:
        name = ".".join(self.path)
        if self.kind == "add":
            return f"add {name} {self.data_type.simpleString()}"
        return f"widen {name} {self.was.simpleString()} -> {self.data_type.simpleString()}"


def widens(old: DataType, new: DataType) -> bool:
    """Whether a column of type `old` may become `new` on both formats without rewriting data."""
    if isinstance(old, _INTEGERS) and isinstance(new, _INTEGERS):
        return _INTEGERS.index(type(new)) > _INTEGERS.index(type(old))
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return False


def plan_changes(table: StructType, declared: StructType) -> tuple[list[SchemaChange], list[str]]:
    """(changes to apply, refusals) taking `table` to hold everything `declared` declares."""
    changes: list[SchemaChange] = []
    refusals: list[str] = []
    _compare_structs(table, declared, (), changes, refusals)
    return changes, refusals


def _compare_structs(table: StructType, declared: StructType, path: tuple[str, ...], changes: list[SchemaChange],
                     refusals: list[str]) -> None:
    existing = {f.name.lower(): f for f in table.fields}
    for field in declared.fields:
        here = (*path, field.name)
        held = existing.get(field.name.lower())
        if held is None:
            changes.append(SchemaChange("add", here, field.dataType))
        else:
            _compare(held.dataType, field.dataType, here, changes, refusals)


def _compare(old: DataType, new: DataType, path: tuple[str, ...], changes: list[SchemaChange],
             refusals: list[str]) -> None:
    if old == new:
        return
    if isinstance(old, StructType) and isinstance(new, StructType):
        _compare_structs(old, new, path, changes, refusals)
    elif isinstance(old, ArrayType) and isinstance(new, ArrayType):
        _compare(old.elementType, new.elementType, (*path, "element"), changes, refusals)
    elif isinstance(old, MapType) and isinstance(new, MapType):
        _compare(old.valueType, new.valueType, (*path, "value"), changes, refusals)
    elif widens(old, new):
        changes.append(SchemaChange("widen", path, new, old))
    else:
        name = ".".join(path)
        kind = "a narrowing" if widens(new, old) else "an incompatible change"
        refusals.append(f"{name}: the table has {old.simpleString()}, the YAML declares {new.simpleString()} "
                        f"({kind}). Declare {old.simpleString()} again, or write to a new table; a table column "
                        f"only widens (int->long, float->double, decimal precision up)")


_STEP = re.compile(r"\[\d+\]|[^.\[\]]+")


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")


def _string_type(value: str, timestamps: bool) -> DataType:
    if timestamps and _DATE.fullmatch(value):
        try:
            date.fromisoformat(value)
            return DateType()
        except ValueError:
            return StringType()
    if timestamps and _TIMESTAMP.fullmatch(value):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
            return TimestampType()
        except ValueError:
            return StringType()
    return StringType()


def infer(value, timestamps: bool = False, any_name: bool = False) -> DataType | None:
    """The column type for a JSON value (None for null, or an empty array/object: nothing to go on yet).
    `timestamps`: an ISO-8601 date or timestamp string is date / timestamp. `any_name`: keep nested keys that are
    not column names (a proposed declaration reads them by name; evolution leaves them rescued)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType()
    if isinstance(value, float):
        return DoubleType()
    if isinstance(value, str):
        return _string_type(value, timestamps)
    if isinstance(value, list):
        element = None
        for item in value:
            element = merge(element, infer(item, timestamps, any_name))
        return None if element is None else ArrayType(element, True)
    fields = [StructField(k, t, True) for k, v in value.items()
              if (any_name or NAME.match(k)) and (t := infer(v, timestamps, any_name)) is not None]
    return StructType(fields) if fields else None


_TIMES = (DateType, TimestampType)


def merge(a: DataType | None, b: DataType | None) -> DataType | None:
    """The one type both values fit: bigint and double give double, date and timestamp give timestamp, a date or
    timestamp and a string give string (only strings that all parse are typed as times), structs unite their
    fields; a real conflict keeps the first (the values that do not fit it are conflicts, ingest.transforms)."""
    if a is None or b is None:
        return a or b
    if a == b:
        return a
    kinds = {type(a), type(b)}
    if kinds == {LongType, DoubleType}:
        return DoubleType()
    if kinds == set(_TIMES):
        return TimestampType()
    if StringType in kinds and kinds & set(_TIMES):
        return StringType()
    if isinstance(a, StructType) and isinstance(b, StructType):
        names = {f.name.lower() for f in a.fields}
        merged = [StructField(f.name, merge(f.dataType, b[f.name].dataType) if f.name in b.fieldNames()
                              else f.dataType, True) for f in a.fields]
        return StructType(merged + [f for f in b.fields if f.name.lower() not in names])
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(merge(a.elementType, b.elementType), True)
    return a


def _steps(path: str) -> list[str]:
    return ["element" if step.startswith("[") else step for step in _STEP.findall(path)]


def _walk(table: StructType, steps: list[str]) -> tuple[tuple[str, ...], str] | None:
    """(path of the existing parent, new field name) for a rescued path, or None when it cannot be a column: a
    name that is not a column name, or a path through something that is not a struct (a map takes any key)."""
    node: DataType = table
    parent: list[str] = []
    for i, step in enumerate(steps):
        last = i == len(steps) - 1
        if step == "element":
            if not isinstance(node, ArrayType):
                return None
            node = node.elementType
            parent.append("element")
            continue
        if not isinstance(node, StructType):
            return None
        held = next((f for f in node.fields if f.name.lower() == step.lower()), None)
        if held is None:
            return (tuple(parent), step) if last and NAME.match(step) else None
        node = held.dataType
        parent.append(held.name)
    return None  # the field exists (a rescued key never names an existing field)


def additions(rescued: list[str], table: StructType, reserved: list[str] = (),
              timestamps: bool = False) -> list[SchemaChange]:
    """The fields to add for a batch's `_rescued_data` objects (paths as the record decoder writes them, e.g.
    `coupon`, `customer.since`, `items[3].color`), typed from every value seen, in first-seen order. `table` holds
    the record columns; `reserved` the other top-level names the table has (partition, pipeline columns): a field
    by such a name stays rescued; `timestamps`: `schema.infer_timestamps`. Names compare case-insensitively, as
    Spark's do."""
    taken = {name.lower() for name in reserved}
    found: dict[tuple[str, ...], tuple[tuple[str, ...], DataType | None]] = {}
    for text in rescued:
        for path, value in json.loads(text).items():
            spot = _walk(table, _steps(path))
            if spot is None or (not spot[0] and spot[1].lower() in taken):
                continue
            key = tuple(step.lower() for step in (*spot[0], spot[1]))
            named, data_type = found.get(key, ((*spot[0], spot[1]), None))
            found[key] = (named, merge(data_type, infer(value, timestamps)))
    return [SchemaChange("add", path, data_type) for path, data_type in found.values() if data_type is not None]
