"""``make serve REPO=…``: the daemon command the Makefile runs, read with ``make -n``.

A shell that leaves ``~`` as typed after ``REPO=`` (zsh does) must still guard the
person's repository under their home directory, as the getting-started page shows it.
A port another process holds is refused naming ``make serve PORT=N``, the way this
person chooses another port (the command run as the Makefile runs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _serve_line(repo: str, home: Path, *more: str) -> str:
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        ["make", "-n", "-s", "serve", f"REPO={repo}", "PORT=1", *more],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (line,) = [text for text in done.stdout.splitlines() if " serve " in text]
    return line


@pytest.mark.parametrize(
    ("typed", "guarded"),
    [
        ("~/src/app", "app={home}/src/app"),
        ("~", "home={home}"),
        ("/srv/app", "app=/srv/app"),
        ("~bob/app", "app=~bob/app"),  # another user's home: left to the daemon, as typed
    ],
)
def test_a_leading_tilde_of_repo_is_the_home_directory(
    tmp_path: Path, typed: str, guarded: str
) -> None:
    home = tmp_path / "home"
    line = _serve_line(typed, home)
    assert line.endswith(f" --repo {guarded.format(home=home)}"), line


def test_a_taken_port_names_make_serve_port(tmp_path: Path) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    home = tmp_path / "home"
    state = tmp_path / "state"
    line = _serve_line(str(tmp_path / "app"), home, f"PORT={port}", f"STATE={state}")
    env = {**os.environ, "HOME": str(home)}
    env.pop("PROMOTER_STARTED_BY", None)
    try:
        done = subprocess.run(
            ["sh", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        holder.close()
    assert done.returncode == 69, done.stderr
    assert done.stderr == (
        f"error [address_in_use] 127.0.0.1:{port} is in use by another process; nothing was "
        "started (stop it, or start it with make serve PORT=N, or PORT=0 for any free port)\n"
    )
    assert not state.exists()
