"""Pure decisions behind the fault handling: the LLM's health and retry backoff, and the
conversation history's token budget. No event loop, no models."""

from __future__ import annotations

import asyncio

import pytest
from test_server_transport import FakeSocket

from llm.base import ChatMessage, HealthTracker, LLMHealth
from voice_pipeline.conversation.history import (
    MESSAGE_OVERHEAD_TOKENS,
    estimate_tokens,
    fit_history,
    message_tokens,
    request_budget,
)
from voice_pipeline.edge.outbound import Outbound

S = 1_000_000_000


# ---------------------------------------------------------------- health and backoff


def test_a_new_tracker_is_healthy_and_never_waits() -> None:
    tracker = HealthTracker(0.5, 4.0)
    assert tracker.health(0) == LLMHealth(ok=True)
    assert tracker.wait_s(0) == 0.0


@pytest.mark.parametrize(
    ("failures", "expected_wait_s"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (40, 4.0)],
)
def test_backoff_doubles_per_consecutive_failure_up_to_the_max(failures: int, expected_wait_s: float) -> None:
    tracker = HealthTracker(0.5, 4.0)
    for _ in range(failures):
        tracker.failed(10 * S, "refused")
    assert tracker.wait_s(10 * S) == pytest.approx(expected_wait_s)
    assert tracker.health(10 * S) == LLMHealth(False, "refused", failures, expected_wait_s)


def test_the_wait_runs_out_but_health_stays_degraded_until_a_success() -> None:
    tracker = HealthTracker(0.5, 4.0)
    tracker.failed(10 * S, "stalled")
    assert tracker.wait_s(10 * S + S // 4) == pytest.approx(0.25)
    assert tracker.wait_s(11 * S) == 0.0  # the next request is tried for real
    assert tracker.health(11 * S) == LLMHealth(False, "stalled", 1, 0.0)
    tracker.failed(11 * S, "stalled again")  # that try failed too: twice as long
    assert tracker.wait_s(11 * S) == pytest.approx(1.0)
    tracker.succeeded()
    assert tracker.health(11 * S) == LLMHealth(ok=True)
    assert tracker.wait_s(11 * S) == 0.0
    tracker.failed(20 * S, "refused")  # a new outage starts from the initial wait
    assert tracker.wait_s(20 * S) == pytest.approx(0.5)


@pytest.mark.parametrize("after_ns", [1, 400_000, 600_000, S // 4 + 1, S // 2 - 1])
def test_sleeping_out_the_retry_time_health_gives_always_ends_the_backoff(after_ns: int) -> None:
    """``retry_in_s`` is rounded up to the ms: a caller who sleeps it is never refused (the
    nearest ms once sent a test back 0.4 ms early, "next try in 0.0 s")."""
    tracker = HealthTracker(0.5, 4.0)
    tracker.failed(10 * S, "stalled")
    now = 10 * S + after_ns
    retry_in_s = tracker.health(now).retry_in_s
    assert 0 < retry_in_s <= tracker.wait_s(now) + 0.001
    assert tracker.wait_s(now + round(retry_in_s * S)) == 0.0


# ---------------------------------------------------------------- token estimate


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("17 times 23", 6), ("What is the capital of France?", 8)],
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_message_tokens_include_the_chat_template() -> None:
    assert message_tokens(ChatMessage("user", "abcd")) == 1 + MESSAGE_OVERHEAD_TOKENS


# ---------------------------------------------------------------- history budget


def u(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def a(text: str) -> ChatMessage:
    return ChatMessage("assistant", text)


def ten(message: ChatMessage) -> int:
    """Every message costs 10 tokens: budgets below count messages."""
    return 10


HISTORY = [u("q1"), a("r1"), u("q2"), u("q3"), a("r3..."), u("q4"), a("r4")]


@pytest.mark.parametrize(
    ("budget", "kept"),
    [
        (1000, HISTORY),
        (70, HISTORY),
        (69, HISTORY[2:]),  # the oldest whole turn goes first
        (50, HISTORY[2:]),
        (49, HISTORY[3:]),  # q2 had no heard reply: a turn of one message
        (40, HISTORY[3:]),
        (39, HISTORY[5:]),
        (20, HISTORY[5:]),
        (19, []),  # never half a turn
        (0, []),
        (-5, []),
    ],
)
def test_fit_history_keeps_the_most_recent_whole_turns(budget: int, kept: list[ChatMessage]) -> None:
    assert fit_history(HISTORY, budget, ten) == kept


def test_fit_history_with_the_default_estimate() -> None:
    history = [u("What is the capital of France?"), a("The capital of France is Paris.")]
    cost = sum(message_tokens(m) for m in history)
    assert fit_history(history, cost) == history
    assert fit_history(history, cost - 1) == []


def test_a_leading_assistant_message_is_a_turn_of_its_own() -> None:
    assert fit_history([a("hello"), u("q"), a("r")], 20, ten) == [u("q"), a("r")]


def test_request_budget_leaves_room_for_system_prompt_new_message_and_generation_prompt() -> None:
    system, user = ChatMessage("system", "x" * 40), u("y" * 8)
    assert request_budget(100, system, user) == 100 - (10 + 5) - (2 + 5) - 3
    assert request_budget(10, system, user) < 0


# ---------------------------------------------------------------- the bounded send queue


async def test_outbound_counts_the_bytes_it_holds_and_drops_them_on_overflow() -> None:
    sock = FakeSocket()
    sock.open.clear()  # a client that stopped reading: send() never returns
    out = Outbound(sock, max_events=4, max_audio_samples=1000)
    out.start()
    out.put_audio(1, "h" * 10, b"\x00" * 200, 100)
    out.send_text("abc")
    out.put_audio(2, "h" * 10, b"\x00" * 400, 200)
    assert out.queued_bytes == 210 + 3 + 410 and out.events_queued == 1
    await asyncio.sleep(0.01)  # the writer took the first item and is stuck sending it
    assert out.queued_bytes == 3 + 410
    assert out.drop_audio(2) == 200
    assert out.queued_bytes == 3
    for i in range(4):
        out.send_text(f"e{i}")  # the fifth event overflows: everything is dropped
    assert out.overflowed and out.queued_bytes == 0 and out.events_queued == 0
    await out.aclose()
    assert sock.closed is not None and sock.closed[0] == 1008
