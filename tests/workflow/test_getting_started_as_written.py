"""docs/guide/getting-started.md runs as written, read from the page itself.

The page's numbered steps are taken in order: the daemon is started by ``promoter serve``
guarding a repository named ``app`` (step 1, as ``make serve REPO=… NAME=app`` runs it);
every command shown after a ``$`` in the page's console blocks is run in the person's
repository (a ``cd`` moves there), with HOME and XDG_CONFIG_HOME of the test, and must
exit 0 and print each line the page shows, up to what varies (paths, hashes, times:
the first word of each shown line is compared); step 4's agent, ``my-agent``, is a small
script of the test on the PATH, run ``--unconfined --yes`` (no terminal here, and the
script lives under /tmp, which a confined run hides). A command the page changes, or an answer that changes
its first words, fails here until the page says what promoter does.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.flows import init_repo
from tests.support.process import DaemonProcess

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "getting-started.md"
BLOCK = re.compile(r"^ *```(\w+)\n(.*?)^ *```", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    return [(str(kind), str(body)) for kind, body in BLOCK.findall(text)]


def test_the_getting_started_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks()
    serve = [b for k, b in blocks if k == "sh" and "make serve" in b]
    assert serve and "NAME=app" in serve[0], "step 1 starts the daemon guarding `app`"
    agent_line = next(b for k, b in blocks if k == "sh" and "promoter run" in b).strip()
    assert agent_line == 'promoter run -- my-agent "add a greeting"'

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    repo = init_repo(home / "src" / "app")
    daemon = DaemonProcess(tmp_path / "state", {"app": repo})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (
        ("promoter", f'exec {shlex.quote(sys.executable)} -m promoter.cli.main "$@"'),
        ("my-agent", 'printf \'def greet():\\n    return "%s"\\n\' "$1" > src/greet.py'),
    ):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        PATH=f"{bin_dir}:{env.get('PATH', '')}",
        PAGER="cat",
    )
    try:
        ran = []
        cwd = tmp_path
        steps: list[tuple[str, list[str]]] = []
        for kind, body in blocks:
            lines = [line.strip() for line in body.splitlines()]
            if kind == "text" and any(line.startswith("$ ") for line in lines):
                command, shown = "", list[str]()
                for line in lines:
                    if line.startswith("$ "):
                        if command:
                            steps.append((command, shown))
                        command, shown = line[2:], []
                    elif line:
                        shown.append(line)
                steps.append((command, shown))
            elif kind == "sh" and body.strip() == agent_line:
                steps.append((agent_line, []))
        for command, shown in steps:
            if command.startswith("cd "):
                cwd = Path(command[3:].replace("~", str(home)))
                continue
            words = shlex.split(command)
            if words[:2] == ["promoter", "run"]:  # no terminal here; the agent lives in /tmp
                words = ["promoter", "run", "--unconfined", "--yes", *words[2:]]
            done = subprocess.run(
                words, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
            printed = done.stdout.splitlines()
            for line in shown:
                first = line.split()[0]
                assert any(
                    p.split() and p.split()[0] == first for p in printed
                ), f"{command}: the page shows {line!r}; promoter printed:\n{done.stdout}"
            ran.append(command)
        assert ran == [
            "promoter status",
            'promoter run -- my-agent "add a greeting"',
            "promoter repos set app --approval required",
        ]
        assert (
            repo / "src" / "greet.py"
        ).read_bytes() == b'def greet():\n    return "add a greeting"\n'
    finally:
        daemon.stop()
