"""Structured log lines: the request id, the two formats, and one helper to emit.

``REQUEST_ID`` is a ``contextvars.ContextVar`` set for the life of each request (and
carried into the promotion attempt it starts); ``RequestIdFilter`` stamps it on every
record. ``JsonFormatter`` writes one JSON object per line (the record's own time, level,
logger, message, request id, fields, exception), built as one dict and dumped once.
``TextFormatter`` writes a readable ``key=value`` line, a value bare when it is plain
and JSON-quoted otherwise (structlog's logfmt renderer lets an ESC through; its
key-value and console renderers quote every value with ``repr``). ``configure``
installs one of them on the root logger for ``promoter serve``, which uvicorn's loggers
reach too. ``event(logger, message, **fields)`` logs a line whose fields are kept as
data (``record.fields``), not interpolated into the message.

It does not decide what is logged: callers pass fields explicitly and never a token,
a request or response body, or blob content. ``safe_request_id`` bounds a client's
``X-Request-ID`` to 64 characters of ``[A-Za-z0-9._:-]``; anything else is replaced.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["json", "text"]
REQUEST_ID: ContextVar[str | None] = ContextVar("promoter_request_id", default=None)
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_RESERVED = frozenset(vars(logging.makeLogRecord({})))
_SKIPPED = frozenset({"fields", "request_id", "message", "color_message"})  # uvicorn's ANSI copy


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


def safe_request_id(offered: str | None) -> str:
    """The client's id when it is short and plain, else a fresh one."""
    if offered is not None and _SAFE_ID.fullmatch(offered):
        return offered
    return new_request_id()


def event(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``message`` with ``fields`` as structured data; ``None`` values are dropped."""
    if logger.isEnabledFor(level):
        kept = {k: v for k, v in fields.items() if v is not None}
        logger.log(level, message, extra={"fields": kept})


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    out: dict[str, Any] = dict(fields) if isinstance(fields, dict) else {}
    for key, value in vars(record).items():
        if key not in _RESERVED and key not in _SKIPPED:
            out.setdefault(key, value)
    return out


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, fields,
    exception, in that order; ASCII only, so no control character reaches the log. The
    line is built as one dict and dumped once (no processor chain: a few microseconds a
    line, the access line of every request among them)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _time(record),  # the record's own time, not the formatting's
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            line["request_id"] = request_id
        line.update(_fields(record))  # a stack is not written
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=True, default=str, separators=(",", ":"))


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and text.isprintable() and re.fullmatch(r"[^\s\"=]+", text):
        return text
    return json.dumps(text, ensure_ascii=not text.isprintable())  # no raw control characters


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_time(record), record.levelname.lower(), record.name, record.getMessage()]
        request_id = getattr(record, "request_id", None)
        if request_id:
            parts.append(f"request_id={request_id}")
        parts.extend(f"{k}={_text_value(v)}" for k, v in _fields(record).items())
        text = " ".join(parts)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def default_format(stream: Any = None) -> LogFormat:
    """Text on a terminal, JSON otherwise (a service manager, a pipe, a file)."""
    target = sys.stderr if stream is None else stream
    isatty = getattr(target, "isatty", None)
    return "text" if callable(isatty) and isatty() else "json"


def handler(fmt: LogFormat, stream: Any = None) -> logging.Handler:
    out = logging.StreamHandler(sys.stderr if stream is None else stream)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    out.addFilter(RequestIdFilter())
    return out


def configure(fmt: LogFormat, level: str = "info", stream: Any = None) -> None:
    """Send every logger (uvicorn's included) through one handler in ``fmt``."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt, stream))
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # promoter.access replaces it
