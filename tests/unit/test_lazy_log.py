"""A module's lazy logger says what ``logging.getLogger(name)`` would, from the same place.

Importing ``promoter.lazy_log`` loads no ``logging``; a message through ``LazyLogger`` is a
record of the named logger whose origin (file, line, function) is the caller's, seen by
the handlers and levels set on that logger, and ``exception`` carries the traceback.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from promoter.lazy_log import LazyLogger


def test_importing_it_loads_no_logging() -> None:
    probe = "import sys, promoter.lazy_log; print('logging' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _say(log: LazyLogger | logging.Logger) -> None:
    log.warning("kept %s", "x")


def test_a_record_is_the_named_loggers_from_the_callers_place(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="promoter.test_lazy"):
        _say(LazyLogger("promoter.test_lazy"))
        _say(logging.getLogger("promoter.test_lazy"))
        LazyLogger("promoter.test_lazy").debug("quiet %d", 1)
        try:
            raise ValueError("boom")
        except ValueError:
            LazyLogger("promoter.test_lazy").exception("failed")
    lazy, direct, debug, failed = caplog.records
    seen = ("name", "levelname", "pathname", "lineno", "funcName", "module")
    assert [getattr(lazy, k) for k in seen] == [getattr(direct, k) for k in seen]
    assert lazy.getMessage() == direct.getMessage() == "kept x"
    assert lazy.funcName == "_say" and lazy.pathname == __file__
    assert debug.getMessage() == "quiet 1" and debug.funcName == failed.funcName
    assert failed.exc_info is not None and failed.exc_info[0] is ValueError
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="promoter.test_lazy"):
        LazyLogger("promoter.test_lazy").warning("below the level")
    assert caplog.records == []
