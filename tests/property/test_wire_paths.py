"""Property: the wire form of a path is one canonical text per byte string
(protocol: documents#byte-paths).

``decode(encode(b)) == b`` for every byte string; ``encode(decode(s)) == s`` for every
text ``decode`` accepts (so no byte string has two accepted spellings); a valid UTF-8
name without a backslash is its own wire form; sorting by ``sort_key`` is sorting by the
bytes; and any other spelling is refused ``path_invalid``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from promoter.domain import wirepath
from promoter.domain.paths import check_path, check_path_set, disk_path, sort_key, wire_path
from promoter.errors import PathInvalid

# bytes biased towards what makes UTF-8 interesting: ASCII, backslash, lead and
# continuation bytes, the bytes of encoded surrogates and of overlong forms
_INTERESTING = [0x41, 0x5C, 0x78, 0x80, 0xA9, 0xBF, 0xC0, 0xC3, 0xE0, 0xED, 0xF0, 0xF4, 0xFF]
raw_bytes = st.lists(
    st.one_of(st.sampled_from(_INTERESTING), st.integers(0, 255)), max_size=24
).map(bytes)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(raw_bytes)
def test_decode_inverts_encode_for_every_byte_string(raw: bytes) -> None:
    wire = wirepath.encode(raw)
    assert wirepath.decode(wire) == raw
    assert wirepath.encode(wirepath.decode(wire)) == wire
    assert wirepath.to_disk(wire) == os.fsdecode(raw)  # what the file system is asked for
    assert wirepath.from_disk(os.fsdecode(raw)) == wire


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(texts, st.sampled_from(["\\", "\\x", "\\\\", "\\xc3", "\\xff"]))))
def test_encode_inverts_decode_for_every_accepted_text(pieces: list[str]) -> None:
    wire = "".join(pieces)
    try:
        raw = wirepath.decode(wire)
    except PathInvalid:
        return
    assert wirepath.encode(raw) == wire


@settings(max_examples=600, deadline=None)
@given(texts)
def test_utf8_text_without_a_backslash_is_its_own_wire_form(text: str) -> None:
    assume("\\" not in text)
    assert wirepath.encode(text.encode()) == text
    assert wirepath.decode(text) == text.encode()
    assert sort_key(text) == text.encode()  # the order bundles had before wire forms


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.lists(raw_bytes, max_size=8))
def test_sort_key_orders_wire_forms_by_their_bytes(names: list[bytes]) -> None:
    wires = [wirepath.encode(n) for n in names]
    assert [wirepath.decode(w) for w in sorted(wires, key=sort_key)] == sorted(names)


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        (b"caf\xe9.txt", "caf\\xe9.txt"),
        (b"caf\xc3\xa9.txt", "caf\u00e9.txt"),
        (b"back\\slash", "back\\\\slash"),
        (b"\xff\xfe", "\\xff\\xfe"),
        (b"\xe2\xe2\x82\xac", "\\xe2\u20ac"),  # a truncated sequence, then a whole one
        (b"\xed\xa0\x80", "\\xed\\xa0\\x80"),  # an encoded surrogate is not UTF-8
        (b"\xc0\xaf", "\\xc0\\xaf"),  # an overlong "/" is not UTF-8
        (b"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"),  # beyond U+10FFFF
        (b"\\xe9", "\\\\xe9"),  # the four ASCII bytes, not the byte 0xe9
    ],
)
def test_wire_form_examples(raw: bytes, wire: str) -> None:
    assert wirepath.encode(raw) == wire
    assert wirepath.decode(wire) == raw


@pytest.mark.parametrize(
    "wire",
    [
        "caf\\xc3\\xa9.txt",  # escapes bytes that form valid UTF-8
        "\\x41",  # escapes ASCII
        "\\x5c",  # escapes the backslash instead of doubling it
        "\\X41",
        "\\xE9",
        "\\xe",
        "\\xg0",
        "\\q",
        "\\u00e9",
        "a\\",
        "\\",
        "a\udcffb",  # a surrogate code point
    ],
)
def test_a_spelling_that_is_not_canonical_is_refused(wire: str) -> None:
    with pytest.raises(PathInvalid) as caught:
        wirepath.decode(wire)
    assert caught.value.code == "path_invalid"
    with pytest.raises(PathInvalid):
        check_path(f"src/{wire}")


@pytest.mark.parametrize("wire", ["src/\\x00", "\\x2e\\x2e/x", "src/\\x2egit/x"])
def test_escaped_forms_of_refused_bytes_are_refused(wire: str) -> None:
    with pytest.raises(PathInvalid):
        check_path(wire)


@pytest.mark.parametrize(
    "wire",
    [
        "src/caf\\xe9.txt",
        "src/back\\\\slash.txt",
        "\\xff\\xfe",
        "src/cafe\u0301\\xff",  # not NFC, but the name is not UTF-8: NFC does not apply
        "a/" + "\\xff" * 255,  # 255 bytes in a component, 1020 characters of wire form
    ],
)
def test_byte_names_obey_the_rules_on_their_bytes(wire: str) -> None:
    assert check_path(wire) == wire


@pytest.mark.parametrize(
    "wire",
    [
        "src/.GIT",
        "src/.promoter-tmp-\\xff",
        "src/.Promoter-Kept-x\\xfe",
        "a/" + "\\xff" * 256,  # 256 bytes in one component
        "/".join(["\\xff" * 200] * 21),  # more than 4096 bytes
        "src/cafe\u0301/\\xff",  # the not-NFC component is UTF-8: refused
    ],
)
def test_byte_names_break_the_rules_on_their_bytes(wire: str) -> None:
    with pytest.raises(PathInvalid):
        check_path(wire)


def test_uniqueness_and_case_folding_compare_the_decoded_names() -> None:
    with pytest.raises(PathInvalid):
        check_path_set(["src/A\\xe9", "src/a\\xe9"])
    with pytest.raises(PathInvalid):
        check_path_set(["d\\xff", "D\\xff/x"])  # a prefix directory of another, folded
    check_path_set(["src/caf\\xe9", "src/caf\u00e9", "src/caf\\\\xe9"])  # three names


def test_disk_and_wire_forms_convert_both_ways() -> None:
    name = os.fsdecode(b"src/caf\xe9\\.txt")
    assert wire_path(name) == "src/caf\\xe9\\\\.txt"
    assert disk_path("src/caf\\xe9\\\\.txt") == name
    assert os.fsencode(disk_path("src/caf\\xe9\\\\.txt")) == b"src/caf\xe9\\.txt"
