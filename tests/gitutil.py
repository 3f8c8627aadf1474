"""Real git repositories for tests, made with a fixed identity and no outside config.

Every command runs with an environment built from scratch (only ``PATH`` is taken from
the caller), so neither the host's git configuration nor a ``GIT_DIR`` exported by a
hook can reach a test repository or let a test write anywhere else.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

__all__ = ["blob_oid", "commit_all", "git", "git_bytes", "git_env", "make_repo", "tree_digest"]

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git_env() -> dict[str, str]:
    """The hermetic environment test git commands run with."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent-promoter-test-home",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        **_IDENTITY,
    }


def git_bytes(
    repo: Path | str, *args: str, input: bytes | None = None, check: bool = True
) -> bytes:
    """Run ``git -C repo args`` and return stdout; with ``check`` a failure raises."""
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        env=git_env(),
        input=input,
        capture_output=True,
        check=False,
        timeout=60,
    )
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {stderr}")
    return proc.stdout


def git(repo: Path | str, *args: str, input: bytes | None = None, check: bool = True) -> str:
    """Like ``git_bytes`` but decoded, with the trailing newline removed."""
    return (
        git_bytes(repo, *args, input=input, check=check)
        .decode("utf-8", "surrogateescape")
        .rstrip("\n")
    )


def make_repo(
    tmp_path: Path, name: str = "repo", *, bare: bool = False, object_format: str = "sha1"
) -> Path:
    """A new, empty repository at ``tmp_path / name`` on branch ``main``."""
    path = tmp_path / name
    args = ["init", "-q", "-b", "main", f"--object-format={object_format}"]
    if bare:
        args.append("--bare")
    git(tmp_path, *args, str(path))
    return path


def commit_all(repo: Path, message: str = "commit") -> str:
    """Stage everything (``add -A``), commit, and return the new commit id."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def blob_oid(data: bytes) -> str:
    """The SHA-1 git object id of a blob with exactly these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def tree_digest(root: Path) -> dict[str, tuple[str, int, int, str]]:
    """Every entry below ``root``: (kind, mode, mtime_ns, sha256 of content or target)."""
    found: dict[str, tuple[str, int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                found[rel] = ("link", st.st_mode, st.st_mtime_ns, os.readlink(full))
            elif os.path.isdir(full):
                found[rel] = ("dir", st.st_mode, st.st_mtime_ns, "")
            else:
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
                found[rel] = ("file", st.st_mode, st.st_mtime_ns, digest)
    return found
