"""The one YAML reader for Lakeline's conf files (pipelines, tables): a syntax error names the file, line and
column; anything but a mapping at the top is refused with the keys the file should hold."""

from __future__ import annotations

from pathlib import Path

import yaml

from ingest.errors import ConfigError


def load_yaml_mapping(path: Path, expected_keys: str) -> dict:
    """The top-level mapping of the YAML file at `path`. `expected_keys` (e.g. "pipeline, source, schema, sink,
    ...") completes the error for a file whose top level is not a mapping."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys ({expected_keys}), got {type(data).__name__}")
    return data
