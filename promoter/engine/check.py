"""The post-promotion check command (SPEC §5.7), configured by the operator only.

Runs the repository's ``check_command`` (an argv list, never a shell string, never from a
bundle) in the worktree with a scrubbed environment, no inherited descriptors, its own
process group and a timeout; returns the exit code and the tail of its output. What the
result means for the operation is decided by ``promoter.engine.promote``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

OUTPUT_TAIL = 4096
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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

    def wire(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "output_tail": self.output_tail,
            "seconds": self.seconds,
            "passed": self.passed,
        }


def scrubbed_env(worktree: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", SAFE_PATH),
        "HOME": worktree,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PROMOTER_CHECK": "1",
    }


def run_check(argv: list[str], worktree: str, timeout: float) -> CheckResult:
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            cwd=worktree,
            env=scrubbed_env(worktree),
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
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    tail = output[-OUTPUT_TAIL:].decode("utf-8", errors="replace")
    code = None if timed_out else process.returncode
    return CheckResult(argv, code, timed_out, tail, int(time.monotonic() - started))
