"""A yes or no asked at the person's terminal, which Ctrl-C ends whenever it is pressed.

typer's ``confirm`` (click's) reads the answer with ``input()``. A SIGINT that arrives
after the question is written and before that read blocks sets the interpreter's flag,
but nothing interrupts the read that follows: the command then waits for a key before it
acts on Ctrl-C. Here the answer is awaited with ``select`` on the terminal and on a pipe
the signal module writes to (``signal.set_wakeup_fd``), so the ``KeyboardInterrupt``
comes at once, whenever the signal arrives. The question's text, the answers it takes,
``Error: invalid input`` and the ``Abort`` that Ctrl-C or the end of input become are
click's.

What it does not do: read anything but a terminal on the main thread (otherwise, and
for a question with no default, the question is typer's own ``confirm``); edit lines
beyond what the terminal's own line discipline does.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading


def confirm(question: str, *, default: bool = False, err: bool = False) -> bool:
    """``typer.confirm(question, default=default, err=err)``, with Ctrl-C acted on at once."""
    from typer import Abort, confirm

    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd < 0 or not os.isatty(fd) or threading.current_thread() is not threading.main_thread():
        return bool(confirm(question, default=default, err=err))
    stream = sys.stderr if err else sys.stdout
    prompt = f"{question} [{'Y/n' if default else 'y/N'}]: "
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    before = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        while True:
            try:
                stream.write(prompt)
                stream.flush()
                answer = _line(fd, wake_r).lower().strip()
            except (KeyboardInterrupt, EOFError):
                raise Abort() from None
            if answer in ("y", "yes"):
                return True
            if answer in ("n", "no"):
                return False
            if answer == "":
                return default
            stream.write("Error: invalid input\n")
    finally:
        signal.set_wakeup_fd(before)
        os.close(wake_r)
        os.close(wake_w)


def _line(fd: int, wake: int) -> str:
    """One line from the terminal ``fd`` (its line discipline hands over whole lines), or
    the ``KeyboardInterrupt`` of a signal that arrived before or during the wait: the
    handler runs as soon as the interpreter is back from ``select``."""
    read = bytearray()
    while not read.endswith(b"\n"):
        ready, _, _ = select.select([fd, wake], [], [])
        if wake in ready:
            _drain(wake)
            continue
        chunk = os.read(fd, 1024)
        if not chunk:
            if not read:
                raise EOFError
            break
        read += chunk
    return read.decode(errors="replace")


def _drain(wake: int) -> None:
    try:
        while os.read(wake, 512):
            pass
    except BlockingIOError:
        pass
