"""Fan-out (`sink.route`): which table each record of a pipeline goes to. Pure: the route value -> table name rule,
the `max_tables` guard, and each routed table's own configuration (the pipeline's, with the route's overrides).

A record's route value is a header, its key or a declared field. The value becomes a table name by `sink.route.
table` (`gh_{value}`) and the name rule (`table_name`); a record with no value, or whose name is the pipeline's own
dead-letter table, goes to the default table (`sink.table`). Tables are made as values first appear, up to
`max_tables`; a value past that goes to the default table or, with `overflow: dead_letter`, to the dead letters
(reason `route_overflow`): never dropped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from ingest.config import PipelineConfig, Route

# A table name is cut to this many characters (with a hash of the value when cut): Delta and Iceberg take longer
# names, but a name is also a DAG id part, a path segment and an analyst's identifier.
MAX_NAME = 64
HASH_CHARS = 8
ROUTE_OVERFLOW = "route_overflow"  # the dead-letter reason of a record routed past max_tables (overflow: dead_letter)
DEFAULT, OVERFLOW = "", None  # `assign`'s answers besides a table name: the default table, the overflow

_OUTSIDE = re.compile(r"[^a-z0-9_]+")
_REPEATS = re.compile(r"_{2,}")


def normalise(value: str | None) -> str:
    """A route value as a name part: lower case, characters outside [a-z0-9_] become `_`, repeats collapsed, no
    leading or trailing `_` ("" for no value)."""
    if value is None:
        return ""
    return _REPEATS.sub("_", _OUTSIDE.sub("_", value.strip().lower())).strip("_")


def table_name(template: str, value: str | None) -> str | None:
    """The table a route value goes to (`template` with `{value}`), or None when the value is empty after
    normalising (the default table). A name starting with a digit gets `t_` in front; a name longer than MAX_NAME
    is cut, with `_` and the first HASH_CHARS hex digits of the normalised value's SHA-1 at the end, so two values
    share a table only when they normalise equal ("Push" and "push", "a-b" and "a_b")."""
    part = normalise(value)
    if not part:
        return None
    name = _REPEATS.sub("_", template.replace("{value}", part))
    if not name[0].isalpha():
        name = f"t_{name}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(part.encode()).hexdigest()[:HASH_CHARS]
        name = f"{name[:MAX_NAME - HASH_CHARS - 1].rstrip('_')}_{digest}"
    return name


def assign(config: PipelineConfig, values: Iterable[str | None], known: Iterable[str]) -> dict[str | None, str | None]:
    """Where each route value goes: a routed table's name, DEFAULT ("": the pipeline's `sink.table`) or OVERFLOW
    (None: `overflow: dead_letter`). `known`: the routed tables made so far. New tables are taken in name order
    while fewer than `max_tables` are known, so a batch replayed after a crash assigns exactly as it did before.
    A name equal to the pipeline's dead-letter table goes to the default table."""
    route = _route(config)
    made = set(known)
    names = {value: table_name(route.table, value) for value in set(values)}
    for name in sorted({n for n in names.values() if n and n not in made and n not in _reserved(config)}):
        if len(made) >= route.max_tables:
            break
        made.add(name)
    out: dict[str | None, str | None] = {}
    for value, name in names.items():
        if name is None or name in _reserved(config) or name == config.sink.table:
            out[value] = DEFAULT
        elif name in made:
            out[value] = name
        else:
            out[value] = DEFAULT if route.overflow == "default" else OVERFLOW
    return out


def known_routes(config: PipelineConfig, record_extra: dict | None) -> list[str]:
    """The routed tables a main-table commit record lists (`routes`: every table the route has made, cumulative)."""
    if config.sink.route is None or not record_extra:
        return []
    return [str(name) for name in record_extra.get("routes", []) if isinstance(name, str)]


def table_config(config: PipelineConfig, table: str) -> PipelineConfig:
    """A routed table's own configuration: the pipeline's, with `sink.table` the routed table, its overrides'
    fields added to the schema and its partitioning (when the override declares one), and no route of its own. Its
    dead-letter table stays the pipeline's. Every surface opens a routed table through this."""
    route = _route(config)
    override = route.overrides.get(table)
    schema = config.record_schema
    sink = {"table": table, "route": None, "dead_letter_table": config.sink.dead_letters, "location": None}
    if override is not None:
        if override.fields:
            names = {f.name.lower() for f in override.fields}
            schema = schema.model_copy(update={"fields": [f for f in schema.fields if f.name.lower() not in names]
                                                          + list(override.fields)})
        if override.partition is not None:
            sink["partition"] = list(override.partition)
    return config.model_copy(update={"record_schema": schema, "sink": config.sink.model_copy(update=sink)})


def _reserved(config: PipelineConfig) -> set[str]:
    return {config.sink.dead_letters}


def _route(config: PipelineConfig) -> Route:
    if config.sink.route is None:
        raise ValueError(f"pipeline {config.pipeline} has no sink.route")
    return config.sink.route
