"""Where a step's command starts: the sandbox's counterpart of the person's directory.

``relative`` is the person's current directory below the run's worktree, from both real
paths (None outside it: the command starts at the sandbox's root, as a run named with
``--repo`` from elsewhere always did). ``start_dir`` finds that directory in the
sandbox, a component at a time, never following a link: in the clone itself, or through
an overlay's layers as the kernel would merge them (``layers.resolve``). A directory
the sandbox does not hold (ignored by git, inside ``.git``, made after the run started,
removed or replaced by a file in an earlier step) starts the command at the root, with
one line that says so (docs/decisions/a-run-starts-where-the-person-is.md); a link
there, planted by an earlier step, is refused (``path_unsafe``): nothing runs.
``opened`` opens a copy clone's directory the same way for an unconfined command, which
starts in it by descriptor, so a link planted after the check is never followed.

Not here: the chdir itself (bubblewrap's ``--chdir`` inside the sandbox's namespace,
``confine.py``; an unconfined overlay's in its mount namespace, ``layers.py``), or
anything the command then does.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from promoter.domain.hidden import one_line
from promoter.errors import PathUnsafe, PromoterError
from promoter.executor import layers
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.runner import run_git

__all__ = ["Start", "opened", "relative", "start_dir"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Start(NamedTuple):
    """Where the command starts: ``rel`` below the sandbox's root ("" for the root), and
    ``note``, the line that says why it is the root and not the person's directory."""

    rel: str = ""
    note: str | None = None


def relative(worktree: str, cwd: str | None) -> str | None:
    """``cwd`` below ``worktree``, both real paths: "" at its top, None outside it (or
    when there is no current directory)."""
    if cwd is None:
        return None
    top, here = os.path.realpath(worktree), os.path.realpath(cwd)
    if here == top:
        return ""
    if not here.startswith(top.rstrip("/") + "/"):
        return None
    rel = here[len(top.rstrip("/")) + 1 :]
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):  # a real path has none
        return None
    return rel


def start_dir(
    clone: Path,
    rel: str | None,
    *,
    stack: Sequence[Path] | None,
    layout: RepoLayout | None,
) -> Start:
    """Where in the sandbox ``clone`` the command starts for the person's directory
    ``rel`` (``relative``'s); ``stack``: an overlay's layers, top first (None: a copy
    clone). Raises ``PathUnsafe`` where a component is a link in the sandbox."""
    if not rel:
        return Start()
    parts = rel.split("/")
    if any(part.lower() == ".git" for part in parts):
        return Start(note=_root(rel, "git's own directory is not the sandbox's"))
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        kind = _kind(clone, prefix, stack)
        if kind == "link":
            raise PathUnsafe(
                f"{one_line(prefix)} is a symbolic link in the sandbox {clone} (an earlier "
                "step made it), where your current directory is a directory: the command "
                "would start wherever it points; nothing was run; start the step from the "
                "worktree's top (cd to it) or remove the link in a step run from there",
                path=prefix,
            )
        if kind == "missing":
            return Start(note=_root(rel, _why(prefix, layout)))
        if kind == "other":
            return Start(note=_root(rel, f"{one_line(prefix)} is a file in the sandbox"))
    return Start(rel)


def _root(rel: str, why: str) -> str:
    return f"starting at the sandbox's root: {one_line(rel)} is not in the sandbox ({why})"


def _why(prefix: str, layout: RepoLayout | None) -> str:
    """Why ``prefix`` is not in the sandbox: ignored by git, or not there (anymore)."""
    if layout is not None:
        try:
            checked = run_git(
                ["check-ignore", "-q", "--", prefix],
                cwd=layout.worktree,
                env=repo_env(layout),
                check=False,
            )
        except PromoterError:
            checked = None
        if checked is not None and checked.returncode == 0:
            return "ignored by git"
    return "not there when the sandbox was made, or removed by a step"


def _kind(clone: Path, prefix: str, stack: Sequence[Path] | None) -> str:
    """``dir``, ``link``, ``other`` or ``missing``: what ``prefix`` is in the sandbox."""
    if stack is not None:
        found = layers.resolve(stack, prefix)
        if found is None:
            return "missing"
        mode = found[1].st_mode
    else:
        try:
            mode = os.lstat(os.path.join(clone, prefix)).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return "missing"
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "other"


def opened(clone: Path, rel: str) -> int:
    """The directory ``rel`` of a copy clone, opened a component at a time without
    following a link (``O_NOFOLLOW``); a link or anything but a directory there now is
    ``PathUnsafe``. The caller closes the descriptor."""
    fd = os.open(clone, _DIR_FLAGS)
    for name in rel.split("/") if rel else ():
        try:
            below = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise
            raise PathUnsafe(
                f"{one_line(rel)} is no longer a directory of the sandbox {clone} (a link or "
                "a file took its place after it was checked); nothing was run",
                path=rel,
            ) from exc
        os.close(fd)
        fd = below
    return fd
