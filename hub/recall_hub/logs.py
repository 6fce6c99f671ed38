"""Log lines as text or as JSON objects, and the request they were written for.

While the hub serves a request, :func:`serving` binds its request id, caller and operation to the running
task (context variables: other requests' tasks never see them), and :class:`RequestContextFilter` copies
them onto every record logged meanwhile, from any module. :class:`JsonFormatter` writes one JSON object a
line, so a log pipeline can select, say, every line of one request id across hub processes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_request_id: ContextVar[str | None] = ContextVar("recall_request_id", default=None)
_caller: ContextVar[str | None] = ContextVar("recall_caller", default=None)
_op: ContextVar[str | None] = ContextVar("recall_op", default=None)

REQUEST_FIELDS = ("request_id", "caller", "op")
"""The attributes :class:`RequestContextFilter` sets on a record (None outside a request)."""


@contextmanager
def serving(request_id: str, caller: str, op: str) -> Iterator[None]:
    """Within the block, log records carry this request's id, caller and operation."""
    tokens = (_request_id.set(request_id), _caller.set(caller), _op.set(op))
    try:
        yield
    finally:
        _op.reset(tokens[2])
        _caller.reset(tokens[1])
        _request_id.reset(tokens[0])


class RequestContextFilter(logging.Filter):
    """Stamps each record with the request being served where it was logged (on the handler, so the
    values are read in the logging task, whenever the record is formatted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in zip(REQUEST_FIELDS, (_request_id, _caller, _op), strict=True):
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601, ms), ``level``, ``logger``, ``message``, the
    request fields when the line was logged while serving one, and ``exception`` with the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in REQUEST_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def format_from_env() -> LogFormat:
    """``RECALL_LOG_FORMAT`` (the hub's ``log_format`` setting): text unless it says json."""
    chosen = os.environ.get("RECALL_LOG_FORMAT", "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"RECALL_LOG_FORMAT: one of {', '.join(LOG_FORMATS)}, not {chosen!r}")
    return "json" if chosen == "json" else "text"


def handler(log_format: LogFormat, stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler writing ``log_format`` lines, request fields included."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format: one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    out = logging.StreamHandler(stream if stream is not None else sys.stderr)
    out.addFilter(RequestContextFilter())
    out.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    return out


def configure(level: int, log_format: LogFormat, stream: IO[str] | None = None) -> None:
    """The root logger writes ``log_format`` lines at ``level`` (replacing its handlers)."""
    logging.basicConfig(level=level, handlers=[handler(log_format, stream)], force=True)
