"""Who may connect: the token check and the address checks. Pure: no I/O, no clock.

Shared by every edge that admits peers -- the server (:mod:`voice_pipeline.server`:
the ``/ws`` bearer token, trusted proxies, the rate limit's client keys) and the
telephony bridges (:mod:`voice_pipeline.telephony`: the ``/twilio`` stream token,
AudioSocket's allow-listed peers) -- so that neither imports the other.

:func:`token_ok` compares in constant time; :func:`parse_address` reads an
address as the client sent it (``[::1]`` brackets, an IPv4-mapped IPv6 address
as its IPv4 form); :func:`address_in` checks it against networks from
:func:`parse_networks`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def token_ok(given: str | None, expected: str | None) -> bool:
    """Does ``given`` match the configured token (None/empty = no token needed)?

    Constant time: both are hashed first, so neither their contents nor their
    lengths change how long the comparison takes.
    """
    if not expected:
        return True
    if given is None:
        return False
    digest = hashlib.sha256
    return secrets.compare_digest(digest(given.encode()).digest(), digest(expected.encode()).digest())


def parse_networks(specs: Iterable[str]) -> tuple[Network, ...]:
    """``"10.0.0.0/8"``, ``"::1"`` ... as networks (a bare address is a /32 or /128)."""
    return tuple(ipaddress.ip_network(s, strict=False) for s in specs)


def parse_address(text: str) -> Address | None:
    """``text`` as an address (IPv4-mapped IPv6 as IPv4), or None if it is not one."""
    try:
        addr = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def address_in(text: str, networks: Iterable[Network]) -> bool:
    """Is ``text`` an address inside one of ``networks``? (Not an address: no.)"""
    addr = parse_address(text)
    return addr is not None and any(addr in net for net in networks)
