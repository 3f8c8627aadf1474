"""The exact bytes of a JSON log line: its members, their order, and what is left out.

Records are made with a fixed creation time and formatted by the handler ``promoter
serve`` installs; each line is compared whole, so a change of order, spacing or
escaping shows.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

from promoter.api.logs import REQUEST_ID, event, handler

CREATED = 1_796_000_000.25  # 2026-11-30T00:53:20.250Z


def line(record: logging.LogRecord, fmt: str = "json") -> str:
    record.created = CREATED
    buffer = io.StringIO()
    sink = handler("json" if fmt == "json" else "text", buffer)
    sink.handle(record)
    return buffer.getvalue()


def captured(emit: object) -> logging.LogRecord:
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("promoter.test.lines")

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        assert callable(emit)
        emit(logger)
    finally:
        logger.removeHandler(keep)
    return records[0]


def test_a_line_has_time_level_logger_message_then_the_fields() -> None:
    record = captured(
        lambda log: event(log, "promotion completed", status="completed", code=None, files=2)
    )
    assert line(record) == (
        '{"time":"2026-11-30T00:53:20.250Z","level":"info","logger":"promoter.test.lines",'
        '"message":"promotion completed","status":"completed","files":2}\n'
    )


def test_the_request_id_follows_the_message() -> None:
    token = REQUEST_ID.set("trace-42.a:b")  # the handler stamps it while the request runs
    try:
        record = captured(lambda log: event(log, "answered", logging.WARNING, http_status=404))
        text = line(record)
    finally:
        REQUEST_ID.reset(token)
    assert text == (
        '{"time":"2026-11-30T00:53:20.250Z","level":"warning","logger":"promoter.test.lines",'
        '"message":"answered","request_id":"trace-42.a:b","http_status":404}\n'
    )


def test_other_extras_follow_the_fields_and_uvicorns_colour_copy_is_dropped() -> None:
    extra = {"fields": {"k": "field"}, "k": "extra", "color_message": "\x1b[32mok", "port": 1}
    record = captured(lambda log: log.info("started %s", "up", extra=extra))
    assert line(record) == (
        '{"time":"2026-11-30T00:53:20.250Z","level":"info","logger":"promoter.test.lines",'
        '"message":"started up","k":"field","port":1}\n'
    )


def test_values_are_ascii_and_anything_else_is_its_text() -> None:
    record = captured(lambda log: event(log, "x\x1b[31m\u202e\n", path=Path("/a"), raw=b"\xff"))
    assert line(record) == (
        '{"time":"2026-11-30T00:53:20.250Z","level":"info","logger":"promoter.test.lines",'
        '"message":"x\\u001b[31m\\u202e\\n","path":"/a","raw":"b\'\\\\xff\'"}\n'
    )


def test_the_exception_ends_the_line() -> None:
    def fail(log: logging.Logger) -> None:
        try:
            raise RuntimeError("broke")
        except RuntimeError:
            log.exception("failed", extra={"fields": {"stage": 2}})

    record = captured(fail)
    text = line(record)
    assert text.startswith(
        '{"time":"2026-11-30T00:53:20.250Z","level":"error","logger":"promoter.test.lines",'
        '"message":"failed","stage":2,"exception":"Traceback (most recent call last):\\n'
    )
    assert text.endswith('RuntimeError: broke"}\n') and text.count("\n") == 1
    assert line(record, "text").endswith("RuntimeError: broke\n")


def test_a_stack_is_not_written() -> None:
    record = captured(lambda log: log.info("here", stack_info=True))
    assert record.stack_info
    assert line(record) == (
        '{"time":"2026-11-30T00:53:20.250Z","level":"info","logger":"promoter.test.lines",'
        '"message":"here"}\n'
    )


def test_the_text_line_quotes_what_is_not_plain() -> None:
    record = captured(lambda log: event(log, "done", repository="work", note='a "b"\x1b'))
    assert line(record, "text") == (
        "2026-11-30T00:53:20.250Z info promoter.test.lines done repository=work "
        'note="a \\"b\\"\\u001b"\n'
    )
