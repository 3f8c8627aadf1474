"""The builder's index reader refuses, never crashes on, an index it cannot read, and
finds in a version 2 or 3 index (its bytes, or a map of them) exactly what reading every
entry whole finds, with a mark at every ``MARK_EVERY``-th entry: in short indexes, and in
long ones whose blocks of plain entries it matches whole."""

from __future__ import annotations

import mmap
import os
import struct

from hypothesis import event, given, settings
from hypothesis import strategies as st

from promoter.executor.seed_index import MARK_EVERY, NotPlain, PlainIndex, plain_index


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([2, 3, 4]), count=st.integers(0, (1 << 32) - 1), body=st.binary())
def test_any_bytes_after_a_header_give_gitlinks_or_not_plain(
    version: int, count: int, body: bytes
) -> None:
    data = b"DIRC" + struct.pack(">II", version, count) + body
    try:
        result = plain_index(data)
    except NotPlain:
        return
    assert isinstance(result.gitlinks, tuple) and isinstance(result.attributes, tuple)


_NAMES = st.one_of(
    st.sampled_from([b".gitattributes", b"a/.gitattributes", b"a/x.gitattributes", b"b.txt"]),
    st.lists(st.integers(1, 255), min_size=1, max_size=40).map(bytes),
    st.builds(lambda n: b"d/" * n + b".gitattributes", st.integers(2040, 2100)),  # past 0xFFF
)
_FILLERS = st.one_of(
    st.binary(min_size=56, max_size=56),
    st.just(b".gitattributes".ljust(56, b"\0")),
    st.just(struct.pack(">I", 0o160000) * 14),  # a gitlink's mode in every stat field
)


@st.composite
def _entries(draw: st.DrawFn, version: int) -> tuple[bytes, int]:
    """One version 2 or 3 entry (stat data and id may hold ".gitattributes" too)."""
    name = draw(_NAMES)
    filler = draw(_FILLERS)
    mode = draw(st.sampled_from([0o100644, 0o100755, 0o120000, 0o160000]))
    bits = draw(st.sampled_from([0] * 12 + [0x8000, 0x1000, 0x4000]))
    if bits == 0x4000 and version < 3:
        bits = 0
    flags = bits | min(len(name), 0xFFF)
    head = filler[:24] + struct.pack(">I", mode) + filler[24:] + struct.pack(">H", flags)
    if bits == 0x4000:
        head += struct.pack(">H", draw(st.sampled_from([0, 0x4000, 0x2000])))
    size = (len(head) + len(name) + 8) & ~7
    return head + name + b"\0" * (size - len(head) - len(name)), mode


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    version=st.sampled_from([2, 3]),
    extension=st.sampled_from([b"", b"TREE", b"link"]),
)
def test_the_index_reader_finds_what_an_entry_by_entry_walk_finds(
    data: st.DataObject, version: int, extension: bytes
) -> None:
    """Entries read whole one after another (the reader's former loop) give the same
    answer as the reader, which skips most entries by their length alone."""
    entries = data.draw(st.lists(_entries(version), max_size=12))
    body = b"".join(entry for entry, _ in entries)
    if extension:
        body += extension + struct.pack(">I", 4) + b"abcd"
    index = b"DIRC" + struct.pack(">II", version, len(entries)) + body + b"\0" * 20

    try:
        found: object = plain_index(index)
    except NotPlain:
        found = NotPlain
    assert found == _entry_by_entry(index)
    assert _mapped(index) == found  # as the builder reads it: a map of the index's copy
    if isinstance(found, PlainIndex):  # fewer than MARK_EVERY entries: the first's mark
        assert found.marks == ((12,) if entries else ())
    event("plain" if found is not NotPlain else "not plain")
    if isinstance(found, PlainIndex) and found.attributes:
        event("attribute files found")


@st.composite
def _plain_entry(draw: st.DrawFn) -> tuple[bytes, int]:
    """A plain entry of a name of 1 to 300 bytes (NULs inside too: git reads the length)."""
    name = draw(st.binary(min_size=1, max_size=300))
    mode = draw(st.sampled_from([0o100644, 0o100755, 0o120000]))
    filler = draw(st.sampled_from([bytes(56), b"\xff" * 56, struct.pack(">I", 0o160000) * 14]))
    head = filler[:24] + struct.pack(">I", mode) + filler[24:] + struct.pack(">H", len(name))
    size = (len(head) + len(name) + 8) & ~7
    return head + name + b"\0" * (size - len(head) - len(name)), mode


@settings(max_examples=100, deadline=None)
@given(data=st.data(), version=st.sampled_from([2, 3]))
def test_long_indexes_are_read_block_by_block_as_entry_by_entry(
    data: st.DataObject, version: int
) -> None:
    """Indexes of more than ``MARK_EVERY`` entries, mostly plain with now and then a
    gitlink, an attribute file, a flag or a long name: the same answer as reading every
    entry whole, and the same marks."""
    other = _entries(version)
    if not data.draw(st.booleans(), label="flags allowed"):
        other = other.filter(lambda entry: not struct.unpack_from(">H", entry[0], 60)[0] >> 12)
    one = st.one_of(*[_plain_entry()] * 7, other)
    entries = data.draw(st.lists(one, min_size=MARK_EVERY, max_size=2 * MARK_EVERY + 5))
    body = b"".join(entry for entry, _ in entries)
    index = b"DIRC" + struct.pack(">II", version, len(entries)) + body + b"\0" * 20
    try:
        found: object = plain_index(index)
    except NotPlain:
        found = NotPlain
    assert found == _entry_by_entry(index)
    assert _mapped(index) == found
    if isinstance(found, PlainIndex):
        starts = [12]
        for entry, _ in entries:
            starts.append(starts[-1] + len(entry))
        assert found.marks == tuple(starts[: len(entries)][::MARK_EVERY])
        event("plain")
        if found.gitlinks or found.attributes:
            event("plain, with gitlinks or attribute files")
    else:
        event("not plain")


def _mapped(data: bytes) -> object:
    """``plain_index`` of a map holding ``data``: ``PlainIndex`` or ``NotPlain``."""
    with mmap.mmap(-1, len(data)) as mapped:
        mapped.write(data)
        try:
            return plain_index(mapped)
        except NotPlain:
            return NotPlain


def _entry_by_entry(data: bytes) -> object:
    """Versions 2 and 3, each entry read whole: ``PlainIndex`` or ``NotPlain``."""
    _, version, count = struct.unpack_from(">4sII", data, 0)
    end, off = len(data) - 20, 12
    gitlinks: list[str] = []
    attributes: list[str] = []
    for _ in range(count):
        mode, flags = struct.unpack_from(">I32xH", data, off + 24)
        start = off + 62
        if flags & 0xB000 or (flags & 0x4000 and version < 3):
            return NotPlain
        if flags & 0x4000:
            if struct.unpack_from(">H", data, start)[0] & 0x6000:
                return NotPlain
            start += 2
        stop = start + (flags & 0xFFF) if flags & 0xFFF < 0xFFF else data.find(b"\0", start)
        off += (stop - off + 8) & ~7
        if stop < 0 or off > end:
            return NotPlain
        name = data[start:stop]
        if mode == 0o160000:
            gitlinks.append(os.fsdecode(name))
        elif name == b".gitattributes" or name.endswith(b"/.gitattributes"):
            attributes.append(os.fsdecode(name))
    while off + 8 <= end:
        kind, size = struct.unpack_from(">4sI", data, off)
        if kind == b"link":
            return NotPlain
        off += 8 + size
    return PlainIndex(tuple(gitlinks), tuple(attributes))
