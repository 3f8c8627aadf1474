"""How the ``promoter`` process starts and ends: nothing loaded it does not use, no teardown.

``defer_httpx_cli`` keeps httpx from importing its own command line (``httpx._main``:
click, rich's progress, table and syntax, pygments; about 40 ms of CPU) when promoter's
client imports httpx; promoter never calls it, and should anything ask for
``httpx._main.main`` the real module is loaded then. ``finish`` ends the process once a
command returned: it runs what was registered to run at exit (log handlers flushed,
``weakref.finalize`` clean-ups such as temporary directories), flushes stdout and
stderr, and leaves with ``os._exit``, skipping the interpreter's teardown of every
module and object (about 30 ms) that the operating system reclaims anyway. It does so
only when no other non-daemon thread is alive (a writer still at work keeps the
ordinary exit, which waits for it) and never when stdout cannot be flushed.

``deferred`` names a function of a module that is imported on the function's first
call, so a command module can name what only some of its paths use without loading it.

Deliberately not here: parsing or running a command (``promoter.cli.main``).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, NoReturn

_HTTPX_CLI = "httpx._main"


def defer_httpx_cli() -> None:
    """Stand a placeholder in for ``httpx._main`` until something calls its ``main``."""
    if "httpx" in sys.modules or _HTTPX_CLI in sys.modules:
        return  # httpx is already loaded (as it was), or someone placed its CLI already
    placeholder = types.ModuleType(_HTTPX_CLI, "httpx's command line, loaded on first use")

    def main(*args: Any, **kwargs: Any) -> Any:
        if sys.modules.get(_HTTPX_CLI) is placeholder:
            del sys.modules[_HTTPX_CLI]
        from httpx._main import main as real

        return real(*args, **kwargs)

    placeholder.main = main  # type: ignore[attr-defined]
    sys.modules[_HTTPX_CLI] = placeholder


def deferred(module: str, name: str) -> Callable[..., Any]:
    """``module.name`` as a function that imports ``module`` on its first call."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _alone() -> bool:
    """Whether the main thread is the only non-daemon thread still alive."""
    main = threading.main_thread()
    return threading.current_thread() is main and not any(
        thread is not main and not thread.daemon and thread.is_alive()
        for thread in threading.enumerate()
    )


def finish(code: int) -> NoReturn:
    """End the process with ``code``: at-exit work and flushes done, teardown skipped."""
    if not _alone():
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter runs at exit, in the same order
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)  # the ordinary exit reports what could not be written
    os._exit(code)
