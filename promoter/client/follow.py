"""Following a 421 to the host that owns the answer: once, and only within the cluster.

A daemon asked about another host's work answers 421 ``owned_by_other_host`` with the
owner's URL in ``Location`` (protocol: hosts#answers-that-route). Both clients send the same request
there once, like a redirect, under these rules:

- only a 421 whose ``Location`` is an absolute ``http`` or ``https`` URL is followed;
- only to a host of the same cluster: the origin (scheme, host, port) must be the
  ``address`` of a host the first daemon's ``GET /v1/hosts`` lists (read from the
  ledger), and not the first daemon's own; the credential is sent nowhere else;
- never more than once: the owner's answer, whatever it is, is the answer;
- only a request whose body can be sent again (none, JSON or bytes; a stream is not).

Deliberately not here: sending (``promoter.client.transport``, ``promoter.client.aio``)
and retries (``promoter.client.wire``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from promoter.client.wire import Response

Origin = tuple[str, str, int]
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of an absolute http(s) URL; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def location(response: Response) -> str | None:
    """The URL a 421 answer sends the request to, if it is one the clients may follow."""
    if response.status_code != 421:
        return None
    target = response.headers.get("location", "")
    return target if origin(target) is not None else None


def owner(response: Response, target: str) -> str:
    """The base URL of the host a followed 421 (``response``) sent the request to: the
    problem's ``owner_url`` when it is that origin (it keeps a path prefix), else
    ``scheme://host:port`` of ``target``."""
    try:
        named = response.json().get("owner_url")
    except (ValueError, AttributeError):
        named = None
    if isinstance(named, str) and origin(named) is not None and origin(named) == origin(target):
        return named.rstrip("/")
    scheme, host, port = origin(target) or ("http", "", 0)
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def replayable(content: bytes | Iterable[bytes] | None) -> bool:
    """Whether a request body can be sent a second time."""
    return content is None or isinstance(content, bytes | bytearray)


def cluster_origins(hosts: Any) -> frozenset[Origin]:
    """The origins of the hosts a ``GET /v1/hosts`` answer lists with an address."""
    listed = hosts.get("hosts") if isinstance(hosts, dict) else None
    found = set()
    for host in listed if isinstance(listed, list) else []:
        address = host.get("address") if isinstance(host, dict) else None
        where = origin(address) if isinstance(address, str) else None
        if where is not None:
            found.add(where)
    return frozenset(found)


def within(target: str, here: str, origins: frozenset[Origin]) -> bool:
    """Whether ``target`` is another host of the cluster than ``here``."""
    where = origin(target)
    return where is not None and where != origin(here) and where in origins
