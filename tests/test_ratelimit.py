"""The per-client rate limit on new sessions and the client address rules (pure, fake clock)."""

from __future__ import annotations

import pytest

from voice_pipeline.access import address_in, parse_networks
from voice_pipeline.server.ratelimit import Admission, RateLimiter, client_address, client_key

S = 1_000_000_000


def test_a_client_gets_limit_sessions_per_window_then_waits_for_the_oldest() -> None:
    rl = RateLimiter(3, window_ns=60 * S)
    assert [rl.admit("a", t * S).allowed for t in (0, 10, 20)] == [True, True, True]
    refused = rl.admit("a", 30 * S)
    assert refused == Admission(False, 30 * S)  # the session at t=0 leaves the window at t=60
    assert refused.retry_after_s == 30
    assert not rl.admit("a", 59 * S).allowed  # refusals are not counted, but do not help either
    assert rl.admit("a", 60 * S + 1).allowed  # a sliding window, not a fixed minute
    assert not rl.admit("a", 61 * S).allowed
    assert rl.admit("a", 71 * S).allowed


def test_clients_have_separate_budgets() -> None:
    rl = RateLimiter(1)
    assert rl.admit("a", 0).allowed
    assert not rl.admit("a", 1).allowed
    assert rl.admit("b", 2).allowed


def test_zero_means_no_limit_and_remembers_nothing() -> None:
    rl = RateLimiter(0)
    assert all(rl.admit("a", i).allowed for i in range(1000))
    assert len(rl) == 0


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert Admission(False, 1).retry_after_s == 1
    assert Admission(False, 1_500_000_000).retry_after_s == 2
    assert Admission(False, 3 * S).retry_after_s == 3


def test_memory_is_bounded_by_max_keys_least_recently_seen_forgotten() -> None:
    rl = RateLimiter(1, window_ns=60 * S, max_keys=100)
    for i in range(10_000):
        assert rl.admit(f"10.0.{i // 256}.{i % 256}", i).allowed
        assert len(rl) <= 100
    assert not rl.admit("10.0.39.15", 10_001).allowed  # recent: still remembered


def test_keys_whose_window_passed_are_dropped() -> None:
    rl = RateLimiter(5, window_ns=60 * S)
    for i in range(50):
        rl.admit(f"k{i}", i * S)
    assert len(rl) == 50
    rl.admit("late", 200 * S)
    assert len(rl) == 1


def test_bad_parameters_are_refused() -> None:
    for kwargs in ({"limit": -1}, {"limit": 1, "window_ns": 0}, {"limit": 1, "max_keys": 0}):
        with pytest.raises(ValueError):
            RateLimiter(**kwargs)


PROXIES = parse_networks(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("peer", "xff", "client"),
    [
        ("203.0.113.5", None, "203.0.113.5"),
        ("203.0.113.5", "198.51.100.7", "203.0.113.5"),  # not a trusted proxy: header ignored
        ("10.0.0.2", None, "10.0.0.2"),
        ("10.0.0.2", "198.51.100.7", "198.51.100.7"),
        ("10.0.0.2", "1.2.3.4, 198.51.100.7", "198.51.100.7"),  # the client prepended a lie
        ("10.0.0.2", "198.51.100.7, 10.0.0.9", "198.51.100.7"),  # two proxies
        ("10.0.0.2", "10.0.0.8, 10.0.0.9", "10.0.0.8"),  # all proxies: the first
        ("10.0.0.2", "1.2.3.4, garbage", "10.0.0.2"),  # the proxy's own entry is garbage
        ("::1", "2001:db8::1", "2001:db8::1"),
        ("::ffff:10.0.0.2", "198.51.100.7", "198.51.100.7"),  # IPv4-mapped peer
        ("10.0.0.2", "[2001:db8::1]", "[2001:db8::1]"),
    ],
)
def test_client_address_trusts_forwarded_for_only_from_trusted_proxies(
    peer: str, xff: str | None, client: str
) -> None:
    assert client_address(peer, xff, PROXIES) == client


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert client_address("127.0.0.1", "198.51.100.7", ()) == "127.0.0.1"


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("198.51.100.7", "198.51.100.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("[2001:db8:1:3::1]", "2001:db8:1:3::/64"),
        ("::ffff:198.51.100.7", "198.51.100.7"),
        ("not-an-address", "not-an-address"),
    ],
)
def test_client_key_groups_ipv6_by_its_64(address: str, key: str) -> None:
    assert client_key(address) == key


@pytest.mark.parametrize(
    ("address", "inside"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.1.2.3", True),
        ("192.168.1.1", False),
        ("", False),
        ("nonsense", False),
    ],
)
def test_address_in_networks(address: str, inside: bool) -> None:
    assert address_in(address, parse_networks(["127.0.0.1/32", "::1/128", "10.0.0.0/8"])) is inside
