"""What a stored bundle would change, as a unified diff from its own old and new blobs.

``bundle_diff`` reads the bundle and, for every change, the stored blobs of its old and
new states, and returns one entry per path (operation, modes, sizes, whether it is
binary, lines added and removed) plus one unified diff of the text files, cut at a line
end once it passes ``limit`` bytes (``truncated``). A file is binary when either side
holds a NUL byte or is not UTF-8; it is summarized, never diffed.

Deliberately not here: the worktree. The diff is built from what the bundle claims and
the audit store holds, so it shows what a promotion would write, not what the worktree
reads as now (that is the preflight's). Rendering (colour, pager) is the CLI's.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from promoter.domain.models import Change, FileState
from promoter.engine.bundles import load_bundle
from promoter.engine.services import Services

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "bundle_diff", "file_diff"]

DEFAULT_LIMIT = 1 << 20  # bytes of unified diff returned unless asked otherwise
MAX_LIMIT = 8 << 20
NO_NEWLINE = "\\ No newline at end of file\n"


@dataclass(frozen=True)
class FileDiff:
    binary: bool
    added: int
    removed: int
    text: str


def _text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _header(change: Change) -> list[str]:
    path, old, new = change.path, change.old, change.new
    lines = [f"diff --git a/{path} b/{path}\n"]
    if not old.exists:
        lines.append(f"new file mode {new.mode}\n")
    elif not new.exists:
        lines.append(f"deleted file mode {old.mode}\n")
    elif old.mode != new.mode:
        lines += [f"old mode {old.mode}\n", f"new mode {new.mode}\n"]
    return lines


def file_diff(change: Change, old_bytes: bytes, new_bytes: bytes) -> FileDiff:
    """The git-style diff of one change from its two contents (empty when missing)."""
    header = _header(change)
    old_text, new_text = _text(old_bytes), _text(new_bytes)
    a = f"a/{change.path}" if change.old.exists else "/dev/null"
    b = f"b/{change.path}" if change.new.exists else "/dev/null"
    if old_text is None or new_text is None:
        return FileDiff(True, 0, 0, "".join(header) + f"Binary files {a} and {b} differ\n")
    old_lines = old_text.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    body: list[str] = []
    added = removed = 0
    for line in list(difflib.unified_diff(old_lines, new_lines, n=3, lineterm=""))[2:]:
        if line.startswith("@@"):
            body.append(line + "\n")
            continue
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
        body.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    if body:
        header += [f"--- {a}\n", f"+++ {b}\n"]
    return FileDiff(False, added, removed, "".join(header + body))


def _content(services: Services, state: FileState) -> bytes:
    if not state.exists or state.sha256 is None:
        return b""
    return services.blobs.read(state.sha256)


def bundle_diff(services: Services, bundle_id: str, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """``{bundle_id, files, unified_diff, truncated, limit}`` of a stored bundle."""
    bundle = load_bundle(services, bundle_id)
    files: list[dict[str, Any]] = []
    parts: list[str] = []
    size = 0
    truncated = False
    for change in bundle.changes:
        diff = file_diff(change, _content(services, change.old), _content(services, change.new))
        files.append(
            {
                "path": change.path,
                "operation": change.operation,
                "old_mode": change.old.mode,
                "new_mode": change.new.mode,
                "old_bytes": change.old.bytes,
                "new_bytes": change.new.bytes,
                "binary": diff.binary,
                "added": diff.added,
                "removed": diff.removed,
            }
        )
        if truncated:
            continue
        encoded = diff.text.encode("utf-8")
        if size + len(encoded) <= limit:
            parts.append(diff.text)
            size += len(encoded)
            continue
        room = encoded[: limit - size]
        cut = room.rfind(b"\n") + 1
        parts.append(room[:cut].decode("utf-8", errors="ignore"))
        truncated = True
    return {
        "bundle_id": bundle.bundle_id,
        "files": files,
        "unified_diff": "".join(parts),
        "truncated": truncated,
        "limit": limit,
    }
