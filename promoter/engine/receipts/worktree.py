"""Is a checkout still what a receipt says? Compare a receipt's targets with the disk now.

``compare_targets`` reads each target path of a promotion receipt (its ``targets``) or
a rollback receipt (each target's ``actual``) under a worktree and answers, per path,
``match`` (the same content and mode, or absent as recorded), ``changed`` (something
else is there) or ``missing`` (the receipt recorded content, nothing is there). It
only reads: ``lstat``, ``readlink`` and ``O_NOFOLLOW`` opens, never following a
symlink, so a link in a parent directory reads as ``changed``, not as what it points
to. A rollback target whose state could not be read (``actual: null``) is ``unknown``.

Deliberately not here: checking the receipt itself (``promoter.engine.receipts.signing``), any
lock, git index or repository state, and any write.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promoter.domain.paths import disk_path
from promoter.errors import PathInvalid, ReceiptInvalid

CHUNK = 1 << 20


@dataclass(frozen=True)
class TargetMatch:
    path: str
    status: str  # match | changed | missing | unknown
    expected: str  # "<mode> <sha256>" or "absent"
    found: str  # "<mode> <sha256>", "absent", "directory", "special", "parent is not a dir"

    def wire(self) -> dict[str, str]:
        return {
            "path": self.path,
            "status": self.status,
            "expected": self.expected,
            "found": self.found,
        }


# a receipt document as stored or served, of any version: read by its members
def expected_states(receipt: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(path, "<mode> <sha256>" or None for absent) per target; unknown rollback reads skipped."""
    schema = receipt.get("schema")
    if schema == "PatchPromotionReceiptV1":
        return [
            (t["path"], f"{t['mode']} {t['sha256']}" if t["exists"] else None)
            for t in receipt["targets"]
        ]
    if schema == "RollbackReceiptV1":
        states: list[tuple[str, str | None]] = []
        for t in receipt["targets"]:
            actual = t.get("actual")
            if actual is None:
                states.append((t["path"], "unknown"))
            elif actual.get("sha256") and actual.get("mode"):
                states.append((t["path"], f"{actual['mode']} {actual['sha256']}"))
            elif actual.get("exists"):
                states.append((t["path"], str(actual.get("kind") or "other")))
            else:
                states.append((t["path"], None))
        return states
    raise ReceiptInvalid(f"--worktree compares targets; a {schema} has none")


# a receipt document as stored or served, of any version: read by its members
def compare_targets(receipt: dict[str, Any], worktree: Path) -> list[TargetMatch]:
    if not worktree.is_dir():
        raise ReceiptInvalid(f"--worktree {worktree} is not a directory")
    out = []
    for path, expected in expected_states(receipt):
        found = read_state(worktree, path)
        if expected == "unknown":
            status = "unknown"
        elif found == (expected or "absent"):
            status = "match"
        elif found == "absent":
            status = "missing"
        else:
            status = "changed"
        out.append(TargetMatch(path, status, expected or "absent", found))
    return out


def read_state(worktree: Path, relative: str) -> str:
    """What is at ``relative`` (a wire form, protocol: documents#byte-paths) under ``worktree``,
    without following any symlink."""
    try:
        return _read_state(worktree, disk_path(relative))
    except PathInvalid as exc:
        return f"unreadable ({exc.detail})"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"


def _read_state(worktree: Path, relative: str) -> str:
    parts = relative.split("/")
    here = worktree
    for part in parts[:-1]:
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return "absent"
        if not stat.S_ISDIR(info.st_mode):
            return "parent is not a directory"
    leaf = here / parts[-1]
    try:
        info = os.lstat(leaf)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(info.st_mode):
        return f"120000 {hashlib.sha256(os.fsencode(os.readlink(leaf))).hexdigest()}"
    if stat.S_ISDIR(info.st_mode):
        return "directory"
    if not stat.S_ISREG(info.st_mode):
        return "special"
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return f"{mode} {_sha256_file(leaf)}"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()
