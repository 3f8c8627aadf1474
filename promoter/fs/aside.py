"""Removing only what is provably promoter's own, and keeping everything else.

This module owns the three moves removal is built on
(protocol: recovery#removal-provably-ours, recovery#journaled-names-only): ``remove_if`` (unlink a
journaled temp name only after its content was read through a descriptor and accepted as
promoter's), ``keep`` (rename someone else's bytes to a ``.promoter-kept-…`` name beside
it, never replacing anything) and ``settle`` (recovery's decision for one journaled temp
name). Fault point: ``after_keep``.

Not here: writing, exchanging or deleting targets (``atomic.py``), walking from the root
(``chain.py``), what the bytes mean for the operation (the engine).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

from promoter import faults
from promoter.domain.path_state import leaf_kind
from promoter.errors import PathUnsafe, PromoterError, TargetDrift
from promoter.fs.chain import ParentView
from promoter.fs.leaf import KEPT_PREFIX, TEMP_PREFIX, ExpectedState, LeafState, read_leaf
from promoter.fs.syscalls import RENAME_NOREPLACE, renameat2

_KEPT_TRIES = 64


class KeptEntry(TypedDict):
    """A report's entry for bytes kept (``Kept.to_dict``), or for a temp name settled
    otherwise: put back under the target's name, or left beside it with an error."""

    path: str
    kept_as: str
    kind: NotRequired[str]
    sha256: NotRequired[str | None]
    size: NotRequired[int | None]
    found: NotRequired[bool]  # kept by an earlier pass, found by this one
    put_back: NotRequired[bool]
    error: NotRequired[str]


@dataclass(frozen=True)
class Kept:
    """Bytes promoter found where it expected its own, and where they are now."""

    path: str
    kept_as: str
    kind: str
    sha256: str | None
    size: int | None

    def to_dict(self) -> KeptEntry:
        return {
            "path": self.path,
            "kept_as": self.kept_as,
            "kind": self.kind,
            "sha256": self.sha256,
            "size": self.size,
        }


@dataclass(frozen=True)
class Settlement:
    """What recovery did with one journaled temp name."""

    action: Literal["absent", "removed", "put_back", "kept"]
    kept: Kept | None = None


def beside(parent: ParentView, name: str) -> str:
    """The worktree-relative path of ``name`` in the parent's directory."""
    return "/".join([*parent.dir_parts, name])


def check_temp_name(name: str) -> None:
    """Refuse any name that is not one of promoter's temp names."""
    bad = "/" in name or "\x00" in name or len(name) == len(TEMP_PREFIX)
    if bad or not name.startswith(TEMP_PREFIX):
        raise PathUnsafe("not a promoter temp file name", name=name)


def remove_if(
    parent: ParentView, name: str, ours: Callable[[LeafState], bool]
) -> tuple[Literal["absent", "removed", "left"], LeafState]:
    """Unlink temp ``name`` only if what is there is a file or link ``ours`` accepts.

    Returns ``("absent", …)`` when nothing was there, ``("removed", state)`` when it was
    promoter's and is gone, and ``("left", state)`` when it is someone else's and stays
    in place for the caller to keep. Never follows a symlink.
    """
    check_temp_name(name)
    leaf = read_leaf(parent.fd, name, beside(parent, name), parent.root.dev)
    if leaf.kind == "missing":
        return "absent", leaf
    if leaf.kind not in ("file", "symlink") or not ours(leaf):
        return "left", leaf
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=parent.fd)
    return "removed", leaf


def _kept_candidates(temp: str) -> list[str]:
    base = KEPT_PREFIX + temp[len(TEMP_PREFIX) :]
    return [base if n == 0 else f"{base}.{n}" for n in range(_KEPT_TRIES)]


def kept_earlier(parent: ParentView, temp: str) -> list[Kept]:
    """The kept files already beside the target for temp name ``temp`` (never touched).

    A crash between keeping a file and journaling the report leaves one unreported; this
    is how recovery finds it again.
    """
    check_temp_name(temp)
    found: list[Kept] = []
    for name in _kept_candidates(temp):
        leaf = read_leaf(parent.fd, name, beside(parent, name), parent.root.dev)
        if leaf.kind == "missing":
            break
        found.append(Kept(parent.rel, beside(parent, name), leaf.kind, leaf.sha256, leaf.size))
    return found


def keep(parent: ParentView, temp: str, found: LeafState) -> Kept:
    """Move temp ``temp`` (someone else's bytes) to a kept name beside it; never replaces.

    If no kept name can be taken (an I/O error, a filesystem without ``renameat2``), the
    bytes stay at ``temp`` and the report says so: they are never removed.
    """
    check_temp_name(temp)
    where = temp
    for candidate in _kept_candidates(temp):
        try:
            renameat2(parent.fd, temp, parent.fd, candidate, RENAME_NOREPLACE)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                continue
            break
        where = candidate
        faults.point("after_keep")
        break
    return Kept(
        path=parent.rel,
        kept_as=beside(parent, where),
        kind=found.kind,
        sha256=found.sha256,
        size=found.size,
    )


def settle(parent: ParentView, temp: str, *, old: ExpectedState, new: ExpectedState) -> Settlement:
    """Recovery's decision for journaled temp ``temp`` of the target held by ``parent``.

    Removed: promoter's ``new`` bytes, or the exact ``old`` state while the target holds
    ``new`` (an exchange or a move-aside that was authorized). Anything else goes back to
    the target's name if it is free (``RENAME_NOREPLACE``), else it is kept.
    """
    target = parent.leaf_state()
    target_is_new = target.matches(new)

    def ours(leaf: LeafState) -> bool:
        if new.exists and leaf.matches(new):
            return True
        return old.exists and target_is_new and leaf.matches(old)

    done, found = remove_if(parent, temp, ours)
    if done != "left":
        return Settlement(done)
    if old.exists and target.kind == "missing":  # the step had moved the target here
        try:
            renameat2(parent.fd, temp, parent.fd, parent.name, RENAME_NOREPLACE)
            return Settlement("put_back")
        except OSError:
            pass
    return Settlement("kept", keep(parent, temp, found))


def refusal(rel: str, expected: ExpectedState, found: LeafState) -> PromoterError:
    """The refusal for a target found in another state: unsafe kinds, else drift.

    A symlink is unsafe where a file or nothing was expected, drift where a link was.
    """
    unexpected_link = found.kind == "symlink" and leaf_kind(expected.mode) != "symlink"
    if found.kind == "special" or unexpected_link:
        return PathUnsafe(f"target is a {found.kind}", path=rel, found=found.to_dict())
    return TargetDrift(
        "target is not in the expected state",
        path=rel,
        expected=expected.to_dict(),
        found=found.to_dict(),
    )


def with_kept(error: PromoterError, kept: list[Kept]) -> PromoterError:
    """Add ``kept`` entries to an error's context, so the report says where bytes are."""
    if kept:
        error.context["kept"] = [*error.context.get("kept", []), *(k.to_dict() for k in kept)]
    return error
