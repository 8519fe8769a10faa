"""How a command shows its result: as text for a person, or as one JSON document for a program (`--output json`).
Progress notes go to stdout with text and to stderr with JSON, so stdout stays one parsable document; log records
(lakeline.logs) and progress bars always go to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, time
from functools import cache
from typing import TYPE_CHECKING

from lakeline.logs import stderr_console

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


class Output:
    """The output strategy of one command run."""

    def __init__(self, kind: str = "text"):
        self.kind = kind

    @property
    def json(self) -> bool:
        return self.kind == "json"

    def note(self, message: str) -> None:
        """A progress or context line (never part of the result)."""
        print(message, file=sys.stderr if self.json else sys.stdout, flush=True)

    @contextmanager
    def progress(self, description: str) -> Iterator[Callable[..., None]]:
        """A progress bar on a terminal, fed by the callback this yields (`advance(done, total, ...)`); elsewhere
        the callback does nothing (the log lines already tell the progress to a file or a task log)."""
        if not sys.stderr.isatty():
            yield lambda done, total, *_: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=stderr_console(), transient=True) as bar:
            task = bar.add_task(description, total=None)
            yield lambda done, total, *_: bar.update(task, completed=done, total=total)

    def result(self, data: dict | list, text: "str | RenderableType | Callable[[], str | RenderableType]") -> None:
        """The command's result: `data` as JSON, or `text` (a string or a rich renderable, or a function returning
        one) for a person."""
        if self.json:
            print(json.dumps(data, indent=2, default=_json_value))
            return
        shown = text() if callable(text) else text
        if isinstance(shown, str):
            print(shown)
        else:
            stdout_console().print(shown)


def _json_value(value: object) -> object:
    """What JSON cannot hold: times as ISO-8601, bytes as text, anything else as its string."""
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@cache
def stdout_console() -> "Console":
    """Rich on stdout; a pipe or a file has no width, so tables there get room instead of the 80-column default."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def output_of(args) -> Output:
    return Output(getattr(args, "output", "text") or "text")


def output_arg(parser) -> None:
    parser.add_argument("--output", choices=["text", "json"], default="text",
                        help="text for a person (default) or one JSON document on stdout")
