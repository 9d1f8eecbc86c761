"""The client stops sending audio while a voice holds the reply back, with the real models.

A voice heard after the end of a turn, too short yet for the VAD to call speech, holds the
reply's first audio (``Continuation.holds``): it may be the user going on. Here the input
then stops for good -- the last thing sent was the start of an "ah" (a realtime client's
file ending on a breath, a microphone muted mid-sound) -- so no frame will ever say whether
the voice became speech. The hold must still end at its longest and the reply be heard:
before session 28 only a frame let it go, and the reply waited, unheard, for ever.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest
from speech import espeak, normalize

from tts.base import TTS
from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation import clause_audio
from voice_pipeline.conversation import reply as reply_module
from voice_pipeline.conversation import utterance as utterance_module
from voice_pipeline.conversation.clause_audio import ClauseAudio
from voice_pipeline.edge import SessionScope
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.runner import FileTransport, MediaClock
from voice_pipeline.turntaking.ending import Continuation
from voice_pipeline.turntaking.phases import Phase, TurnState

pytestmark = pytest.mark.real_models

RATE = 16000
VOICE_MS = 64  # two VAD frames of "ah": far short of vad.min_speech_ms, so not speech yet


async def test_a_held_reply_is_heard_when_the_input_stops_during_the_voice(
    engines: Engines, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    ah = espeak("ah")
    start = int(np.flatnonzero(np.abs(ah) > 0.02)[0])
    voice = ah[start : start + RATE * VOICE_MS // 1000]
    heard_voice = threading.Event()
    real_holds, real_synth = Continuation.holds, clause_audio.synthesize_clause

    def holds(self: Continuation, t: TurnState, now: int, onset: int | None, min_speech_ms: int) -> bool:
        if onset is not None and t.phase is Phase.REPLYING:
            heard_voice.set()  # the voice after the end that may still become speech
        return real_holds(self, t, now, onset, min_speech_ms)

    def synth(tts: TTS, text: str, clock: Callable[[], int], *, head_first: bool) -> ClauseAudio:
        made = real_synth(tts, text, clock, head_first=head_first)
        heard_voice.wait(timeout=15)  # the reply is ready only once the voice is heard
        return made

    monkeypatch.setattr(Continuation, "holds", holds)
    monkeypatch.setattr(reply_module, "synthesize_clause", synth)
    monkeypatch.setattr(utterance_module, "synthesize_clause", synth)

    records: list[TurnRecord] = []
    ended = asyncio.Event()

    def observe(event: ev.Event) -> None:
        if isinstance(event, ev.EndpointDetected):
            ended.set()
        if isinstance(event, ev.TurnCompleted):
            records.append(event.record)

    t0 = now_ns()
    out_rate = config.audio.output_rate_hz or engines.tts.sample_rate_hz
    transport = FileTransport(out_rate, MediaClock(True, RATE, t0), observe)
    scope = SessionScope(engines, config)
    session = scope.open(transport)
    frame = RATE * config.audio.frame_ms // 1000
    fed = 0

    async def feed(samples: np.ndarray) -> None:  # in real time, as a microphone would
        nonlocal fed
        for i in range(0, len(samples), frame):
            chunk = samples[i : i + frame]
            fed += len(chunk)
            due = t0 + round(fed * 1e9 / RATE)
            await asyncio.sleep(max(0.0, (due - now_ns()) / 1e9))
            await session.push_audio(chunk, due)

    try:
        question = espeak("What is the capital of France?")
        await feed(np.concatenate([np.zeros(RATE // 2, np.float32), question]))
        silence = np.zeros(frame, np.float32)
        for _ in range(round(config.turn.incomplete_silence_ms / config.audio.frame_ms) + 25):
            if ended.is_set():
                break
            await feed(silence)
        assert ended.is_set(), "the question's turn ended"
        assert not heard_voice.is_set()
        await feed(voice)  # ... and then nothing more: the input has stopped
        await asyncio.wait_for(session.wait_idle(), timeout=60)  # a hang fails here
    finally:
        await scope.aclose()

    turns = [r for r in records if r.user_text]
    assert len(turns) == 1, [r.user_text for r in records]
    rec = turns[0]
    assert heard_voice.is_set(), "the voice was heard while the reply was not yet audible"
    assert {"capital", "france"} <= set(normalize(rec.user_text).split())
    assert rec.continuations == 0 and not rec.interrupted
    assert rec.heard_text and rec.work.audio_heard_s > 0, rec  # the reply was heard
    assert rec.first_audio_held_ms > 0  # ... after the hold, which the record tells
    assert engines.llm.unfinished_requests() == 0
    print(
        f"held {rec.first_audio_held_ms:.0f} ms with no input after the voice; "
        f"heard {rec.work.audio_heard_s:.2f} s: {rec.heard_text[:60]!r}"
    )
