"""Blob upload, lookup and download (SPEC §7)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response, StreamingResponse

from promoter.api.deps import ExecutorDep, OperatorDep, ServicesDep, read_json_body
from promoter.api.responses import json_response
from promoter.errors import BadRequest, NotFound, PayloadTooLarge, ValidationFailed
from promoter.store import repo

router = APIRouter(prefix="/v1")
HexParam = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")]
_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_QUERY = 100_000


@router.post("/blobs:missing")
async def blobs_missing(request: Request, _: ExecutorDep, services: ServicesDep) -> Response:
    body = await read_json_body(request, services)
    if (
        not isinstance(body, dict)
        or set(body) != {"sha256"}
        or not isinstance(body["sha256"], list)
    ):
        raise ValidationFailed('body must be {"sha256": [<64 hex>, ...]}')
    digests = body["sha256"]
    if len(digests) > MAX_QUERY:
        raise PayloadTooLarge(f"at most {MAX_QUERY} digests per request")
    if not all(isinstance(d, str) and _HEX.match(d) for d in digests):
        raise ValidationFailed("every sha256 must be 64 lowercase hex characters")
    missing = [d for d in dict.fromkeys(digests) if not services.blobs.has(d)]
    return json_response({"missing": missing})


@router.put("/blobs/sha256/{sha256}")
async def put_blob(
    sha256: HexParam, request: Request, _: ExecutorDep, services: ServicesDep
) -> Response:
    limit = services.settings.max_blob_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        raise PayloadTooLarge(f"blob is larger than {limit} bytes", limit=limit)
    writer = services.blobs.writer(sha256, limit)
    try:
        async for chunk in request.stream():
            writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    created = writer.commit()
    with services.db.session() as session:
        repo.record_blob(session, sha256, writer.size)
    return json_response(
        {"sha256": sha256, "bytes": writer.size, "created": created}, 201 if created else 200
    )


@router.get("/blobs/sha256/{sha256}")
def get_blob(sha256: HexParam, _: OperatorDep, services: ServicesDep) -> Response:
    if not services.blobs.has(sha256):
        raise NotFound(f"blob {sha256} is not stored", sha256=sha256)
    return StreamingResponse(
        services.blobs.iter_chunks(sha256), media_type="application/octet-stream"
    )
