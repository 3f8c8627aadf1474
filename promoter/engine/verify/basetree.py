"""Adapter: a repository's base tree as the ``BaseTree`` port of verification.

Reads, through the read-only git layer, the mode and content sha256 of paths in a tree.
A regular blob or a symlink (mode 120000, its target text the blob) is reported with the
sha256 of its blob; anything else (directory, gitlink) with ``sha256: null`` and its git
mode so that it equals no promotable old state.

The entries are read with ``path_entries``, which remembers them (and those of the
paths' leading directories) per tree: the read-back under the lock of a later promotion
of the same paths finds them there instead of starting ``git ls-tree`` again.

Paths come in wire form (protocol: documents#byte-paths) and are handed to git in their disk form.
"""

from __future__ import annotations

from collections.abc import Sequence

from promoter.domain.path_state import StateWire
from promoter.domain.paths import disk_path
from promoter.engine.verify.link_resolution import cached_tree_links
from promoter.git.readback import RepoLayout, blob_sha256, path_entries

CACHE_LIMIT = 200_000
_CONTENT_MODES = ("100644", "100755", "120000")  # a link's content is its target text


class GitBaseTree:
    """Base-tree states, cached by ``(tree, path)``: git objects never change."""

    def __init__(
        self,
        layout: RepoLayout,
        cache: dict[tuple[str, str], StateWire],
        links: dict[str, dict[str, bytes]] | None = None,
    ) -> None:
        self._layout = layout
        self._cache = cache
        self._links = {} if links is None else links

    def links(self, base_tree: str) -> dict[str, bytes]:
        """The tree's symlinks and target texts (``promoter.git.tree_links``), remembered."""
        return cached_tree_links(self._links, self._layout, base_tree)

    def states(self, base_tree: str, paths: Sequence[str]) -> dict[str, StateWire]:
        missing = [p for p in paths if (base_tree, p) not in self._cache]
        if missing:
            fresh = self._read(base_tree, missing)
            if len(self._cache) + len(fresh) > CACHE_LIMIT:
                self._cache.clear()
            self._cache.update({(base_tree, p): state for p, state in fresh.items()})
        return {p: self._cache[(base_tree, p)].copy() for p in paths}

    def _read(self, base_tree: str, paths: Sequence[str]) -> dict[str, StateWire]:
        # path_entries also remembers the leading directories' entries, so the read-back
        # of a promotion of these paths in this tree asks git nothing more about them.
        disk = {path: disk_path(path) for path in paths}  # wire form in, git's names out
        entries = path_entries(self._layout, base_tree, list(disk.values()))
        blobs = [
            entry.oid
            for entry in entries.values()
            if entry is not None and entry.type == "blob" and entry.mode in _CONTENT_MODES
        ]
        digests = blob_sha256(self._layout, sorted(set(blobs))) if blobs else {}
        states: dict[str, StateWire] = {}
        for path in paths:
            entry = entries.get(disk[path])
            if entry is None:
                states[path] = {"exists": False, "sha256": None, "mode": None}
            elif entry.type == "blob" and entry.mode in _CONTENT_MODES:
                states[path] = {"exists": True, "sha256": digests[entry.oid][0], "mode": entry.mode}
            else:
                states[path] = {"exists": True, "sha256": None, "mode": entry.mode}
        return states
