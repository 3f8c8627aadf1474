"""Property: a receiver's ``verify`` answers False on anything malformed and never raises.

A forged ``Promoter-Signature`` is attacker text: ``t=²`` (a digit to ``str.isdigit``,
not to ``int``), a non-ASCII ``v1``, commas, equals signs, huge numbers, NaN clocks. Also:
whatever is signed verifies, and any change of body, secret or timestamp does not; the
target policy's address check is total over every IPv4 and IPv6 address.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.adapters.webhooks.targets import TargetPolicy, globally_routable
from promoter.engine.webhooks import signature, verify

SECRET = "whsec_" + "k" * 32
pieces = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["t=", "v1=", ",", "=", "²", "١٢", "t=²", "v1=" + "0" * 64, "t=-1", "\x00"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(lambda n: f"t={n}"),
)
headers = st.lists(pieces, max_size=6).map("".join)
clocks = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20).map(float)
)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(headers, st.binary(max_size=64), clocks, st.floats(allow_nan=True))
def test_verify_never_raises_on_any_header_body_or_clock(
    header: str, body: bytes, now: float, tolerance: float
) -> None:
    assert verify(SECRET, header, body, now, tolerance) in (True, False)


def test_a_superscript_or_arabic_digit_timestamp_is_false_not_an_error() -> None:
    body = b"{}"
    mac = signature(SECRET, 2, body).split("v1=")[1]
    for stamp in ("²", "١", "2\n", " 2", "+2", "2.0", "0x2"):
        assert verify(SECRET, f"t={stamp},v1={mac}", body, 2) is False
    assert verify(SECRET, f"t=2,v1={mac.upper()}", body, 2) is False
    assert verify(SECRET, "t=2,v1=é" + mac[1:], body, 2) is False
    assert verify(SECRET, f"t=2,v1={mac}", body, float("nan")) is False
    assert verify(SECRET, f"t=2,v1={mac}", body, 2) is True


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256), st.integers(0, 10**12), st.binary(min_size=1, max_size=4))
def test_what_is_signed_verifies_and_any_change_does_not(
    body: bytes, stamp: int, extra: bytes
) -> None:
    header = signature(SECRET, stamp, body)
    assert verify(SECRET, header, body, stamp)
    assert not verify(SECRET, header, body + extra, stamp)
    assert not verify(SECRET + "x", header, body, stamp)
    assert not verify(SECRET, header.replace(f"t={stamp}", f"t={stamp + 1}"), body, stamp)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)))
def test_no_address_the_policy_permits_is_loopback_link_local_or_private(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    policy = TargetPolicy([])
    permitted = policy.permits("hooks.example", address)
    assert permitted == globally_routable(address)
    inner = address
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        inner = address.ipv4_mapped
    if inner.is_loopback or inner.is_link_local or inner.is_private or inner.is_multicast:
        assert not permitted
    if inner.is_unspecified or inner in ipaddress.ip_network("100.64.0.0/10"):
        assert not permitted
