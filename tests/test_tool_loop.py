"""The tool loop in a reply, on fakes: the LLM calls a server-side tool, the tool runs
beside the reply, its result goes back to the LLM and the answer is spoken; parallel
calls, timeouts, failures, malformed arguments, the filler, and barge-in with
``cancel_on_interruption`` both ways (the history stays consistent)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncGenerator, Coroutine, Sequence
from typing import Any

import pytest
import tool_fixtures
from fakes import FakeLLM, Fakes, FakeTTS, LLMRequest, word_deltas
from harness import REPLY, base_config, make_harness, no_continuation
from polling import until

from llm.base import ChatMessage, LLMDelta, ToolCallDelta, ToolMode, ToolOffer
from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.config import BudgetConfig, Config
from voice_pipeline.conversation.history import History
from voice_pipeline.conversation.phrases import Phrases
from voice_pipeline.conversation.reply import Reply, ReplyOptions, ReplySpeaker
from voice_pipeline.conversation.wiring import reply_deps
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError
from voice_pipeline.ledger.ledger import Mark, TurnLedger
from voice_pipeline.ledger.records import StageName
from voice_pipeline.runner import FileTransport, MediaClock
from voice_pipeline.tools.loop import CANCELLED, STILL_RUNNING
from voice_pipeline.tools.runner import ToolBox

QUESTION = [ChatMessage("system", "Be brief."), ChatMessage("user", "What is the weather in Paris?")]


class ToolLLM(FakeLLM):
    """Calls ``calls`` (name, JSON arguments; ``{n}`` in them: the request's number) when
    offered tools it may call, and else answers with the tool messages it was given
    ("Here it is: ...")."""

    def __init__(self, calls: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.calls = list(calls)
        self.offers: list[ToolOffer | None] = []

    def stream(  # type: ignore[override]
        self, messages: Sequence[ChatMessage], request_id: str, tools: ToolOffer | None = None
    ) -> AsyncGenerator[LLMDelta, None]:
        self.requests.append(LLMRequest(request_id, tuple(messages)))
        self.offers.append(tools)
        if tools is not None and tools.mode is not ToolMode.NONE and self.calls:
            return self._call(request_id)
        outputs = [m.content for m in messages if m.role == "tool"]
        answer = f"Here it is: {' and '.join(outputs)}" if outputs else self.reply
        return self._stream(request_id, word_deltas(answer), self._hold_after, self.fail_after)

    async def _call(self, request_id: str) -> AsyncGenerator[LLMDelta, None]:
        self.started.append(request_id)
        for i, (name, pattern) in enumerate(self.calls):
            args = pattern.replace("{n}", str(len(self.offers)))  # each call in two pieces, like vLLM
            yield LLMDelta("", 1, 12, 0, 1.0, tool_calls=(ToolCallDelta(i, f"call_{i}", name, args[:4]),))
            yield LLMDelta("", 1, tool_calls=(ToolCallDelta(i, None, None, args[4:]),))
        self.finished.append(request_id)


class Scope:
    """Stands in for the session's scope: owns the calls that outlive a barge-in."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.late: list[tuple[str, str]] = []

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task


def _cfg(*tools: str, **dialogue: Any) -> Config:
    cfg = Config()
    d = dataclasses.replace(cfg.dialogue, tools=tools, **{"tool_filler_after_ms": 0, **dialogue})
    return dataclasses.replace(cfg, dialogue=d)


def _reply(
    llm: FakeLLM, cfg: Config, scope: Scope, events: list[ev.Event], tts: FakeTTS | None = None
) -> tuple[Reply, TurnLedger]:
    engines = Engines(vad=None, asr=None, llm=llm, tts=tts or FakeTTS())  # type: ignore[arg-type]
    clock = MediaClock(False, 16000, now_ns())
    transport = FileTransport(engines.tts.sample_rate_hz, clock, events.append)
    speaker = ReplySpeaker(1, transport, lambda pcm: None, lambda: None)

    async def sleep_until(t_ns: int) -> None:
        return None

    box = ToolBox.of(cfg.dialogue, scope.spawn, lambda cid, out: scope.late.append((cid, out)))
    phrases = Phrases(engines.tts, transport.output_rate_hz)
    deps = reply_deps(engines, cfg, transport, now_ns, sleep_until, phrases, box)
    led = TurnLedger(1, BudgetConfig())
    return Reply(1, deps, speaker, led.mark, led.compute), led


def _results(events: list[ev.Event]) -> list[ev.ToolResult]:
    return [e for e in events if isinstance(e, ev.ToolResult)]


async def test_the_llm_calls_a_tool_then_speaks_its_result() -> None:
    llm = ToolLLM([("get_weather", '{"city": "Paris"}')])
    tts = FakeTTS()
    events: list[ev.Event] = []
    reply, led = _reply(llm, _cfg("tool_fixtures:get_weather", tool_choice="required"), Scope(), events, tts)
    await reply.run(QUESTION)
    assert reply.text == f"Here it is: {tool_fixtures.WEATHER}"
    assert " ".join(tts.texts) == reply.text  # spoken
    # the first round must call (required), the second is words only: else it would loop
    assert [o.mode if o else None for o in llm.offers] == [ToolMode.REQUIRED, ToolMode.NONE]
    second = llm.requests[1].messages
    assert second[:2] == tuple(QUESTION)
    assert second[2].role == "assistant" and second[2].tool_calls[0].name == "get_weather"
    assert second[3] == ChatMessage("tool", tool_fixtures.WEATHER, tool_call_id="call_0")
    assert [(r.call_id, r.output, r.error) for r in _results(events)] == [
        ("call_0", tool_fixtures.WEATHER, None)
    ]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [(d.name, json.loads(d.arguments)) for d in done] == [("get_weather", {"city": "Paris"})]
    assert [m.role for m in reply.tool_messages()] == ["assistant", "tool"]
    assert reply.heard(10**9, interrupted=False) == reply.text
    for mark in (Mark.TOOL_START, Mark.TOOL_DONE, Mark.FIRST_CLAUSE):
        assert led.has(mark)
    assert led.get(Mark.TOOL_DONE) <= led.get(Mark.FIRST_CLAUSE)  # type: ignore[operator]
    assert StageName.TOOL in led.stages_ms() and StageName.FIRST_CLAUSE not in led.stages_ms()


async def test_parallel_calls_run_concurrently_and_errors_go_back_to_the_llm() -> None:
    tool_fixtures.gate = asyncio.Event()
    calls = [
        ("slow_lookup", '{"order": 7}'),
        ("get_weather", '{"city": "Paris"'),  # malformed: not JSON
        ("broken", '{"x": 3}'),  # raises
        ("hangs", "{}"),  # times out
        ("nope", "{}"),  # no such tool
        ("get_weather", '{"town": "Paris"}'),  # does not match the schema
    ]
    llm = ToolLLM(calls)
    entries = ("slow_lookup", "get_weather", "broken", "hangs")
    cfg = _cfg(*(f"tool_fixtures:{e}" for e in entries), tool_choice="auto", tool_max_rounds=1)
    events: list[ev.Event] = []
    reply, _ = _reply(llm, cfg, Scope(), events)
    task = asyncio.ensure_future(reply.run(QUESTION))
    await until(lambda: len(_results(events)) >= 5)  # the others finish while slow_lookup waits
    assert not task.done()
    tool_fixtures.gate.set()
    await task
    errors = {r.call_id: r.error for r in _results(events)}
    assert errors["call_0"] is None
    assert (
        errors["call_1"] is not None
        and "malformed arguments: the arguments are not valid JSON" in errors["call_1"]
    )
    assert errors["call_2"] == "the tool failed: RuntimeError: no luck with 3"
    assert errors["call_3"] == "timed out after 0.05 s"
    assert errors["call_4"] is not None and "no tool named 'nope'" in errors["call_4"]
    assert errors["call_5"] is not None and "'city' is missing" in errors["call_5"]
    tool_msgs = [m for m in llm.requests[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == [f"call_{i}" for i in range(6)]
    assert json.loads(tool_msgs[0].content) == {"order": 7, "status": "shipped"}
    assert json.loads(tool_msgs[3].content) == {"error": "timed out after 0.05 s"}
    assert [o.mode if o else None for o in llm.offers] == [ToolMode.AUTO, ToolMode.NONE]  # max rounds


async def test_a_slow_tool_gets_the_filler_spoken() -> None:
    tool_fixtures.gate = asyncio.Event()
    llm = ToolLLM([("slow_lookup", '{"order": 1}')])
    tts = FakeTTS()
    events: list[ev.Event] = []
    cfg = _cfg("tool_fixtures:slow_lookup", tool_filler_after_ms=20)
    reply, led = _reply(llm, cfg, Scope(), events, tts)
    task = asyncio.ensure_future(reply.run(QUESTION))
    await until(lambda: cfg.dialogue.tool_filler_text in tts.texts)
    tool_fixtures.gate.set()
    await task
    assert tts.texts[0] == cfg.dialogue.tool_filler_text
    assert led.has(Mark.FILLER_SENT)
    assert reply.heard(10**9, interrupted=False) == reply.text  # the filler is not the reply's words
    assert reply.text.startswith("Here it is:")


async def test_a_fast_tool_gets_no_filler() -> None:
    llm = ToolLLM([("get_weather", '{"city": "Paris"}')])
    tts = FakeTTS()
    cfg = _cfg("tool_fixtures:get_weather", tool_filler_after_ms=5000)
    reply, _ = _reply(llm, cfg, Scope(), [], tts)
    await reply.run(QUESTION)
    assert cfg.dialogue.tool_filler_text not in tts.texts


@pytest.mark.parametrize("cancel", [True, False])
async def test_barge_in_during_a_tool(cancel: bool) -> None:
    """A cancellable call is cancelled and says so; a call that must finish goes on in the
    session's scope and its result replaces "still running" in the history."""
    tool_fixtures.gate = asyncio.Event()
    tool_fixtures.booked.clear()
    name = "slow_lookup" if cancel else "finish_booking"
    llm = ToolLLM([(name, '{"order": 5}' if cancel else '{"name": "Ann"}')])
    scope, events = Scope(), []
    reply, _ = _reply(llm, _cfg(f"tool_fixtures:{name}"), scope, events)
    task = asyncio.ensure_future(reply.run(QUESTION))
    await until(lambda: reply.tool_rounds)
    await asyncio.sleep(0.01)
    task.cancel()  # the barge-in
    with pytest.raises(asyncio.CancelledError):
        await task
    history = History("sys", 1024)
    history.remember("book it", reply.heard(0, interrupted=True), cut=True, tools=reply.tool_messages())
    tool_msg = history.messages[-1]
    assert tool_msg.role == "tool" and tool_msg.tool_call_id == "call_0"
    if cancel:
        assert not scope.tasks
        assert json.loads(tool_msg.content) == {"error": CANCELLED}
        assert [(r.call_id, r.error) for r in _results(events)] == [("call_0", CANCELLED)]
        return
    assert json.loads(tool_msg.content) == {"status": STILL_RUNNING}
    assert len(scope.tasks) == 1  # owned by the session's scope, not a stray task
    tool_fixtures.gate.set()
    await asyncio.gather(*scope.tasks)
    assert tool_fixtures.booked == ["Ann"]
    assert scope.late == [("call_0", "booked for Ann")]
    for cid, out in scope.late:
        history.resolve(cid, out)
    assert history.messages[-1] == ChatMessage("tool", "booked for Ann", tool_call_id="call_0")
    assert [(r.call_id, r.output, r.error) for r in _results(events)] == [("call_0", "booked for Ann", None)]


async def test_a_sync_tool_runs_in_a_worker_thread_and_auto_rounds_are_capped() -> None:
    """With ``auto`` a model that calls on every round is cut at ``tool_max_rounds``: the
    round after the last one is offered no call (words only)."""
    tool_fixtures.thread_calls.clear()
    llm = ToolLLM([("in_thread", '{"word": "hi{n}"}')])
    reply, _ = _reply(llm, _cfg("tool_fixtures:in_thread", tool_max_rounds=3), Scope(), [])
    await reply.run(QUESTION)
    assert [o.mode if o else None for o in llm.offers] == [ToolMode.AUTO] * 3 + [ToolMode.NONE]
    assert reply.text == "Here it is: HI1 and HI2 and HI3"
    assert [m.role for m in reply.tool_messages()] == ["assistant", "tool"] * 3


async def test_a_model_that_repeats_its_call_is_asked_for_words() -> None:
    """Qwen2.5-Coder-0.5B calls again with the same arguments instead of answering."""
    llm = ToolLLM([("get_weather", '{"city": "Paris"}')])
    reply, _ = _reply(llm, _cfg("tool_fixtures:get_weather", tool_max_rounds=3), Scope(), [])
    await reply.run(QUESTION)
    assert [o.mode if o else None for o in llm.offers] == [ToolMode.AUTO, ToolMode.AUTO, ToolMode.NONE]
    assert len(reply.tool_rounds) == 2


async def test_each_request_has_the_token_limit() -> None:
    """The calls' tokens do not use up the answer's: ``llm.max_tokens`` caps each request."""
    llm = ToolLLM([("get_weather", '{"city": "Paris"}')])
    cfg = _cfg("tool_fixtures:get_weather", tool_choice="required")
    reply, _ = _reply(
        llm, dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, max_tokens=3)), Scope(), []
    )
    await reply.run(QUESTION)
    assert reply.text == "Here it is:"  # 3 tokens of the answer, after the 2 of the call
    assert reply.token_limit and reply.llm_tokens == 5
    assert tool_fixtures.thread_calls and tool_fixtures.thread_calls[0] != "MainThread"


async def test_a_client_s_own_tools_are_not_run() -> None:
    """A reply whose options carry their own offer (a realtime client's functions) ends with
    its calls: the session's tools do not run them."""
    llm = ToolLLM([("get_weather", '{"city": "Paris"}')])
    offer = ToolOffer((), ToolMode.REQUIRED)
    reply, _ = _reply(llm, _cfg("tool_fixtures:get_weather"), Scope(), [])
    await reply.run(QUESTION, options=ReplyOptions(tools=offer))
    assert len(llm.requests) == 1 and reply.tool_calls[0].name == "get_weather" and not reply.tool_rounds


# ---------------------------------------------------------------- the session


async def _session_turn(cancel: bool | None) -> None:
    tool_fixtures.gate = asyncio.Event()
    tool_fixtures.booked.clear()
    name = {None: "get_weather", True: "slow_lookup", False: "finish_booking"}[cancel]
    args = {None: '{"city": "Paris"}', True: '{"order": 5}', False: '{"name": "Bo"}'}[cancel]
    cfg = no_continuation(base_config())
    tools = (f"tool_fixtures:{name}",)
    d = dataclasses.replace(cfg.dialogue, tools=tools, tool_choice="required", tool_filler_after_ms=0)
    llm = ToolLLM([(name, args)])
    llm.reply = REPLY
    h = make_harness(dataclasses.replace(cfg, dialogue=d), Fakes(llm=llm))
    try:
        await h.driver.speak(0.5)
        if cancel is None:
            await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
            roles = [m.role for m in h.session.history]
            assert roles == ["user", "assistant", "tool", "assistant"]
            assert h.session.history[-1].content == f"Here it is: {tool_fixtures.WEATHER}"
            return
        await h.driver.quiet_until(lambda: bool(h.transport.of(ev.ToolCallDone)))
        await asyncio.sleep(0.02)
        await h.driver.speak_until(lambda: bool(h.transport.of(ev.ReplyInterrupted)))  # barge-in
        await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
        first_turn = h.session.history[:3]
        assert [m.role for m in first_turn] == ["user", "assistant", "tool"]
        expected = {"error": CANCELLED} if cancel else {"status": STILL_RUNNING}
        assert json.loads(first_turn[2].content) == expected
        if not cancel:
            tool_fixtures.gate.set()
            await until(lambda: tool_fixtures.booked)
            await h.driver.settle()
            assert h.session.history[2] == ChatMessage("tool", "booked for Bo", tool_call_id="call_0")
    finally:
        tool_fixtures.gate.set()
        await h.session.aclose()
    assert h.session.unfinished_tasks() == 0


@pytest.mark.parametrize("cancel", [None, True, False])
async def test_session_history_keeps_calls_and_results(cancel: bool | None) -> None:
    await _session_turn(cancel)


@pytest.mark.parametrize(("name", "args", "why"), [
    ("hangs", "{}", "hangs: timed out after 0.05 s"),
    ("broken", '{"x": 1}', "broken: the tool failed: RuntimeError: no luck with 1"),
])  # fmt: skip
async def test_a_tool_that_times_out_or_raises_gets_the_apology(name: str, args: str, why: str) -> None:
    """Not a made-up answer: a small model told only the error may invent the value."""
    cfg = no_continuation(base_config())
    d = dataclasses.replace(cfg.dialogue, tools=(f"tool_fixtures:{name}",), tool_choice="required")
    llm = ToolLLM([(name, args)])
    h = make_harness(dataclasses.replace(cfg, dialogue=d), Fakes(llm=llm))
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: bool(h.transport.of(ev.ToolCallDone, 1)))
        # the tool's own timeout (0.05 s) runs on the real clock: on a fast CPU the fake
        # clock's 30 s of silence can be fed in less than that (seen: 46 ms on a Zen 5 EPYC)
        await until(lambda: bool(h.transport.of(ev.ToolResult, 1)))
        await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
        (failed,) = h.transport.of(ev.TurnFailed, 1)
        assert (failed.stage, failed.message, failed.retryable) == ("tool", f"tool call failed: {why}", True)
        assert h.fakes.tts.texts == [cfg.dialogue.apology]  # the apology, and no answer
        assert len(llm.requests) == 1  # the LLM is not asked to answer from the error
        assert h.record(1).failed == "tool"
        assert [(r.error or "").split(":")[0] for r in h.transport.of(ev.ToolResult)] == [why.split(": ")[1]]
    finally:
        await h.session.aclose()


async def test_a_model_s_bad_arguments_go_back_to_it() -> None:
    """The model's own mistake is not a failed turn: it is told, and answers."""
    llm = ToolLLM([("get_weather", '{"town": "Paris"}')])
    events: list[ev.Event] = []
    reply, _ = _reply(llm, _cfg("tool_fixtures:get_weather", tool_choice="required"), Scope(), events)
    await reply.run(QUESTION)
    assert reply.failed_stage is None and len(llm.requests) == 2
    assert "malformed arguments" in reply.text and "'city' is missing" in reply.text


async def test_a_required_round_with_no_call_and_no_words_is_a_failure() -> None:
    """Not a silent turn: the LLM stage failed (the session speaks the apology)."""

    class Mute(ToolLLM):
        async def _call(self, request_id: str) -> AsyncGenerator[LLMDelta, None]:
            yield LLMDelta("", 96)  # ran to its token limit inside the grammar, no call

    reply, _ = _reply(
        Mute([("get_weather", "{}")]), _cfg("tool_fixtures:get_weather", tool_choice="required"), Scope(), []
    )
    with pytest.raises(EngineError, match="made no tool call"):
        await reply.run(QUESTION)
    assert reply.failed_stage == "llm"
