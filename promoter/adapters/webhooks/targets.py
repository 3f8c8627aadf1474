"""Where a webhook may be sent: the target policy, checked on the address connected to.

A subscriber's URL is the operator's, but the name in it resolves through DNS, which
someone else may control (DNS rebinding: a name that answered a public address when it
was configured answers ``127.0.0.1`` or ``169.254.169.254`` later). So the policy is
checked on the resolved address at each delivery: ``TargetPolicy.resolve`` resolves the
name once, refuses unless every address it got is permitted, and gives back a ``Target``
whose URL names the first address itself, so the connection goes where the check looked;
the request still carries the configured name in ``Host`` (and, over TLS, as the server
name the certificate is checked against).

An address is permitted when it is globally routable: loopback, link-local (cloud metadata
at ``169.254.169.254``), private (RFC 1918, ``fc00::/7``, ``100.64.0.0/10``), unspecified,
multicast and reserved addresses are refused, and so is the whole IANA special-purpose
block ``192.0.0.0/24`` (Python counts some of it global). IPv6 addresses that carry an
IPv4 address are judged by what they carry or refused outright: an IPv4-mapped address
(``::ffff:0:0/96``) and a 6to4 address (``2002::/16``) by the IPv4 address inside; Teredo
(``2001::/32``) and the NAT64 prefixes (``64:ff9b::/96``, ``64:ff9b:1::/48``) always,
since a relay or translator on the path decides where they go. The operator allows more in
``webhook_allowed_targets``: a host name (the URL's host, exactly, any address it resolves
to) or a network in CIDR form (any name resolving into it). ``check_configured`` refuses
at start-up a subscriber whose URL names a refused address literally, or a name that is
loopback by definition (``localhost``). Deliberately not here: sending, signing and
retrying (``promoter.adapters.webhooks.dispatcher``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import httpx

from promoter.config import Settings
from promoter.errors import WebhookTargetRefused

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Target:
    """Where one delivery connects: ``url`` names ``address``; ``host`` goes in ``Host``."""

    url: httpx.URL
    host: str
    server_name: str | None  # the name TLS checks the certificate against (https only)
    address: str


def _name(host: str) -> str:
    return host.lower().rstrip(".")


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


SPECIAL_V4 = ipaddress.IPv4Network("192.0.0.0/24")  # IANA special-purpose (RFC 6890)
# IPv6 ranges that carry an IPv4 address somewhere else decides the route for
RELAYED_V6 = (
    ipaddress.IPv6Network("2001::/32"),  # Teredo
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, well-known prefix (RFC 6052)
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # NAT64, local-use prefix (RFC 8215)
)


def embedded_v4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped or 6to4 address carries, else None."""
    if isinstance(address, ipaddress.IPv6Address):
        return address.ipv4_mapped or address.sixtofour
    return None


def globally_routable(address: Address) -> bool:
    """Whether ``address`` is one the policy permits without the operator's allowance."""
    inner = embedded_v4(address)
    if inner is not None:
        return globally_routable(inner)
    if isinstance(address, ipaddress.IPv4Address) and address in SPECIAL_V4:
        return False
    if isinstance(address, ipaddress.IPv6Address) and any(address in n for n in RELAYED_V6):
        return False
    return address.is_global and not address.is_multicast and not address.is_reserved


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now (the system resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class TargetPolicy:
    """The refused ranges, less what the operator allowed by name or network.

    ``resolver`` answers a name's addresses (the system's; a test plays a rebinding DNS).
    """

    def __init__(self, allowed: Iterable[str], resolver: Resolver = system_resolver) -> None:
        self.resolver = resolver
        self.names: set[str] = set()
        self.networks: list[Network] = []
        for entry in allowed:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                self.names.add(_name(entry))

    def permits(self, name: str, address: Address) -> bool:
        if _name(name) in self.names:
            return True
        if any(address in network for network in self.networks):
            return True
        inner = embedded_v4(address)
        if inner is not None and any(inner in network for network in self.networks):
            return True
        return globally_routable(address)

    def check_url(self, url: str) -> None:
        """Refuse a URL whose host is, by itself, a refused address or a loopback name."""
        host = _name(httpx.URL(url).host)
        if host in self.names:
            return
        literal = _literal(host)
        if literal is not None and not self.permits(host, literal):
            raise WebhookTargetRefused(
                f"the webhook target {host} is a {_kind(literal)} address", target=host
            )
        if literal is None and (host in LOOPBACK_NAMES or host.endswith(".localhost")):
            raise WebhookTargetRefused(f"the webhook target {host} is loopback", target=host)

    async def resolve(self, url: str) -> Target:
        """Resolve ``url``'s host once; the target to connect to, or refused."""
        parsed = httpx.URL(url)
        host = parsed.host
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        literal = _literal(host)
        if literal is not None:
            addresses: list[Address] = [literal]
        else:
            found = await self.resolver(host, port)  # OSError: the delivery fails, retried
            try:
                addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
            except ValueError as exc:
                raise WebhookTargetRefused(
                    f"the webhook target {host} resolves to a non-address: {exc}", target=host
                ) from exc
        if not addresses:
            raise WebhookTargetRefused(f"the webhook target {host} has no address", target=host)
        for address in addresses:
            if not self.permits(host, address):
                raise WebhookTargetRefused(
                    f"the webhook target {host} resolves to {address}, "
                    f"a {_kind(address)} address",
                    target=host,
                    address=str(address),
                )
        first = str(addresses[0])
        return Target(
            url=parsed.copy_with(host=first),
            host=parsed.netloc.decode("ascii"),
            server_name=host if parsed.scheme == "https" and literal is None else None,
            address=first,
        )


def _kind(address: Address) -> str:
    inner = embedded_v4(address)
    if inner is not None:
        return _kind(inner)
    if isinstance(address, ipaddress.IPv6Address) and any(address in n for n in RELAYED_V6):
        return "relayed (Teredo or NAT64)"
    if isinstance(address, ipaddress.IPv4Address) and address in SPECIAL_V4:
        return "special-purpose"
    for kind, test in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if test:
            return kind
    return "non-global"


def check_configured(settings: Settings) -> None:
    """Refuse, before the daemon serves, a subscriber whose URL the policy refuses as written."""
    policy = TargetPolicy(settings.webhook_allowed_targets)
    for name, config in settings.webhooks.items():
        try:
            policy.check_url(config.url)
        except WebhookTargetRefused as exc:
            target = exc.context.get("target", "")
            raise WebhookTargetRefused(
                f"subscriber {name}: {exc.detail}; nothing is served. A receiver of your own "
                f'there is allowed by listing it: webhook_allowed_targets = ["{target}"] '
                "(docs/operator/webhooks.md, Targets)",
                **exc.context,
                subscriber=name,
            ) from exc
