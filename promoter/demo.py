"""A small demo repository for ``make serve`` and the README walk-through.

``python -m promoter.demo ensure-repo DIR`` creates (once) a git repository with two
commits and a bit of uncommitted user work. Git runs with a fixed identity and without
the user's global configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Demo User",
    "GIT_AUTHOR_EMAIL": "demo@example.invalid",
    "GIT_COMMITTER_NAME": "Demo User",
    "GIT_COMMITTER_EMAIL": "demo@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), **DEMO_ENV}
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=60
    )
    return done.stdout.decode().strip()


def ensure_repo(path: Path) -> Path:
    if (path / ".git").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text('def greet(name):\n    return "hello " + name\n')
    (path / "README.md").write_text("# demo\n\nA repository guarded by promoter.\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "initial")
    (path / "docs").mkdir()
    (path / "docs" / "notes.md").write_text("notes\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "notes")
    (path / "scratch.txt").write_text("the user's own uncommitted work\n")
    return path


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "ensure-repo":
        repo = ensure_repo(Path(argv[1]))
        print(f"demo repository at {repo}", file=sys.stderr)
        return 0
    print("usage: python -m promoter.demo ensure-repo DIR", file=sys.stderr)
    return 64


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
