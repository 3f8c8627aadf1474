"""Run git as a hermetic, argv-only subprocess.

This module owns how promoter starts git: the environment (built from scratch, never
inherited wholesale), the ``-c`` options every invocation carries, timeouts, and the
translation of failures into ``GitError``.

The environment and options make git's answers independent of the host's and the user's
git configuration: no system or global config file is read, no global attributes or
ignore file applies, replace refs are ignored, no network transport is allowed (so a
partial clone cannot lazily fetch into the repository), no optional locks are taken (so
read-only commands never refresh an index), fsmonitor, hooks and the untracked cache are off,
and paths are printed unquoted.

Every git process promoter starts goes through ``run_git`` or ``popen_git``, which count
it: ``spawned()`` is the total since this process started, and ``counting()`` records the
subcommand of each git process the calling thread starts inside the block (a test pins
how many git processes one promotion costs with it). Counting is a few integer updates;
it changes nothing about what runs.

It deliberately knows nothing about repositories, layouts or output formats: callers
choose ``cwd`` and pass ``GIT_DIR``-style variables through ``env``; parsing lives in
``records.py``.
"""

from __future__ import annotations

import itertools
import math
import os
import select
import selectors
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from promoter.domain.record_type import record
from promoter.errors import GitError

__all__ = [
    "GIT_OPTIONS",
    "GitResult",
    "counting",
    "git_argv",
    "git_environment",
    "popen_git",
    "run_git",
    "spawned",
    "stderr_tail",
]

# Options placed before every subcommand. Command-line ``-c`` beats repository config.
GIT_OPTIONS: tuple[str, ...] = (
    "--no-pager",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
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


# --- counting ------------------------------------------------------------------------------

_total = itertools.count(1)
_total_lock = threading.Lock()
_spawned = 0
_local = threading.local()


def _note(args: Sequence[str]) -> None:
    """Count one git process about to start (total, and the thread's open records)."""
    global _spawned
    with _total_lock:
        _spawned = next(_total)
    for names in getattr(_local, "records", ()):
        names.append(_subcommand(args))


def spawned() -> int:
    """How many git processes this process has started (or tried to start) so far."""
    with _total_lock:
        return _spawned


@contextmanager
def counting() -> Iterator[list[str]]:
    """The subcommands of the git processes this thread starts inside the block, in order.

    Blocks may nest; each sees every process started while it is open. Processes started
    by other threads are not recorded.
    """
    record: list[str] = []
    records: list[list[str]] = getattr(_local, "records", [])
    _local.records = [*records, record]
    try:
        yield record
    finally:
        _local.records = records


@record(frozen=True)
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
    _note(args)
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=git_environment(env),
            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
    except OSError as exc:
        raise GitError(
            f"git {_subcommand(args)} could not be started: {exc.strerror or exc}",
            argv=argv,
        ) from exc
    finished = _finished(process, input, timeout)
    if finished is None:
        raise GitError(
            f"git {_subcommand(args)} timed out after {timeout:g} s",
            argv=argv,
            timeout=timeout,
        )
    result = GitResult(process.returncode, *finished)
    if check and result.returncode != 0:
        raise GitError(
            f"git {_subcommand(args)} failed with exit status {result.returncode}",
            argv=argv,
            returncode=result.returncode,
            stderr=stderr_tail(result.stderr),
        )
    return result


def _finished(
    process: subprocess.Popen[bytes], input: bytes | None, timeout: float
) -> tuple[bytes, bytes] | None:
    """``process``'s stdout and stderr once it ended, or None when ``timeout`` passed first
    (it is killed then, and reaped; a child of it holding the pipes is not waited for).

    ``communicate(timeout=)``, but its end told at once: the standard library polls for a
    process's end with sleeps once its output ended (about a millisecond a command); here
    the process's own descriptor (``pidfd``) is waited on, within what is left of
    ``timeout``. Ctrl-C or any error in here kills it before it propagates."""
    deadline = time.monotonic() + timeout
    try:
        output = _read_all(process, input or b"", deadline)
        if output is None or not _ended_by(process, deadline):
            process.kill()
            process.wait()
            return None
        process.wait()
        return output
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def _read_all(
    process: subprocess.Popen[bytes], data: bytes, deadline: float
) -> tuple[bytes, bytes] | None:
    """``data`` written to stdin, stdout and stderr read to their ends; None at the deadline."""
    assert process.stdout is not None and process.stderr is not None
    out = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    view = memoryview(data)
    with selectors.DefaultSelector() as selector:
        for fd in out:
            selector.register(fd, selectors.EVENT_READ)
        if process.stdin is not None:
            if view:
                selector.register(process.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                process.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in selector.select(left):
                if key.fd in out:
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        out[key.fd] += chunk
                        continue
                    selector.unregister(key.fd)
                    continue
                try:
                    view = view[os.write(key.fd, view[: select.PIPE_BUF]) :]
                except BrokenPipeError:
                    view = view[len(view) :]  # git stopped reading: its status tells why
                if not view:
                    selector.unregister(key.fd)
                    assert process.stdin is not None
                    process.stdin.close()
    return bytes(out[process.stdout.fileno()]), bytes(out[process.stderr.fileno()])


def _ended_by(process: subprocess.Popen[bytes], deadline: float) -> bool:
    """Whether ``process`` ended before ``deadline`` (waited on through its ``pidfd``)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # no pidfd here: the standard library's wait, which polls
        try:
            process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()  # not select(): a daemon's descriptors may pass 1024
        poller.register(pidfd, select.POLLIN)
        left = max(deadline - time.monotonic(), 0.0)
        ready = poller.poll(math.ceil(left * 1000))
    finally:
        os.close(pidfd)
    return bool(ready)


def popen_git(
    args: Sequence[str],
    *,
    cwd: str | Path | None,
    env: Mapping[str, str] | None = None,
    stdin: int | IO[bytes] | None = subprocess.DEVNULL,
    stdout: int | IO[bytes] | None = subprocess.PIPE,
    stderr: int | IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one long-running git command (counted); the caller talks to it and waits.

    ``env`` is completed by ``git_environment``. A failure to start raises ``OSError``
    as ``subprocess.Popen`` does; the caller words the ``GitError``.
    """
    argv = git_argv(args)
    environment = git_environment(env)
    _note(args)
    return subprocess.Popen(
        argv, cwd=cwd, env=environment, stdin=stdin, stdout=stdout, stderr=stderr, close_fds=True
    )


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
