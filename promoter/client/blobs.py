"""The blob endpoints of the daemon client: which blobs are missing, uploads, reads.

``BlobCalls`` asks ``blobs:missing`` in batches of ``MISSING_BATCH`` digests, streams
one blob with ``PUT`` (from bytes, a file or an iterable of chunks), and sends small
blobs many to a ``POST /v1/blobs:batchUpdate`` request (framed by
``promoter.domain.blob_frames``, each body streamed) and big ones streamed alone.
Deliberately not here: checking what a blob holds (the server hashes while it stores),
the other endpoints (``promoter.client.sync``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from promoter.client.transport import Transport
from promoter.client.wire import CHUNK, MISSING_BATCH, BlobSource, Json, file_chunks, segment
from promoter.domain.blob_frames import (
    BATCH_BLOB_MAX,
    BATCH_MAX_BLOBS,
    BATCH_MAX_BYTES,
    frame_bytes,
    frame_header,
)
from promoter.errors import error_class


def batch_frames(batch: Iterable[tuple[str, int, BlobSource]]) -> Iterator[bytes]:
    """The frames of ``(sha256, size, source)`` blobs, joined: one send per ``CHUNK``."""

    def pieces() -> Iterator[bytes]:
        for sha256, size, source in batch:
            yield frame_header(sha256, size)
            if isinstance(source, bytes):
                yield source
            elif isinstance(source, Path):
                yield from file_chunks(source)
            else:
                yield from source

    pending = bytearray()
    for piece in pieces():
        pending += piece
        if len(pending) >= CHUNK:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


class BlobCalls(Transport):
    """``Transport`` with the blob endpoints."""

    def blobs_missing(self, digests: Iterable[str]) -> list[str]:
        """Which of ``digests`` the blob store does not hold (asked in batches)."""
        wanted = list(dict.fromkeys(digests))
        missing: list[str] = []
        for start in range(0, len(wanted), MISSING_BATCH):
            batch = wanted[start : start + MISSING_BATCH]
            answer = self._json(
                "POST", "/v1/blobs:missing", json_body={"sha256": batch}, idempotent=True
            )
            missing.extend(answer["missing"])
        return missing

    def put_blob(self, sha256: str, source: BlobSource, *, size: int | None = None) -> Json:
        """Upload one blob, streamed from bytes, a file path or an iterable of chunks.

        ``{sha256, bytes, created}``; the server hashes while it stores and keeps nothing
        when the bytes do not hash to ``sha256``.
        """
        content: bytes | Iterable[bytes]
        if isinstance(source, bytes):
            content, size = source, len(source)
        elif isinstance(source, Path):
            size = source.stat().st_size if size is None else size
            content = file_chunks(source)
        else:
            content = source
        headers = {"Content-Type": "application/octet-stream"}
        if size is not None:
            headers["Content-Length"] = str(size)
        path = f"/v1/blobs/sha256/{segment(sha256)}"
        return self._json("PUT", path, content=content, headers=headers)

    def put_blobs(self, blobs: Iterable[tuple[str, int, BlobSource]]) -> list[Json]:
        """Upload ``(sha256, size, source)`` blobs: small ones batched, big ones streamed.

        Blobs of at most ``BATCH_BLOB_MAX`` bytes go in ``POST /v1/blobs:batchUpdate``
        requests (as many per request as its limits allow, each body streamed); bigger
        ones through ``put_blob``. One ``{sha256, bytes, created}`` per blob, in order;
        the first blob the server refused is raised as its code's error, after every
        batch before it was stored.
        """
        answers: dict[int, Json] = {}
        batch: list[tuple[str, int, BlobSource]] = []
        places: list[int] = []
        batch_bytes = 0

        def send() -> None:
            answers.update(zip(places, self._post_batch(batch, batch_bytes), strict=True))

        for index, (sha256, size, source) in enumerate(blobs):
            if size > BATCH_BLOB_MAX:
                answers[index] = self.put_blob(sha256, source, size=size)
                continue
            added = frame_bytes(sha256, size)
            if batch and (len(batch) >= BATCH_MAX_BLOBS or batch_bytes + added > BATCH_MAX_BYTES):
                send()
                batch, places, batch_bytes = [], [], 0
            batch.append((sha256, size, source))
            places.append(index)
            batch_bytes += added
        if batch:
            send()
        return [answers[index] for index in sorted(answers)]

    def _post_batch(self, batch: list[tuple[str, int, BlobSource]], length: int) -> list[Json]:
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        answer = self._json(
            "POST", "/v1/blobs:batchUpdate", content=batch_frames(batch), headers=headers
        )
        out: list[Json] = []
        for item in answer["responses"]:
            if item.get("code"):
                raise error_class(item["code"])(str(item.get("detail") or ""))
            out.append({k: item[k] for k in ("sha256", "bytes", "created")})
        return out

    def get_blob(self, sha256: str) -> bytes:
        return self._send("GET", f"/v1/blobs/sha256/{segment(sha256)}").content
