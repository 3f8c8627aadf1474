"""The wire side of ``POST /v1/promotions:withEvidence`` shared by both clients.

``split_blobs`` decides which blobs ride in the request (the batch's bounds) and which
must be stored before it (too big for a frame, or past the request's count or bytes);
``bundle_frame`` is the body's first frame; ``request_parts`` the query and headers.
Deliberately not here: sending (``promoter.client.sync``, ``promoter.client.aio``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeVar

from promoter.domain.blob_frames import (
    BATCH_BLOB_MAX,
    BATCH_MAX_BLOBS,
    BATCH_MAX_BYTES,
    frame_bytes,
)
from promoter.domain.evidence_frames import bundle_header

PATH = "/v1/promotions:withEvidence"
EXECUTOR_HEADER = "Promoter-Executor-Token"
B = TypeVar("B", bound=tuple[Any, ...])


def bundle_frame(document: Any) -> bytes:
    """The bundle's header line and its JSON document (ASCII, compact)."""
    data = json.dumps(document, separators=(",", ":")).encode("ascii")
    return bundle_header(len(data)) + data


def split_blobs(blobs: Iterable[B]) -> tuple[list[B], list[B]]:
    """``(sha256, size, ...)`` blobs as (framed in the request, stored before it)."""
    framed: list[B] = []
    apart: list[B] = []
    total = 0
    for blob in blobs:
        sha256, size = blob[0], blob[1]
        added = frame_bytes(sha256, size)
        if (
            size > BATCH_BLOB_MAX
            or len(framed) >= BATCH_MAX_BLOBS
            or total + added > BATCH_MAX_BYTES
        ):
            apart.append(blob)
            continue
        framed.append(blob)
        total += added
    return framed, apart


def request_parts(
    fence: int, wait: bool, executor_token: str, length: int, *, with_review: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    """The query parameters and headers of one request whose body is ``length`` bytes;
    ``with_review``: the answer is to carry the bundle's first diff page and, once
    completed, the promotion receipt (``diff``, ``receipt``)."""
    params = {"fence": str(fence), "wait": "true" if wait else "false"}
    if with_review:
        params |= {"diff": "true", "receipt": "true"}
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Length": str(length),
        EXECUTOR_HEADER: executor_token,
    }
    return params, headers
