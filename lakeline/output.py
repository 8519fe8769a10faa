"""How a command shows its result: as text for a person, or as one JSON document for a program (`--output json`).
Progress notes go to stdout with text and to stderr with JSON, so stdout stays one parsable document."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


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

    @property
    def echo(self) -> Callable[[str], None]:
        """`note`, for library functions that report progress through a callable."""
        return self.note

    def result(self, data: dict | list, text: str | Callable[[], str]) -> None:
        """The command's result: `data` as JSON, or `text` (or what it returns) for a person."""
        if self.json:
            print(json.dumps(data, indent=2, default=str))
        else:
            print(text() if callable(text) else text)


def output_of(args) -> Output:
    return Output(getattr(args, "output", "text") or "text")


def output_arg(parser) -> None:
    parser.add_argument("--output", choices=["text", "json"], default="text",
                        help="text for a person (default) or one JSON document on stdout")
