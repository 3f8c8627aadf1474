"""The post-promotion check command (protocol: recovery#post-promotion-check), configured by the
operator only.

Runs the repository's ``check_command`` (an argv list, never a shell string, never from a
bundle) in the worktree with a scrubbed environment, no inherited descriptors, its own
process group and a timeout; returns the exit code and the tail of its output.

The environment: ``PATH`` from the daemon, ``HOME`` and ``TMPDIR`` a fresh private
directory outside the worktree (removed afterwards), so that neither a file a bundle
wrote (a ``.gitconfig`` at the worktree root) is read as the user's configuration nor
caches and temp files land in the worktree, and ``GIT_OPTIONAL_LOCKS=0``, so that a
``git status`` in the check does not rewrite the index. When the check ends, whatever it
left running in its process group is killed, so nothing of it writes after the
comparison (a child that started a session of its own escapes this).

Deliberately not here: what the result means for the operation and what the check
changed (``promoter.engine.operation.outcome``, ``promoter.engine.operation.worktree_diff``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import TypedDict

OUTPUT_TAIL = 4096
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class CheckWire(TypedDict):
    """``CheckResult.wire``: the check's result as events and reports carry it."""

    argv: list[str]
    exit_code: int | None
    timed_out: bool
    output_tail: str
    seconds: int
    passed: bool


@dataclass(frozen=True)
class CheckResult:
    argv: list[str]
    exit_code: int | None
    timed_out: bool
    output_tail: str
    seconds: int

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def wire(self) -> CheckWire:
        return {
            "argv": self.argv,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "output_tail": self.output_tail,
            "seconds": self.seconds,
            "passed": self.passed,
        }


def scrubbed_env(home: str) -> dict[str, str]:
    """The check's whole environment; ``home`` is its private directory."""
    return {
        "PATH": os.environ.get("PATH", SAFE_PATH),
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_OPTIONAL_LOCKS": "0",
        "PROMOTER_CHECK": "1",
    }


def run_check(argv: list[str], worktree: str, timeout: float) -> CheckResult:
    """Run ``argv`` in ``worktree``; a check that cannot start is a failed check."""
    with tempfile.TemporaryDirectory(prefix="promoter-check-", ignore_cleanup_errors=True) as home:
        return _run(argv, worktree, home, timeout)


def _run(argv: list[str], worktree: str, home: str, timeout: float) -> CheckResult:
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            cwd=worktree,
            env=scrubbed_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:
        return CheckResult(argv, None, False, f"cannot start the check: {exc}", 0)
    timed_out = False
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process.pid)
        output, _ = process.communicate()
    _kill_group(process.pid)  # what it left running must not write after the comparison
    tail = output[-OUTPUT_TAIL:].decode("utf-8", errors="replace")
    code = None if timed_out else process.returncode
    return CheckResult(argv, code, timed_out, tail, int(time.monotonic() - started))


def _kill_group(pgid: int) -> None:
    """SIGKILL the check's process group (its own session); gone already is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
