"""Small response helpers shared by the routes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi.responses import Response

from promoter.domain.canonical import canonical_bytes

if TYPE_CHECKING:
    from promoter.domain.views import Reply, View


def json_response(body: Any, status: int = 200) -> Response:
    data = json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8")
    return Response(data, status_code=status, media_type="application/json")


def model_response(view: Reply | View, status: int = 200) -> Response:
    """A view's JSON answer: the same bytes ``json_response`` gives for its wire form."""
    return json_response(view.wire(), status)


def canonical_response(data: bytes | Any, status: int = 200) -> Response:
    """A stored document's exact canonical bytes (or a document canonicalized now)."""
    body = data if isinstance(data, bytes) else canonical_bytes(data)
    return Response(body, status_code=status, media_type="application/json")
