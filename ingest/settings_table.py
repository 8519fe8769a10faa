"""The table of Lakeline's environment variables, rendered from the Settings model, and the docs page holding it.

`python -m ingest.settings_table` rewrites the table between the markers in docs/configuration.md; a unit test
(tests/unit/test_settings_surface.py) fails when the page and the model differ.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import SecretStr

from ingest.settings import KAFKA_OPTION_PREFIX, Settings, variable_name

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"
_TYPE_NAMES = {str: "string", bool: "boolean", float: "number", int: "integer", SecretStr: "secret"}


def settings_table() -> str:
    """The Markdown table: one row per Settings field (variable, type, default, description)."""
    rows = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for field, info in Settings.model_fields.items():
        name = f"{KAFKA_OPTION_PREFIX}<NAME>" if field == "kafka_options" else variable_name(field)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        default = extra.get("shown_default") or _shown_default(info.default)
        cells = [f"`{name}`", _type_name(info.annotation), default, info.description or ""]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def render_page(page: str) -> str:
    """`page` with the text between the markers replaced by the current table."""
    if START not in page or END not in page:
        raise ValueError(f"the page has no {START} ... {END} markers")
    before, rest = page.split(START, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{START}\n{settings_table()}\n{END}{after}"


def _type_name(annotation) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin is dict:
        return "secret per variable" if args[1] is SecretStr else "JSON object"
    return _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _shown_default(default) -> str:
    if default is None:
        return "unset"
    if default in ("", {}):
        return "empty"
    return f"`{str(default).lower() if isinstance(default, bool) else default}`"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DOC
    target.write_text(render_page(target.read_text()))
    print(f"wrote the settings table to {target}")
