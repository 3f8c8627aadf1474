"""The ``Host`` allowlist: a request must name this daemon, not a name someone rebound to it.

DNS rebinding: a page served from ``evil.example`` makes the browser resolve that name
again, now to ``127.0.0.1``, and reads this daemon's answers as its own origin (the
metrics, the console's login page). The browser still sends ``Host: evil.example``, so
``HostAllowlist`` (asked by the daemon's one ASGI layer, ``promoter.api.front``) answers any
request whose ``Host`` is not one of this daemon's with ``421 host_not_allowed`` before a
route sees it. Allowed are:
``localhost``, any loopback address, the address the connection reached (an address
literal cannot be rebound), the configured listen ``host`` and the names in the
``allowed_hosts`` setting; the port is not compared. A request without ``Host`` is
refused too. The header is parsed strictly (``host_of``) as ``host[:port]``: ``host`` is a bracketed
IPv6 literal (no zone), a dotted-quad IPv4 address or a DNS name (labels of letters,
digits, ``-`` and ``_``, compared case-insensitively); ``port`` is 1 to 5 digits. Anything
else is refused whole, not trimmed into something that matches: ``localhost:80.evil``,
``[::1].evil``, ``localhost:`` and a name ending in a dot (``LOCALHOST.``: browsers treat a
trailing-dot name as an origin of its own, and nothing promoter serves is named so).

``GET /healthz`` is exempt: its answer is fixed bytes that say nothing, and probes of load
balancers and orchestrators often name the daemon by an address or name it cannot know.
Deliberately not here: authentication (``promoter.api.deps``), and ``Origin``/CORS (no
route answers with CORS headers, so a foreign page reads nothing unless rebinding makes it
same-origin, which this refuses).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from typing import Any

from starlette.types import Scope, Send

from promoter.api.problems import MEDIA_TYPE
from promoter.errors import HostNotAllowed

EXEMPT = frozenset({"/healthz"})
LOOPBACK_NAMES = frozenset({"localhost"})


def _name(value: str) -> str:
    return value.strip().lower()


_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


def _dns_name(value: str) -> bool:
    labels = value.split(".")
    return len(value) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def host_of(header: str) -> str:
    """The host part of a ``Host`` header value, lower-cased (without port; IPv6 without
    brackets), or ``""`` when the value is not exactly ``host[:port]`` as the module
    docstring says."""
    value = header.strip(" \t").lower()
    if value.startswith("["):
        literal, bracket, rest = value[1:].partition("]")
        if not bracket or "%" in literal:
            return ""
        if rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:])):
            return ""
        try:
            return str(ipaddress.IPv6Address(literal))
        except ValueError:
            return ""
    host, colon, port = value.partition(":")
    if colon and not _PORT.fullmatch(port):
        return ""
    return host if _dns_name(host) else ""


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None


class HostAllowlist:
    def __init__(self, listen_host: str, allowed: Iterable[str]) -> None:
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

    def permits(self, scope: Scope) -> bool:
        """Whether an HTTP or websocket request may go on (exempt paths always may)."""
        if scope["path"] in EXEMPT:
            return True
        found = None
        for name, value in scope.get("headers", ()):
            if name == b"host":
                if found is not None:
                    return False  # two Host headers: neither is believed
                found = value
        host = "" if found is None else host_of(found.decode("latin-1"))
        return self.allows(host, scope.get("server"))

    async def refuse(self, scope: Scope, send: Send) -> None:
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
