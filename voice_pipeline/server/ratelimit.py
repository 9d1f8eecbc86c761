"""Per-client rate limit on new sessions, and which address a client has. Pure: no I/O, no clock.

(The address and token checks themselves are :mod:`voice_pipeline.access`'s, shared
with the telephony bridges.)

:class:`RateLimiter` is a sliding-window log: a client (a key) may start at most
``limit`` sessions in any ``window_ns``; the caller passes the time. Memory is
bounded: a key holds at most ``limit`` timestamps, keys whose window has passed
are dropped (lazily, from the least recently seen), and beyond ``max_keys`` the
least recently seen key is forgotten.

:func:`client_address` decides who the client is: the TCP peer, or -- only when
that peer is a configured trusted proxy -- the right-most address of its
``X-Forwarded-For`` that is not itself a trusted proxy (a client can prepend
anything it likes to that header, but cannot change what the proxy appends).
:func:`client_key` folds an IPv6 address to its /64 (one home or host usually
has a whole /64, so its addresses share one budget) and an IPv4-mapped IPv6
address to its IPv4 form.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict, deque
from dataclasses import dataclass

from voice_pipeline.access import Network, address_in, parse_address

WINDOW_NS = 60_000_000_000
MAX_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    #: when not allowed: how long until the oldest session of the window leaves it
    retry_after_ns: int = 0

    @property
    def retry_after_s(self) -> int:
        """For a ``Retry-After`` header: whole seconds, at least 1."""
        return max(1, -(-self.retry_after_ns // 1_000_000_000))


class RateLimiter:
    """At most ``limit`` admissions per key in any ``window_ns`` (``limit`` 0 = no limit)."""

    def __init__(self, limit: int, *, window_ns: int = WINDOW_NS, max_keys: int = MAX_KEYS) -> None:
        if limit < 0 or window_ns <= 0 or max_keys < 1:
            raise ValueError("limit >= 0, window_ns > 0 and max_keys >= 1")
        self.limit = limit
        self.window_ns = window_ns
        self.max_keys = max_keys
        self._log: OrderedDict[str, deque[int]] = OrderedDict()  # least recently seen first

    def __len__(self) -> int:
        """Keys remembered now."""
        return len(self._log)

    def admit(self, key: str, now_ns: int) -> Admission:
        """May ``key`` start a session at ``now_ns``? If so, it is counted."""
        if self.limit == 0:
            return Admission(True)
        self._expire(now_ns)
        times = self._log.get(key)
        if times is None:
            times = self._log[key] = deque()
            while len(self._log) > self.max_keys:
                self._log.popitem(last=False)
        else:
            self._log.move_to_end(key)
            while times and times[0] <= now_ns - self.window_ns:
                times.popleft()
        if len(times) >= self.limit:
            return Admission(False, times[0] + self.window_ns - now_ns)
        times.append(now_ns)
        return Admission(True)

    def _expire(self, now_ns: int) -> None:
        """Forget keys whose last session left the window (from the least recently seen
        on, amortised O(1)), and the timestamps that left the window of each key seen."""
        start = now_ns - self.window_ns
        while self._log:
            key, times = next(iter(self._log.items()))
            if times and times[-1] > start:
                break
            del self._log[key]


def client_address(peer: str, forwarded_for: str | None, trusted_proxies: tuple[Network, ...]) -> str:
    """The client's address: ``peer`` unless it is a trusted proxy that says who it forwards."""
    if not forwarded_for or not address_in(peer, trusted_proxies):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",")]
    for hop in reversed(hops):
        if parse_address(hop) is None:
            return peer  # the proxy's own entry is garbage: trust nothing from it
        if not address_in(hop, trusted_proxies):
            return hop
    return hops[0]  # every hop is a trusted proxy: the first is the client


def client_key(address: str) -> str:
    """The rate-limit key of an address: IPv4 as is, IPv6 by its /64."""
    addr = parse_address(address)
    if addr is None:
        return address
    if isinstance(addr, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)
