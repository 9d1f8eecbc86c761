"""The prefix-warming decisions (llm/prefill.py): pure, no engine, no event loop."""

from __future__ import annotations

import pytest

from llm.base import ChatMessage, PrefillOutcome, PrefillResult
from llm.prefill import (
    PrefillPlanner,
    Prefix,
    SkipPrefill,
    SkipReason,
    StartPrefill,
    conversation_prefix,
    estimate_tokens,
)

SYSTEM = "You are a helpful voice assistant. Answer in one or two short spoken sentences."
HISTORY = (
    ChatMessage("user", "What is the capital of France?"),
    ChatMessage("assistant", "The capital of France is Paris."),
)


def prefix(partial: str = "", history: tuple[ChatMessage, ...] = HISTORY) -> Prefix:
    return conversation_prefix(SYSTEM, history, partial)


def done(request_id: str, outcome: PrefillOutcome = PrefillOutcome.WARMED) -> PrefillResult:
    return PrefillResult(request_id, outcome, 60, 0, 40.0)


@pytest.mark.parametrize(
    ("longer", "shorter", "covers"),
    [
        (prefix(), prefix(), True),
        (prefix("How many"), prefix(), True),  # an open user message extends the closed history
        (prefix("How many days"), prefix("How many"), True),
        (prefix("How many"), prefix("How many days"), False),
        (prefix("How manyfold"), prefix("How many"), False),  # not at a word boundary
        (prefix("How many, days"), prefix("How many"), True),
        (prefix(), prefix("How many"), False),
        (prefix(history=()), prefix(), False),
        (prefix(), prefix(history=()), True),  # more history extends the system prompt alone
        (
            prefix(history=(*HISTORY, ChatMessage("user", "How many days are in a week?"))),
            prefix("How many days"),
            True,  # the finished user message extends its partial
        ),
        (
            prefix(history=(*HISTORY, ChatMessage("user", "Why is the sky blue?"))),
            prefix("How many days"),
            False,
        ),
        (prefix(history=(HISTORY[0], ChatMessage("assistant", "The capital..."))), prefix(), False),
    ],
)
def test_covers(longer: Prefix, shorter: Prefix, covers: bool) -> None:
    assert longer.covers(shorter) is covers


def test_as_messages_leaves_the_partial_as_the_last_user_message() -> None:
    msgs = prefix("How many").as_messages()
    assert msgs[0] == ChatMessage("system", SYSTEM)
    assert msgs[-1] == ChatMessage("user", "How many")
    assert prefix().as_messages()[-1] == HISTORY[-1]
    assert conversation_prefix(SYSTEM, HISTORY, "  How many  ").open_user == "How many"


def test_token_estimate_counts_messages_and_digits() -> None:
    assert estimate_tokens("abcd") == 1 and estimate_tokens("12") == 2 and estimate_tokens("") == 0
    assert prefix("How many").tokens() > prefix().tokens() > prefix(history=()).tokens()


def test_first_prefill_starts_then_the_same_prefix_is_not_asked_twice() -> None:
    planner = PrefillPlanner(block_tokens=32, tag="t")
    first = planner.want(prefix(), idle=True)
    assert isinstance(first, StartPrefill) and first.abort is None
    assert first.request_id == "prefill-t-1" and list(first.messages) == prefix().as_messages()
    assert planner.want(prefix(), idle=True) == SkipPrefill(SkipReason.IN_FLIGHT)
    planner.finished(done(first.request_id))
    assert planner.warm == prefix() and planner.in_flight is None
    assert planner.want(prefix(), idle=True) == SkipPrefill(SkipReason.WARM)


def test_busy_session_does_not_prefill() -> None:
    planner = PrefillPlanner(block_tokens=32)
    assert planner.want(prefix(), idle=False) == SkipPrefill(SkipReason.BUSY)
    assert planner.in_flight is None


