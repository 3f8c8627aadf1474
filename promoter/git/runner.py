"""Run git as a hermetic, argv-only subprocess.

This module owns how promoter starts git: the environment (built from scratch, never
inherited wholesale), the ``-c`` options every invocation carries, timeouts, and the
translation of failures into ``GitError``.

The environment and options make git's answers independent of the host's and the user's
git configuration: no system or global config file is read, no global attributes or
ignore file applies, replace refs are ignored, no network transport is allowed (so a
partial clone cannot lazily fetch into the repository), no optional locks are taken (so
read-only commands never refresh an index), fsmonitor and the untracked cache are off,
and paths are printed unquoted.

It deliberately knows nothing about repositories, layouts or output formats: callers
choose ``cwd`` and pass ``GIT_DIR``-style variables through ``env``; parsing lives in
``records.py``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from promoter.errors import GitError

__all__ = [
    "GIT_OPTIONS",
    "GitResult",
    "git_argv",
    "git_environment",
    "run_git",
    "stderr_tail",
]

# Options placed before every subcommand. Command-line ``-c`` beats repository config.
GIT_OPTIONS: tuple[str, ...] = (
    "--no-pager",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "core.useReplaceRefs=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "protocol.allow=never",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
)

# Variables that always have these values, whatever the caller's environment says.
_FIXED_ENV: dict[str, str] = {
    "LC_ALL": "C",
    "LANG": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_NO_LAZY_FETCH": "1",
}

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_STDERR_TAIL = 2000


@dataclass(frozen=True)
class GitResult:
    """What a finished git command returned."""

    returncode: int
    stdout: bytes
    stderr: bytes


def git_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment for a git child process.

    Only ``PATH``, ``HOME`` and ``TMPDIR`` are taken from this process; everything else is
    fixed here or passed explicitly through ``env`` (which may not loosen the fixed
    values).
    """
    result = {"PATH": os.environ.get("PATH") or _DEFAULT_PATH}
    for name in ("HOME", "TMPDIR"):
        value = os.environ.get(name)
        if value:
            result[name] = value
    if env:
        for name, value in env.items():
            if name in _FIXED_ENV and value != _FIXED_ENV[name]:
                raise ValueError(f"{name} cannot be overridden")
            result[name] = value
    result.update(_FIXED_ENV)
    return result


def git_argv(args: Sequence[str]) -> list[str]:
    """``git`` plus the fixed options plus ``args``."""
    if isinstance(args, str | bytes):
        raise TypeError("args must be a sequence of arguments, not a string")
    return ["git", *GIT_OPTIONS, *args]


def stderr_tail(stderr: bytes) -> str:
    """The last part of a command's stderr, as text for an error's context."""
    return stderr[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()


def run_git(
    args: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> GitResult:
    """Run one git command to completion and return its exit status and output.

    With ``check`` a non-zero exit raises ``GitError`` carrying the argv, the return code
    and the tail of stderr. A timeout (the child is killed) and a failure to start git
    always raise ``GitError``.
    """
    argv = git_argv(args)
    try:
        completed = subprocess.run(
            argv,
            cwd=cwd,
            env=git_environment(env),
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            timeout=timeout,
            close_fds=True,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitError(
            f"git {_subcommand(args)} timed out after {timeout:g} s",
            argv=argv,
            timeout=timeout,
        ) from exc
    except OSError as exc:
        raise GitError(
            f"git {_subcommand(args)} could not be started: {exc.strerror or exc}",
            argv=argv,
        ) from exc
    result = GitResult(completed.returncode, completed.stdout, completed.stderr)
    if check and result.returncode != 0:
        raise GitError(
            f"git {_subcommand(args)} failed with exit status {result.returncode}",
            argv=argv,
            returncode=result.returncode,
            stderr=stderr_tail(result.stderr),
        )
    return result


def _subcommand(args: Sequence[str]) -> str:
    """The first argument that is neither an option nor an option's value, for messages."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-c", "-C"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return "command"
