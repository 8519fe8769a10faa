"""Where log records go. Library code logs through `logging.getLogger(__name__)`; the command decides the rendering:
on a terminal, rich's handler; in a pipe, a file or a scheduler's task log, one plain line per record. Always on
stderr, so stdout stays the command's result (or its JSON)."""

from __future__ import annotations

import logging
import sys
from functools import cache
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# Lakeline's own loggers speak at INFO; everything else (py4j, botocore, kafka clients) only from WARNING.
OWN_LOGGERS = ("lakeline", "ingest", "maintenance", "infra", "bench")


@cache
def stderr_console() -> "Console":
    """The one rich console on stderr: log records and progress bars share it, so a bar redraws below the lines."""
    from rich.console import Console

    return Console(stderr=True)


class _PlainFormatter(logging.Formatter):
    """The message alone, as the progress lines always read; warnings and errors say so."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {message}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (`ingest.events.json_log_line`, the shape run events share): the pipeline is the
    one the logging thread works for (`ingest.events.pipeline_context`), if any."""

    def format(self, record: logging.LogRecord) -> str:
        from ingest.events import current_pipeline, json_log_line

        return json_log_line(record.created, record.levelname.lower(), record.name,
                             getattr(record, "pipeline", None) or current_pipeline(), record.getMessage(),
                             exception=self.formatException(record.exc_info) if record.exc_info else None)


LOG_FORMATS = ("text", "json")


def configure(level: int = logging.INFO, stream: TextIO | None = None, log_format: str = "text") -> logging.Handler:
    """Send log records to `stream` (stderr): rich on a terminal, plain lines otherwise, or one JSON object per
    line (`log_format="json"`). Replaces the handlers a previous call installed, so it can be called once per
    command."""
    stream = stream or sys.stderr
    if log_format == "json":
        handler: logging.Handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter())
    elif stream is sys.stderr and stream.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(console=stderr_console(), show_time=False, show_path=False, markup=False,
                              rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(_PlainFormatter("%(message)s"))
    handler.set_name("lakeline")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "lakeline"]:
        root.removeHandler(old)
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)
    return handler
