"""The webhook target policy on addresses that carry another address (TESTS S6).

IPv6 has several ways to carry an IPv4 address: 6to4 (``2002:V4V4:V4V4::/48``), Teredo
(``2001::/32``), NAT64 (``64:ff9b::/96``, ``64:ff9b:1::/48``) and IPv4-mapped addresses.
A target written or resolved as one of them must not reach what the IPv4 address would be
refused as (loopback, metadata, private). The IANA special-purpose block ``192.0.0.0/24``
is refused whole. The daemon-level refusal at start is in
``tests/api/test_webhook_receivers.py``.
"""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from promoter.adapters.webhooks.targets import TargetPolicy, globally_routable
from promoter.errors import WebhookTargetRefused

REFUSED = [
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254 (cloud metadata)
    "2002:c0a8:1::",  # 6to4 of 192.168.0.1
    "2002:a00:1::",  # 6to4 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2001::1",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
    "64:ff9b::808:808",  # NAT64 of a public address: the translator decides, refused too
    "64:ff9b:1::7f00:1",  # local-use NAT64
    "64:ff9b:1:ffff::1",
    "192.0.0.8",  # IANA special-purpose (IPv4 dummy address)
    "192.0.0.9",
    "192.0.0.1",
    "192.0.0.255",
    "::ffff:192.0.0.8",
    "2002:c000:8::",  # 6to4 of 192.0.0.8
]
PERMITTED = ["8.8.8.8", "2001:4860:4860::8888", "2002:808:808::1", "192.0.1.1", "191.255.255.1"]


@pytest.mark.parametrize("address", REFUSED)
def test_an_address_carrying_a_refused_one_is_refused(address: str) -> None:
    assert not globally_routable(ipaddress.ip_address(address))
    with pytest.raises(WebhookTargetRefused) as refused:
        TargetPolicy([]).check_url(f"http://{_host(address)}:8080/hook")
    assert refused.value.code == "webhook_target_refused"


@pytest.mark.parametrize("address", PERMITTED)
def test_a_global_address_is_permitted(address: str) -> None:
    assert globally_routable(ipaddress.ip_address(address))
    TargetPolicy([]).check_url(f"http://{_host(address)}/hook")


@pytest.mark.parametrize("address", ["2002:7f00:1::", "64:ff9b::7f00:1", "192.0.0.8"])
def test_a_name_resolving_to_a_carrying_address_at_delivery_is_refused(address: str) -> None:
    async def rebinding(host: str, port: int) -> list[str]:
        del host, port
        return ["93.184.216.34", address]

    policy = TargetPolicy([], rebinding)
    with pytest.raises(WebhookTargetRefused) as refused:
        asyncio.run(policy.resolve("http://hooks.example/hook"))
    assert refused.value.context["address"] == str(ipaddress.ip_address(address))


def test_the_operator_may_allow_a_network_by_its_embedded_or_its_own_form() -> None:
    by_v4 = TargetPolicy(["127.0.0.0/8"])
    by_v4.check_url("http://[2002:7f00:1::]/hook")  # 6to4 of an allowed IPv4 network
    by_v6 = TargetPolicy(["64:ff9b::/96"])
    by_v6.check_url("http://[64:ff9b::7f00:1]/hook")
    with pytest.raises(WebhookTargetRefused):
        by_v4.check_url("http://[64:ff9b::7f00:1]/hook")  # NAT64 is only allowed as itself


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
