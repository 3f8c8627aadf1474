"""A person's session in a real terminal: tmux runs a shell in the person's own repository.

The daemon is started by ``promoter serve`` (a real process that records itself in the
person's private configuration, as the README says); the person types ``promoter run --
…`` into a shell in tmux, with no ``--repo``, ``--url`` or token, and reads the screen
with ``capture-pane``. The agent is a command that edits a file and then waits on its own
terminal for a line, so the test saves the person's edit while the agent runs, and only
then lets it finish: no sleeps, every wait is for text on the screen. The sessions:
the person's save during the run is offered the merge, a yes lands both edits; the same
line saved by both is a conflict that writes nothing in the worktree and names the
marked file; Ctrl-C while the agent runs names the sandbox kept and the next command.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import bwrap
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess
from tests.support.promotion import tree_bytes

OLD = b"line 1\nline 2\nline 3\nline 4\nline 5\n"
AGENTS = b"line 1\nline 2 by the agent\nline 3\nline 4\nline 5\n"
PERSONS = b"line 1\nline 2\nline 3\nline 4\nline 5 by the person\n"
BOTH = b"line 1\nline 2 by the agent\nline 3\nline 4\nline 5 by the person\n"
CLASH = b"line 1\nline 2 by the person\nline 3\nline 4\nline 5\n"
WAIT = 120.0  # seconds a screen may take to show what the test waits for (a bound, no pace)


def _confinement() -> list[str]:
    """bubblewrap as a person gets it by default; without it this test cannot run here."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the person's terminal sessions are not run")
    bwrap.required()
    return []


@dataclass
class Screen:
    """One tmux session: a shell in the person's repository."""

    name: str
    socket: Path

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return done.stdout

    def type(self, text: str, *, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        if enter:
            self.tmux("send-keys", "-t", self.name, "Enter")

    def key(self, name: str) -> None:
        self.tmux("send-keys", "-t", self.name, name)

    def text(self) -> str:
        """The whole screen and its history, as the person could scroll back to it."""
        return self.tmux("capture-pane", "-p", "-J", "-t", self.name, "-S", "-2000")

    def wait_for(self, needle: str) -> str:
        deadline = time.monotonic() + WAIT
        while True:
            screen = self.text()
            if needle in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never on the screen: {needle!r}\n{screen}")
            time.sleep(0.05)  # polling the screen, not pacing the run


@dataclass
class Person:
    repo: Path
    daemon: DaemonProcess
    screen: Screen


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Person]:
    confinement = _confinement()
    home = tmp_path / "home"
    home.mkdir()
    config = home / ".config"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))  # the daemon records itself here
    repo = init_repo(tmp_path / "app", {"README.md": b"# app\n", "src/app.py": OLD})
    daemon = DaemonProcess(tmp_path / "state", {"app": repo})
    bin_dir = tmp_path / "bin"  # `promoter` on the PATH, as an installed one would be
    bin_dir.mkdir()
    launcher = bin_dir / "promoter"
    launcher.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m promoter.cli.main "$@"\n'
    )
    launcher.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(config),
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        PAGER="cat",
        TERM="xterm-256color",
        PS1="$ ",
    )
    screen = Screen("person", tmp_path / "tmux.sock")
    subprocess.run(
        [
            "tmux",
            "-S",
            str(screen.socket),
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            screen.name,
            "-x",
            "160",
            "-y",
            "50",
            "-c",
            str(repo),
            "sh",
        ],
        env=env,
        check=True,
        timeout=30,
    )
    try:
        screen.tmux("set-option", "-t", screen.name, "history-limit", "5000")
        yield Person(repo, daemon, screen)
    finally:
        subprocess.run(["tmux", "-S", str(screen.socket), "kill-server"], check=False)
        daemon.stop()
    assert confinement == []


# the agent: edits src/app.py, then waits on its own terminal for the person's line
AGENT = (
    "printf 'line 1\\nline 2 by the agent\\nline 3\\nline 4\\nline 5\\n' > src/app.py; "
    # (the line the test waits for is not on the typed command line itself)
    "printf 'agent: edited src/app.py; %s %s\\n' 'press enter' 'to finish'; read answer; "
    'echo "agent: finishing ($answer)"'
)


def _run(person: Person, extra: str = "") -> None:
    person.screen.type(
        f"promoter run {extra}-- sh -c {shlex.quote(AGENT)}; printf '%s=%s\\n' exit $?"
    )
    person.screen.wait_for("press enter to finish")


def test_the_persons_save_during_the_run_is_offered_the_merge_and_lands_both_edits(
    person: Person,
) -> None:
    _run(person)
    (person.repo / "src" / "app.py").write_bytes(PERSONS)  # the person saves meanwhile
    person.screen.type("done")
    screen = person.screen.wait_for("merge your edit and the agent's? [Y/n]")
    assert "src/app.py changed since the run began: merge" in screen
    person.screen.type("y")
    screen = person.screen.wait_for("exit=")
    assert "exit=0" in screen, screen
    assert "promoted: operation op_" in screen
    assert (person.repo / "src" / "app.py").read_bytes() == BOTH


def test_the_same_line_saved_by_both_writes_nothing_and_names_the_marked_file(
    person: Person,
) -> None:
    _run(person)
    (person.repo / "src" / "app.py").write_bytes(CLASH)  # the person edits the agent's line
    before = tree_bytes(person.repo)
    person.screen.type("done")
    person.screen.wait_for("merge your edit and the agent's? [Y/n]")
    person.screen.type("y")
    screen = person.screen.wait_for("exit=")
    assert "exit=0" not in screen, screen
    assert "merge_conflict" in screen or "conflict" in screen
    marked = [
        line.split()[-1]
        for line in screen.splitlines()
        if "/conflicts/" in line and line.split()[-1].endswith("app.py")
    ]
    assert marked, screen
    assert b"<<<<<<<" in Path(marked[0]).read_bytes()
    assert tree_bytes(person.repo) == before  # nothing in the worktree changed


def test_ctrl_c_while_the_agent_runs_names_the_sandbox_and_the_next_command(
    person: Person,
) -> None:
    before = tree_bytes(person.repo)
    _run(person)
    person.screen.key("C-c")
    screen = person.screen.wait_for("exit=")
    assert "exit=130" in screen, screen
    assert "error [interrupted]" in screen
    assert "promoter run --continue run_" in screen
    assert tree_bytes(person.repo) == before  # nothing of the person's changed


def test_a_long_diff_is_paged_in_colour_never_as_escape_codes(person: Person) -> None:
    """A person with no ``PAGER`` or ``LESS`` of their own: a diff longer than the screen
    goes through ``less``, which showed every colour as ``ESC[32m`` text around each line;
    the pager now shows the colours (``LESS=FRX`` as git sets it), and once it is quit the
    question follows, the diff's last screen left above it."""
    agent = "seq 1 200 > src/long.txt"
    person.screen.type(
        f"unset PAGER LESS; promoter run -- sh -c {shlex.quote(agent)}; printf '%s=%s\\n' exit $?"
    )
    screen = person.screen.wait_for("@@ -0,0 +1,200 @@")
    assert "ESC[" not in screen, screen
    assert "+1\n" in screen and "+2\n" in screen
    person.screen.key("q")
    screen = person.screen.wait_for("Promote these changes into the worktree? [y/N]")
    assert "ESC[" not in screen, screen
    person.screen.type("n")
    screen = person.screen.wait_for("exit=")
    assert not (person.repo / "src" / "long.txt").exists()
