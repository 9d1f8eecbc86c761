"""Fixed phrases (voice_pipeline/conversation/phrases.py), on the fake TTS: synthesized once
at the listener's rate; a failure is raised by ``get``, logged by ``try_get`` and
``prepare``, and the phrase is tried again on its next use."""

from __future__ import annotations

import pytest
from fakes import FakeTTS

from voice_pipeline.conversation.phrases import Phrases

RATE = 16000
TEXT = "One moment."


async def test_a_phrase_is_synthesized_once_at_the_listener_s_rate() -> None:
    tts = FakeTTS()
    phrases = Phrases(tts, RATE)
    first = await phrases.get(TEXT)
    assert await phrases.get(TEXT) is first
    assert tts.texts == [TEXT]
    assert len(first) == round(tts.samples_for(TEXT) * RATE / tts.sample_rate_hz)


async def test_a_failed_phrase_is_tried_again() -> None:
    tts = FakeTTS()
    tts.error = RuntimeError("no voice")
    phrases = Phrases(tts, RATE)
    with pytest.raises(RuntimeError, match="no voice"):
        await phrases.get(TEXT)
    assert await phrases.try_get(TEXT) is None
    await phrases.prepare(TEXT)  # logged, not raised
    tts.error = None
    pcm = await phrases.try_get(TEXT)
    assert pcm is not None and pcm.size > 0
    assert tts.texts == [TEXT] * 4
