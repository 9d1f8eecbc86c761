"""The assistant does not repeat itself, with the real models.

SmolLM2-135M decoding greedily falls into loops: asked "What are the days of the week?" it
said the week over and over until its token limit, 25 s of speech (session 34, both CPU
classes). The reply's guard (voice_pipeline/conversation/repetition.py) stops a reply before
it says a run of seven words, or a sentence, a second time. (vLLM's repetition penalty, 1.1,
also ended the loops, but it penalizes the history too and changed a follow-up's answer, so
it is off by default: README, "A reply that repeats itself".)

The loop is checked on a typed question over /v1/realtime (the official openai SDK as the
client; Whisper tiny.en hears espeak's "days of the week" as "games" or "name of the week",
and the model does not loop on those), and a spoken question is checked too. What the
listener heard is transcribed back by Whisper.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pytest
from rtclient import realtime, user_message
from servers import running_server
from speech import concat, espeak, repeated_run, silence, word_error_rate
from test_e2e_realtime import said, transcript_of

from voice_pipeline import events as ev
from voice_pipeline.audio import resample, to_float32
from voice_pipeline.runner import run_audio

if TYPE_CHECKING:
    from asr.base import ASREngine
    from voice_pipeline.config import Config
    from voice_pipeline.engines import Engines

pytestmark = pytest.mark.real_models

RATE = 16000
QUESTION = "What are the days of the week?"


async def test_a_loop_is_cut_before_it_goes_round_again(
    engines: Engines, config: Config, whisper: ASREngine
) -> None:
    assert config.llm.repetition_penalty == 1.0  # the default: the model loops on this question
    user = user_message(QUESTION)
    async with running_server(engines, config) as srv, realtime(srv) as rt:
        await rt.wait_type("session.created")
        await rt.send({"type": "conversation.item.create", "item": user})
        await rt.send({"type": "response.create"})
        done = await rt.wait_type("response.done")
        record = (await rt.wait_type("voice_pipeline.turn.latency")).record
        await asyncio.sleep(0.05)
        assert engines.llm.unfinished_requests() == 0  # the request was stopped
    assert done.response.status == "completed"
    llm_said, words = record["assistant_text"], transcript_of(done)
    assert repeated_run(llm_said), llm_said  # the model did loop ...
    assert done.response.usage.output_tokens < config.llm.max_tokens  # ... and was stopped early
    assert repeated_run(words) is None, words  # ... the listener did not hear it go round again
    assert words == record["heard_text"] and "monday" in words.lower() and "sunday" in words.lower()
    back = whisper.transcribe(said(rt, done.response.id)).text
    assert word_error_rate(words, back) <= 0.35, (words, back)  # speech, and no more than that


async def test_a_text_only_loop_is_cut_too(engines: Engines, config: Config) -> None:
    """Text only (``output_modalities: ["text"]``): the text streams as it comes, so the clause
    that shows the loop going round again is out; the request stops there, short of its limit
    (it ran to it before: "The days of the week are: Monday, ..., Sunday, Monday, ..., Sunday,
    Monday, Wednesday" was 22 words of text when the guard stopped it, native AVX-512 BF16)."""
    user = user_message(QUESTION)
    async with running_server(engines, config) as srv, realtime(srv) as rt:
        await rt.wait_type("session.created")
        await rt.send({"type": "conversation.item.create", "item": user})
        await rt.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        done = await rt.wait_type("response.done")
        record = (await rt.wait_type("voice_pipeline.turn.latency")).record
        await asyncio.sleep(0.05)
        assert engines.llm.unfinished_requests() == 0  # the request was stopped
    assert done.response.status == "completed" and not rt.of("response.output_audio.delta")
    shown = "".join(e.delta for e in rt.of("response.output_text.delta"))
    assert shown == record["assistant_text"] and repeated_run(shown), shown  # it looped, and showed it
    assert "monday" in shown.lower() and "sunday" in shown.lower(), shown
    assert done.response.usage.output_tokens < config.llm.max_tokens  # ... and was stopped early


async def test_a_spoken_request_gets_a_reply_that_does_not_repeat_itself(
    engines: Engines, config: Config, whisper: ASREngine
) -> None:
    events: list[ev.Event] = []
    audio = concat(silence(0.5), espeak(QUESTION, voice="en-gb+m1"), silence(6.0))
    result = await asyncio.wait_for(run_audio(engines, config, audio, RATE, on_event=events.append), 120)
    await asyncio.sleep(0.05)
    assert engines.llm.unfinished_requests() == 0
    (turn,) = result.records
    (generated,) = [e for e in events if isinstance(e, ev.ReplyGenerated)]
    assert turn.heard_text and not generated.token_limit, turn.assistant_text
    assert repeated_run(turn.heard_text) is None, turn.heard_text
    pcm = resample(to_float32(result.output), result.output_rate_hz, RATE)
    back = whisper.transcribe(pcm.astype(np.float32)).text
    assert word_error_rate(turn.heard_text, back) <= 0.35, (turn.heard_text, back)
