"""The wire format of a promotion with its evidence (``POST /v1/promotions:withEvidence``).

The body is one bundle frame, then the blob frames of a batch
(``promoter.domain.blob_frames``): an ASCII header line ``bundle <size>\\n`` (the size in
decimal without leading zeros) followed by exactly ``size`` bytes of the bundle's JSON
document, then zero or more ``<sha256> <size>\\n`` frames, each followed by its blob's
bytes. The bundle comes first so the receiver reads its run and grant before any blob is
written: a bundle of another run is refused with nothing stored.

This module only formats and parses the bundle's header and sizes a body; storing,
authority and answers are in ``promoter.api.routes.promotions``.
"""

from __future__ import annotations

import re

from promoter.domain.blob_frames import frame_bytes

BUNDLE_HEADER_MAX = len("bundle ") + 16  # bytes of the bundle's header line, newline excluded
_HEADER = re.compile(rb"^bundle (0|[1-9][0-9]{0,15})$")


def bundle_header(size: int) -> bytes:
    return f"bundle {size}\n".encode("ascii")


def parse_bundle_header(line: bytes) -> int | None:
    """The bundle's size from its header line without the newline, or None if malformed."""
    match = _HEADER.match(line)
    return None if match is None else int(match.group(1))


def body_bytes(bundle_size: int, blobs: list[tuple[str, int]]) -> int:
    """The bytes of a whole body: the bundle's frame and every blob's."""
    return len(bundle_header(bundle_size)) + bundle_size + sum(frame_bytes(s, n) for s, n in blobs)