@pytest.mark.parametrize(
    ("partial", "block", "starts"),
    [
        ("How", 32, False),  # a few tokens: no new whole block
        ("How many days are there in a week, and how many hours are in a day, and minutes?", 32, True),
        ("How many days are there in a week, and how many hours are in a day, and minutes?", 128, False),
    ],
)
def test_a_partial_is_prefilled_only_when_it_adds_a_whole_block(
    partial: str, block: int, starts: bool
) -> None:
    planner = PrefillPlanner(block_tokens=block)
    first = planner.want(prefix(), idle=True)
    if isinstance(first, StartPrefill):
        planner.finished(done(first.request_id))
    else:  # the prefix is shorter than one block: nothing can be cached
        assert first == SkipPrefill(SkipReason.NO_NEW_BLOCK)
        planner.warm = prefix()
    action = planner.want(prefix(partial), idle=True)
    assert isinstance(action, StartPrefill) is starts
    if not starts:
        assert action == SkipPrefill(SkipReason.NO_NEW_BLOCK)


def test_a_prefix_shorter_than_a_block_is_not_worth_it() -> None:
    planner = PrefillPlanner(block_tokens=128)
    assert planner.want(prefix(history=()), idle=True) == SkipPrefill(SkipReason.NO_NEW_BLOCK)


def test_a_stale_prefill_in_flight_is_aborted_by_the_next() -> None:
    planner = PrefillPlanner(block_tokens=16)
    first = planner.want(prefix("How many days are there in a week"), idle=True)
    assert isinstance(first, StartPrefill)
    # the partial was revised: the one in flight no longer helps
    second = planner.want(prefix("Why is the sky blue on a clear summer day"), idle=True)
    assert isinstance(second, StartPrefill) and second.abort == first.request_id
    planner.finished(done(first.request_id, PrefillOutcome.ABORTED))  # the stale one ends: ignored
    assert planner.in_flight is not None and planner.in_flight[1] == second.request_id
    planner.finished(done(second.request_id))
    assert planner.warm == prefix("Why is the sky blue on a clear summer day")


def test_an_aborted_or_failed_prefill_warms_nothing() -> None:
    for outcome in (PrefillOutcome.ABORTED, PrefillOutcome.FAILED):
        planner = PrefillPlanner(block_tokens=32)
        action = planner.want(prefix(), idle=True)
        assert isinstance(action, StartPrefill)
        planner.finished(done(action.request_id, outcome))
        assert planner.warm is None and planner.in_flight is None
        assert isinstance(planner.want(prefix(), idle=True), StartPrefill)  # asked again


def test_a_real_request_supersedes_the_prefill_in_flight() -> None:
    planner = PrefillPlanner(block_tokens=32)
    assert planner.request_started() is None
    action = planner.want(prefix(), idle=True)
    assert isinstance(action, StartPrefill)
    assert planner.request_started() == action.request_id
    assert planner.in_flight is None
    planner.finished(done(action.request_id, PrefillOutcome.ABORTED))
    assert planner.warm is None


def test_cancelled_prefill_is_forgotten() -> None:
    planner = PrefillPlanner(block_tokens=32)
    action = planner.want(prefix(), idle=True)
    assert isinstance(action, StartPrefill)
    planner.cancelled(action.request_id)
    assert planner.in_flight is None and planner.warm is None


def test_after_the_turn_the_new_history_extends_the_warm_partial() -> None:
    planner = PrefillPlanner(block_tokens=32)
    a = planner.want(prefix(), idle=True)
    assert isinstance(a, StartPrefill)
    planner.finished(done(a.request_id))
    question = "How many days are there in a week, and how many hours does each of them have?"
    b = planner.want(prefix(question[:40].rsplit(" ", 1)[0]), idle=True)
    if isinstance(b, StartPrefill):
        planner.finished(done(b.request_id))
    reply = "There are seven days in a week, and every one of them has twenty-four hours."
    history = (*HISTORY, ChatMessage("user", question), ChatMessage("assistant", reply))
    c = planner.want(prefix(history=history), idle=True)
    assert isinstance(c, StartPrefill)  # new whole blocks: the question's end and the reply
    planner.finished(done(c.request_id))
    assert planner.warm is not None and planner.warm.covers(prefix())


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_tokens"):
        PrefillPlanner(block_tokens=0)


def test_a_reply_heard_to_its_end_leaves_its_history_warm() -> None:
    planner = PrefillPlanner(block_tokens=32, tag="t")
    planner.served(prefix())  # the request and its generation put system + history in the cache
    assert planner.want(prefix(), idle=True) == SkipPrefill(SkipReason.WARM)
    assert planner.want(prefix(history=HISTORY[:1]), idle=True) == SkipPrefill(SkipReason.WARM)
    planner.served(prefix(history=()))  # a shorter one does not forget the longer warm prefix
    assert planner.warm == prefix()
