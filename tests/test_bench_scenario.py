"""The bench's script (pure): composed audio with a known end of speech, seeded plans,
exact interruption counts, and the microphone timeline."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voice_pipeline.bench.caller import Microphone
from voice_pipeline.bench.scenario import (
    Clip,
    Speech,
    interrupt_count,
    make_clip,
    plan_step,
    sample_time,
    speech_span,
)

RATE = 16000


def tone(seconds: float, amp: float = 0.3, rate: int = RATE) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def quiet(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(round(seconds * rate), dtype=np.float32)


def test_speech_span_is_found_on_the_audio_at_10_ms_resolution() -> None:
    x = np.concatenate([quiet(0.25), tone(1.0), quiet(0.4)])
    assert speech_span(x, RATE) == (4000, 20000)
    faint = np.concatenate([tone(0.5), tone(0.3, amp=0.3 * 10 ** (-40 / 20)), quiet(0.1)])
    assert speech_span(faint, RATE) == (0, 8000)  # 40 dB below the peak is not speech
    assert speech_span(quiet(1.0), RATE) is None
    assert speech_span(np.zeros(10, np.float32), RATE) is None  # shorter than a frame
    assert make_clip("x", quiet(1.0), RATE) is None
    clip = make_clip("q", np.concatenate([quiet(0.1), tone(0.5), quiet(0.1)]), RATE)
    assert clip is not None and (clip.onset, clip.end) == (1600, 9600)
    assert clip.duration_s == pytest.approx(0.7)


def clips(n: int, prefix: str) -> tuple[Clip, ...]:
    return tuple(Clip(f"{prefix}{i}", tone(0.5), RATE, 0, 8000) for i in range(n))


SPEECH = Speech(clips(8, "q"), clips(3, "long"), clips(1, "cut"))


@pytest.mark.parametrize(
    ("share", "sessions", "turns", "expected"),
    [
        (0.25, 2, 2, 1),
        (0.5, 2, 2, 2),
        (1.0, 2, 2, 2),  # a session's last reply has no next turn to interrupt it with
        (0.2, 1, 5, 1),
        (0.2, 4, 5, 4),
        (0.0, 4, 5, 0),
        (0.5, 3, 1, 0),
    ],
)
def test_interrupt_share_is_an_exact_count(share: float, sessions: int, turns: int, expected: int) -> None:
    assert interrupt_count(share, sessions, turns) == expected
    plans = plan_step(SPEECH, sessions, turns, share, seed=7)
    cut = [t for p in plans for t in p.turns if t.interrupt_after_s is not None]
    assert len(cut) == expected
    for p in plans:
        for a, b in zip(p.turns, p.turns[1:], strict=False):
            assert b.interrupts_previous == (a.interrupt_after_s is not None)
            if b.interrupts_previous:
                assert b.clip.text == "cut0"
                # the interrupted reply answers a long-answer prompt, unless it answers an interruption
                assert a.clip.text.startswith("long") or a.interrupts_previous
        assert not p.turns[0].interrupts_previous
        assert p.turns[-1].interrupt_after_s is None


def test_plans_are_seeded_and_repeatable() -> None:
    a = plan_step(SPEECH, 3, 4, 0.3, seed=1)
    assert a == plan_step(SPEECH, 3, 4, 0.3, seed=1)
    assert a != plan_step(SPEECH, 3, 4, 0.3, seed=2)
    assert a[0].start_offset_s == 0 and all(0 <= p.start_offset_s <= 1 for p in a)
    delays = [t.interrupt_after_s for p in a for t in p.turns if t.interrupt_after_s is not None]
    assert delays and all(1.0 <= d <= 2.0 for d in delays)


def test_sample_time_puts_a_boundary_inside_the_frame_before_its_send_time() -> None:
    # frame 2 (samples 640..960) was sent at 10.0 s: its samples were captured over the 20 ms before
    assert sample_time(10.0, 960, 960, RATE) == 10.0
    assert sample_time(10.0, 960, 640, RATE) == pytest.approx(9.98)
    assert sample_time(10.0, 960, 800, RATE) == pytest.approx(9.99)


async def test_the_microphone_sends_paced_frames_and_knows_when_speech_ended() -> None:
    sent: list[tuple[float, np.ndarray]] = []
    loop = asyncio.get_running_loop()

    async def send(frame: np.ndarray) -> None:
        sent.append((loop.time(), frame))

    mic = Microphone(send, RATE)
    task = asyncio.create_task(mic.run())
    try:
        await asyncio.sleep(0.05)
        speech = tone(0.1)
        start = mic.say(speech)
        assert start % mic.frame == 0 and start >= 320
        end_t = await mic.time_of(start + 1000, end=True)  # inside a frame: 1000 = 3 x 320 + 40
        onset_t = await mic.time_of(start, end=False)
        await mic.time_of(start + len(speech) + mic.frame, end=True)  # all of it, and a frame more
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    k0 = start // mic.frame
    audio = np.concatenate([f for _, f in sent])
    assert np.array_equal(audio[start : start + len(speech)], speech)
    assert not audio[:start].any() and not audio[start + len(speech) :].any()
    assert onset_t == pytest.approx(mic.sent_t[k0] - 0.02)
    assert end_t == pytest.approx(mic.sent_t[k0 + 3] - (320 - 40) / RATE)
    gaps = np.diff([t for t, _ in sent])
    assert gaps.mean() == pytest.approx(0.02, abs=0.01)  # paced by the clock, not as fast as possible


PAUSED = tuple(
    Clip(f"p{i}", np.concatenate([tone(0.5), quiet(0.8), tone(0.5)]), RATE, 0, 28800, (8000,))
    for i in range(3)
)
WITH_PAUSES = Speech(clips(8, "q"), clips(3, "long"), clips(1, "cut"), PAUSED)


@pytest.mark.parametrize(("share", "expected"), [(0.0, 0), (0.5, 3), (1.0, 6)])
def test_pauses_is_the_share_of_questions_said_with_pauses(share: float, expected: int) -> None:
    plans = plan_step(WITH_PAUSES, 2, 5, 0.2, seed=4, pauses=share)
    turns = [t for p in plans for t in p.turns]
    plain = [t for t in turns if not t.interrupts_previous and t.interrupt_after_s is None]
    assert len(plain) == 6  # 10 turns; 2 replies cut, by the 2 turns after them
    assert sum(t.clip.paused for t in turns) == expected
    # interruptions and the long prompts they cut are never paused sentences
    assert not any(t.clip.paused for t in turns if t.interrupts_previous or t.interrupt_after_s is not None)
    assert plans == plan_step(WITH_PAUSES, 2, 5, 0.2, seed=4, pauses=share)


def test_without_paused_speech_pauses_changes_nothing() -> None:
    assert plan_step(SPEECH, 2, 4, 0.25, seed=3, pauses=1.0) == plan_step(SPEECH, 2, 4, 0.25, seed=3)


def test_a_clip_says_where_its_pauses_are() -> None:
    x = np.concatenate([tone(0.5), quiet(0.8), tone(0.5)])
    clip = make_clip("paused", x, RATE, (8000,))
    assert clip is not None and clip.paused and clip.pauses_at == (8000,)
    plain = make_clip("plain", tone(0.5), RATE)
    assert plain is not None and not plain.paused
