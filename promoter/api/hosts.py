"""The ``Host`` allowlist: a request must name this daemon, not a name someone rebound to it.

DNS rebinding: a page served from ``evil.example`` makes the browser resolve that name
again, now to ``127.0.0.1``, and reads this daemon's answers as its own origin (the
metrics, the console's login page). The browser still sends ``Host: evil.example``, so
``HostAllowlist`` (a plain ASGI middleware) answers any request whose ``Host`` is not
one of this daemon's with ``421 host_not_allowed`` before a route sees it. Allowed are:
``localhost``, any loopback address, the address the connection reached (an address
literal cannot be rebound), the configured listen ``host`` and the names in the
``allowed_hosts`` setting; the port is not compared. A request without ``Host`` is
refused too. ``GET /healthz`` is exempt: its answer is fixed bytes that say nothing, and
probes of load balancers and orchestrators often name the daemon by an address or name
it cannot know. Deliberately not here: authentication (``promoter.api.deps``), and
``Origin``/CORS (no route answers with CORS headers, so a foreign page reads nothing
unless rebinding makes it same-origin, which this refuses).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from promoter.api.problems import MEDIA_TYPE
from promoter.errors import HostNotAllowed

EXEMPT = frozenset({"/healthz"})
LOOPBACK_NAMES = frozenset({"localhost"})


def _name(value: str) -> str:
    return value.strip().lower().rstrip(".")


def host_of(header: str) -> str:
    """The host part of a ``Host`` header value (without port; IPv6 without brackets)."""
    value = header.strip()
    if value.startswith("["):
        end = value.find("]")
        return _name(value[1:end]) if end > 0 else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return _name(value)


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None


class HostAllowlist:
    def __init__(self, app: ASGIApp, listen_host: str, allowed: Iterable[str]) -> None:
        self.app = app
        self.names = set(LOOPBACK_NAMES) | {_name(name) for name in allowed}
        listen = _address(_name(listen_host).strip("[]"))
        if listen is None:
            self.names.add(_name(listen_host))
        elif not listen.is_unspecified:
            self.names.add(str(listen))

    def allows(self, host: str, server: Any) -> bool:
        if not host:
            return False
        if host in self.names:
            return True
        address = _address(host)
        if address is None:
            return False
        if address.is_loopback or str(address) in self.names:
            return True
        reached = _address(str(server[0])) if server else None
        return reached is not None and reached == address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        headers = [v for k, v in scope.get("headers", ()) if k == b"host"]
        host = host_of(headers[0].decode("latin-1")) if len(headers) == 1 else ""
        if self.allows(host, scope.get("server")):
            await self.app(scope, receive, send)
            return
        await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        error = HostNotAllowed(
            "the Host header does not name this daemon; add the name to allowed_hosts "
            "if it is one"
        )
        problem = {**error.to_problem(), "instance": scope["path"]}
        body = json.dumps(problem, sort_keys=True).encode()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": error.http_status,
                "headers": [
                    (b"content-type", MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
