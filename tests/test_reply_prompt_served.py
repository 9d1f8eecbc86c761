"""How the reply's LLM request was served (prompt tokens, cached tokens, prefill ms): from the
engine's first delta through :class:`Reply` into the ledger's record.

The session copies :attr:`Reply.llm_first` into its turn's ledger with
``TurnLedger.llm_request`` when the turn finishes; these tests do the same by hand.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from fakes import FakeLLM, FakeTTS

from llm.base import ChatMessage, LLMDelta
from voice_pipeline.clock import now_ns
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, BudgetConfig, Config
from voice_pipeline.conversation.phrases import Phrases
from voice_pipeline.conversation.reply import Reply, ReplySpeaker
from voice_pipeline.conversation.wiring import reply_deps
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import Mark, TurnLedger
from voice_pipeline.runner import FileTransport, MediaClock

QUESTION = [
    ChatMessage("system", DEFAULT_SYSTEM_PROMPT),
    ChatMessage("user", "What is the capital of France?"),
]


def _reply(engines: Engines, cfg: Config, ledger: TurnLedger) -> Reply:
    clock = MediaClock(False, 16000, now_ns())
    transport = FileTransport(engines.tts.sample_rate_hz, clock, lambda e: None)
    speaker = ReplySpeaker(1, transport, lambda pcm: None, lambda: None)

    async def sleep_until(t_ns: int) -> None:
        return None

    phrases = Phrases(engines.tts, transport.output_rate_hz)
    deps = reply_deps(engines, cfg, transport, now_ns, sleep_until, phrases)
    return Reply(1, deps, speaker, ledger.mark, ledger.compute)


def test_the_record_carries_the_prompt_figures() -> None:
    led = TurnLedger(1, BudgetConfig())
    led.llm_request(49, 32, 71.25)
    led.llm_request(10, 0, 1.0)  # the first call wins
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1.0)
    assert (rec.llm_prompt_tokens, rec.llm_cached_tokens, rec.llm_prefill_ms) == (49, 32, 71.25)
    llm = {"prefetched": False, "prompt_tokens": 49, "cached_tokens": 32, "prefill_ms": 71.2}
    assert rec.as_dict()["llm"] == llm
    empty = TurnLedger(2, BudgetConfig()).finish(
        user_text="", assistant_text="", heard_text="", interrupted=False, audio_heard_s=0.0
    )
    assert empty.as_dict()["llm"] == {"prefetched": False, "prompt_tokens": None, "cached_tokens": None,
                                      "prefill_ms": None}  # fmt: skip


class TrailingUsageLLM(FakeLLM):
    """Like a vLLM server: the cached count comes last, on a delta with no text or tokens."""

    async def _stream(  # type: ignore[override]
        self, request_id: str, deltas: list[str], *args: object, **kw: object
    ) -> AsyncGenerator[LLMDelta, None]:
        yield LLMDelta("Rome", 1, prompt_tokens=50, cached_tokens=None, prefill_ms=80.0)
        yield LLMDelta(" is the capital.", 3)
        yield LLMDelta("", 0, prompt_tokens=50, cached_tokens=32, prefill_ms=80.0)


async def test_a_figures_only_delta_is_recorded_but_not_spoken() -> None:
    llm, tts = TrailingUsageLLM(), FakeTTS()
    engines = Engines(vad=None, asr=None, llm=llm, tts=tts)  # type: ignore[arg-type]
    led = TurnLedger(1, BudgetConfig())
    reply = _reply(engines, Config(), led)
    await reply.run(QUESTION)
    assert reply.text == "Rome is the capital." and reply.llm_tokens == 4
    assert reply.llm_first is not None and reply.llm_first.cached_tokens == 32
    assert tts.texts == ["Rome is the capital."]


@pytest.mark.real_models
async def test_the_real_engine_reports_the_cached_system_prompt(engines: Engines, config: Config) -> None:
    led = TurnLedger(1, config.budget)
    led.mark(Mark.TRANSCRIPT_FINAL, now_ns())
    reply = _reply(engines, config, led)
    await reply.run(QUESTION)
    first = reply.llm_first
    assert first is not None and first.prefill_ms is not None
    led.llm_request(first.prompt_tokens, first.cached_tokens, first.prefill_ms)  # as the session does
    rec = led.finish(user_text="q", assistant_text=reply.text, heard_text=reply.text, interrupted=False,
                     audio_heard_s=0.0)  # fmt: skip
    llm = rec.as_dict()["llm"]
    assert isinstance(llm, dict)
    print(f"\nreal reply: {llm}")
    assert llm["prompt_tokens"] is not None and llm["prompt_tokens"] > 32
    # the warm-up sent the system prompt: its whole 32-token block is in the prefix cache
    assert llm["cached_tokens"] is not None and llm["cached_tokens"] >= 32
    assert 0 < llm["prefill_ms"] < 10_000
    assert "Paris" in reply.text
