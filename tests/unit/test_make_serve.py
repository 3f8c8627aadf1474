"""``make serve REPO=…``: the daemon command the Makefile runs, read with ``make -n``.

A shell that leaves ``~`` as typed after ``REPO=`` (zsh does) must still guard the
person's repository under their home directory, as the getting-started page shows it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _serve_line(repo: str, home: Path) -> str:
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        ["make", "-n", "-s", "serve", f"REPO={repo}", "PORT=1"],
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
