"""Bind mounts for tests that play an attacker who can mount (root, or CAP_SYS_ADMIN).

``bind_mount`` runs ``mount --bind`` and always unmounts in its ``finally``; where the
kernel refuses to mount (no privilege), the test is skipped with one line saying so.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MOUNT_TIMEOUT_SECONDS = 30


def _run(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, check=False, timeout=MOUNT_TIMEOUT_SECONDS)


@contextmanager
def bind_mount(source: Path, target: Path) -> Iterator[None]:
    """``mount --bind source target`` for the duration of the block (skip if refused)."""
    mounted = _run("mount", "--bind", str(source), str(target))
    if mounted.returncode != 0:
        pytest.skip(f"mount --bind is refused here: {mounted.stderr.decode(errors='replace')}")
    try:
        yield
    finally:
        if _run("umount", str(target)).returncode != 0:
            _run("umount", "-l", str(target))


def is_mount_point(path: Path) -> bool:
    """True when ``path`` is the mount point of an entry of ``/proc/self/mountinfo``."""
    wanted = str(path)
    with Path("/proc/self/mountinfo").open(encoding="utf-8") as info:
        return any(line.split()[4] == wanted for line in info)
