"""The wire format of a blob batch (``POST /v1/blobs:batchUpdate``): framed, streamable.

The body is a sequence of frames, each an ASCII header line ``<sha256> <size>\\n`` (64
lowercase hex digits, one space, the size in decimal without leading zeros) followed by
exactly ``size`` bytes of the blob. Each blob carries its digest and size up front, so
the receiver checks both while the bytes stream (in the spirit of REAPI
``BatchUpdateBlobs``, without base64). The limits here bound one batch; bigger blobs
go through the streamed ``PUT /v1/blobs/sha256/{sha256}``.

This module only formats and parses headers; storing, quotas and answers are in
``promoter.store.blob_batch`` and ``promoter.api.routes.blobs``.
"""

from __future__ import annotations

import re

BATCH_MAX_BLOBS = 2000  # frames per batch
BATCH_MAX_BYTES = 16 << 20  # bytes of one batch body, headers included
BATCH_BLOB_MAX = 256 << 10  # the largest blob a batch carries
HEADER_MAX = 64 + 1 + 16  # bytes of a header line, newline excluded
_HEADER = re.compile(rb"^([0-9a-f]{64}) (0|[1-9][0-9]{0,15})$")


def frame_header(sha256: str, size: int) -> bytes:
    return f"{sha256} {size}\n".encode("ascii")


def parse_header(line: bytes) -> tuple[str, int] | None:
    """``(sha256, size)`` of a header line without its newline, or None if malformed."""
    match = _HEADER.match(line)
    if match is None:
        return None
    return match.group(1).decode("ascii"), int(match.group(2))


def frame_bytes(sha256: str, size: int) -> int:
    """The bytes one blob adds to a batch body."""
    return len(frame_header(sha256, size)) + size
