"""Cheap structural bounds on untrusted JSON, checked chunk by chunk as a body streams in.

``ShapeBudget.feed(chunk)`` keeps two running figures of the bytes seen so far: the
nesting depth of arrays and objects, and an upper bound on the number of values
(``,`` separators plus opened containers). It raises ``JsonTooDeep`` or
``JsonTooManyItems`` as soon as either passes its limit, so a hostile body is refused
after the first few hundred kilobytes, long before ``json.loads`` would build millions of
Python objects from it. String contents are stripped at C speed: by splitting at quotes
when a chunk holds no backslash, else with one regular expression; a string cut by a
chunk boundary is carried as at most two bytes
(the opening quote and a pending backslash), so a huge string costs no rescanning.

It deliberately does not validate JSON: malformed input passes through here and is
refused by ``promoter.domain.parsing.load_json`` afterwards. The counts are upper
bounds (an empty container counts as one value, a trailing comma as one more), never
lower, so nothing that parses can hold more values or nest deeper than was counted.
"""

from __future__ import annotations

import re

from promoter.errors import JsonTooDeep, JsonTooManyItems

# A complete string, or else the unterminated one that runs to the end of the data, kept
# (group 1). The second branch makes every match attempt succeed, so the scan is linear:
# an unterminated string full of escaped quotes is never searched again from each one.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|("[^"\\]*(?:\\.[^"\\]*)*\\?)\Z', re.DOTALL)
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPEN = frozenset(b"[{")


class ShapeBudget:
    """Depth and value counts of a JSON text fed in pieces; raises past the limits."""

    def __init__(self, *, max_depth: int, max_items: int) -> None:
        self.max_depth = max_depth
        self.max_items = max_items
        self.depth = 0
        self.items = 1  # the top-level value
        self._carry = b""  # an unterminated string: b'"' or b'"\\' (escape pending)

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._carry and b'"' not in chunk:
            # Still inside one long string: only the escape state at its end matters.
            content = chunk[len(self._carry) - 1 :]
            run = len(content) - len(content.rstrip(b"\\"))
            self._carry = b'"\\' if run % 2 else b'"'
            return
        data = self._carry + chunk
        structure, self._carry = _outside_strings(data)
        self._count(structure)

    def _count(self, structure: bytes) -> None:
        opens = structure.count(b"[") + structure.count(b"{")
        self.items += structure.count(b",") + opens
        if self.items > self.max_items:
            raise JsonTooManyItems(
                f"the JSON body holds more than {self.max_items} values",
                limit=self.max_items,
            )
        closes = structure.count(b"]") + structure.count(b"}")
        if self.depth + opens <= self.max_depth:
            self.depth = max(0, self.depth + opens - closes)
            return
        for byte in structure.translate(None, _NOT_BRACKETS):
            self.depth = self.depth + 1 if byte in _OPEN else max(0, self.depth - 1)
            if self.depth > self.max_depth:
                raise JsonTooDeep(
                    f"the JSON body nests deeper than {self.max_depth} levels",
                    limit=self.max_depth,
                )


def _outside_strings(data: bytes) -> tuple[bytes, bytes]:
    """The bytes of ``data`` outside its strings, and the carry of a string it ends in.

    Without a backslash, strings run from one quote to the next, so the text outside them
    is every other piece between quotes (C speed, no regular expression); an odd number
    of quotes leaves the last string open. The same answer as ``_outside_strings_re``.
    """
    if b"\\" in data:
        return _outside_strings_re(data)
    pieces = data.split(b'"')
    return b"".join(pieces[::2]), (b'"' if len(pieces) % 2 == 0 else b"")


def _outside_strings_re(data: bytes) -> tuple[bytes, bytes]:
    structure = _STRING.sub(b"", data)
    # Group 1 is empty for complete strings; only a string the chunk ends inside has
    # it, as the last match, and then only its escape state at the end matters.
    tails = _STRING.findall(data)
    tail = tails[-1] if tails else b""
    if not tail:
        return structure, b""
    body = _STRING_BODY.match(tail, 1)
    assert body is not None  # the pattern matches the empty string
    return structure, (b'"' if body.end() == len(tail) else b'"\\')
