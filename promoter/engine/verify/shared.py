"""What the checks of verification (``promoter.engine.verify.bundle``) share.

The ports verification reads through (``BlobSizes``, ``BaseTree``), one check's
``Outcome``, the ``Facts`` several checks read of the bundle's changes (computed once per
verification), and the small helpers that phrase a check's problems. Deliberately not
here: the checks themselves, their order, and the receipt.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

from promoter.domain.canonical import canonical_bytes
from promoter.domain.models import PatchBundleV1
from promoter.domain.path_state import StateWire
from promoter.domain.paths import check_path, sort_key
from promoter.errors import PathInvalid


class BlobSizes(Protocol):
    def measure_all(self, digests: Sequence[str]) -> list[int | None]:
        """Per digest, the size of the intact blob, or None if missing or not hashing to it."""

    def read(self, sha256: str) -> bytes:
        """The intact blob's bytes (a link's target text); raises when missing or corrupt."""


class BaseTree(Protocol):
    def states(self, base_tree: str, paths: Sequence[str]) -> Mapping[str, StateWire]:
        """Per path ``{"exists", "sha256", "mode"}`` in ``base_tree``.

        A symlink is reported with the sha256 of its target text and mode 120000; a
        path that is neither a regular blob nor a link there (a directory or gitlink) is
        reported with ``exists: true, sha256: null`` and its git mode, so it equals no
        promotable old state.
        """

    def links(self, base_tree: str) -> Mapping[str, bytes]:
        """Every symlink of ``base_tree`` (path -> target text), to resolve new links."""


@dataclass(frozen=True)
class Outcome:
    passed: bool
    evidence: Any
    detail: str = ""
    code: str = "verification_failed"
    # the evidence's canonical bytes: a long list of fixed-shape rows has a writer of its
    # own (``jcs_rows``), which answers exactly what ``canonical_bytes`` would
    encode: Callable[[Any], bytes] = canonical_bytes


def state_dict(exists: bool, sha256: str | None, mode: str | None) -> StateWire:
    return {"exists": exists, "sha256": sha256, "mode": mode}


@dataclass(frozen=True)
class Facts:
    """What several checks read of the bundle's changes, computed once per verification."""

    paths: list[str]
    in_order: bool  # the paths strictly increase by their UTF-8 bytes
    total: int  # the bytes of the new states that exist
    path_errors: list[str | None]  # per path: why ``check_path`` refuses it, or None

    @classmethod
    def of(cls, bundle: PatchBundleV1) -> Facts:
        paths = [c.path for c in bundle.changes]
        keys = [sort_key(path) for path in paths]
        return cls(
            paths=paths,
            in_order=all(map(operator.lt, keys, islice(keys, 1, None))),
            total=sum(c.new.bytes or 0 for c in bundle.changes if c.new.exists),
            path_errors=[_path_error(path) for path in paths],
        )


def _path_error(path: str) -> str | None:
    try:
        check_path(path)
    except PathInvalid as exc:
        return exc.detail
    return None


def summarize(problems: list[str], limit: int = 5) -> str:
    more = len(problems) - limit
    head = "; ".join(problems[:limit])
    return head + (f"; and {more} more" if more > 0 else "")
