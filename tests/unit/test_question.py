"""``promoter.cli.question``: a yes or no at a real pseudo-terminal that Ctrl-C ends whenever
it is pressed, with typer's answers otherwise.

Each case runs the question in a process of its own whose stdin and stdout are the slave of
a real pseudo-terminal, so the answer is read as a person's would be. The Ctrl-C cases are
ordered without timing: the question's stream sends its own process SIGINT at its N-th
flush, for every flush the question makes; a line (``n``) is typed beforehand. typer's
``confirm`` flushes twice, the second time inside ``input()``, after the interpreter's last
look at its signal flag and before the read: that read then takes the line and answers
``False``, the Ctrl-C unseen. The question here ends with ``Abort`` whichever flush it was.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """\
    import io, os, signal, sys
    from promoter.cli.question import confirm

    class Interrupting(io.TextIOWrapper):
        flushes, sent = 0, False

        def flush(self):
            super().flush()
            Interrupting.flushes += 1
            if str(Interrupting.flushes) == os.environ.get("INTERRUPT_AT_FLUSH"):
                Interrupting.sent = True
                os.kill(os.getpid(), signal.SIGINT)

    stdout = sys.stdout
    sys.stdout = Interrupting(os.fdopen(1, "wb", closefd=False), write_through=True)
    try:
        answer = confirm("Promote?", default=sys.argv[1] == "yes")
    except BaseException as exc:
        reported = "raised " + type(exc).__name__
    else:
        reported = "answered " + str(answer)
    os.environ.pop("INTERRUPT_AT_FLUSH", None)  # none at the interpreter's exit
    sys.stderr.write(reported + (" after SIGINT" if Interrupting.sent else "") + "\\n")
    """
)


def _ask(typed: bytes, *, default: str = "no", interrupt: int = 0) -> tuple[str, bytes]:
    """The question asked at a pseudo-terminal where ``typed`` was typed beforehand: what
    the asking process reported, and what the terminal showed."""
    master, slave = pty.openpty()
    os.write(master, typed)
    env = {k: v for k, v in os.environ.items() if k != "INTERRUPT_AT_FLUSH"}
    if interrupt:
        env["INTERRUPT_AT_FLUSH"] = str(interrupt)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, default],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
        os.close(slave)
        shown = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the slave side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert done.returncode == 0, done.stderr
    return done.stderr.decode().strip(), bytes(shown)


@pytest.mark.parametrize("flush", [1, 2, 3])
def test_ctrl_c_at_any_flush_of_the_question_ends_it_without_a_key(flush: int) -> None:
    reported, shown = _ask(b"n\n", interrupt=flush)
    if flush == 1:  # the question makes one flush at least
        assert reported == "raised Abort after SIGINT"
    assert reported in ("raised Abort after SIGINT", "answered False"), reported
    assert shown.endswith(b"Promote? [y/N]: ")


@pytest.mark.parametrize(
    ("typed", "default", "reported"),
    [
        (b"y\n", "no", "answered True"),
        (b"YES\n", "no", "answered True"),
        (b" no \n", "yes", "answered False"),
        (b"\n", "no", "answered False"),
        (b"\n", "yes", "answered True"),
        (b"maybe\nn\n", "yes", "answered False"),
        (b"\x04", "no", "raised Abort"),  # Ctrl-D: the end of input, as typer's
    ],
)
def test_the_answers_are_typers(typed: bytes, default: str, reported: str) -> None:
    got, shown = _ask(typed, default=default)
    assert got == reported
    prompt = b"Promote? [Y/n]: " if default == "yes" else b"Promote? [y/N]: "
    assert shown.count(prompt) == (2 if typed.startswith(b"maybe") else 1)
    if typed.startswith(b"maybe"):
        assert b"Error: invalid input\r\n" in shown
