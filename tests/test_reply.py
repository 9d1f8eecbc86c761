"""ReplySpeaker: pause flushes and rewinds to what was played, resume re-sends the rest.

Driven with the recording transport on a fake clock at 1 kHz output (one sample per ms).
"""

from __future__ import annotations

import asyncio

import numpy as np
from fakes import FakeClock, RecordingTransport
from numpy.typing import NDArray

from voice_pipeline.conversation.reply import ReplySpeaker

RATE = 1000
TURN = 3


class Listener:
    """The speaker's callbacks: what it reported as sent and cleared."""

    def __init__(self) -> None:
        self.sent: list[NDArray[np.int16]] = []
        self.cleared = 0

    def on_sent(self, pcm: NDArray[np.int16]) -> None:
        self.sent.append(pcm)

    def on_cleared(self) -> None:
        self.cleared += 1


def setup() -> tuple[FakeClock, RecordingTransport, Listener, ReplySpeaker]:
    clock = FakeClock()
    transport = RecordingTransport(clock, output_rate_hz=RATE)
    listener = Listener()
    speaker = ReplySpeaker(TURN, transport, listener.on_sent, listener.on_cleared)
    return clock, transport, listener, speaker


def ramp(start: int, n: int) -> NDArray[np.int16]:
    """Distinct, non-zero samples: every sample of the reply can be traced."""
    return np.arange(start + 1, start + n + 1, dtype=np.int16)


def heard(transport: RecordingTransport) -> NDArray[np.int16]:
    """Everything the listener played of the turn, in playback order."""
    chunks = sorted((c for c in transport.playout.chunks if c.turn_id == TURN), key=lambda c: c.start)
    parts = [c.pcm if c.cut is None else c.pcm[: c.cut] for c in chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


async def test_sends_as_it_is_added() -> None:
    clock, transport, listener, speaker = setup()
    assert not speaker.started
    await speaker.add(ramp(0, 300))
    await speaker.add(ramp(300, 200))
    assert speaker.started
    assert (speaker.total, speaker.sent) == (500, 500)
    assert [len(p) for p in transport.audio[TURN]] == [300, 200]
    assert [len(p) for p in listener.sent] == [300, 200]
    clock.advance_ms(500)
    await speaker.drain()
    assert np.array_equal(heard(transport), ramp(0, 500))


async def test_a_held_reply_sends_nothing_and_is_not_started_until_let_go() -> None:
    """A voice that may be the user going on holds the first audio (HoldReply): nothing
    reaches the listener and the reply is not audible; let go, all of it goes at once."""
    clock = FakeClock()
    transport = RecordingTransport(clock, output_rate_hz=RATE)
    listener, started = Listener(), []
    on_started = lambda: started.append(1)  # noqa: E731
    speaker = ReplySpeaker(
        TURN, transport, listener.on_sent, listener.on_cleared, on_started=on_started, held=True
    )
    await speaker.add(ramp(0, 300))
    await speaker.add(ramp(300, 200))
    assert speaker.holding and not speaker.started and started == []
    assert (speaker.total, speaker.sent) == (500, 0) and transport.audio.get(TURN, []) == []
    await speaker.resume()
    assert speaker.started and started == [1]
    assert [len(p) for p in transport.audio[TURN]] == [500]
    speaker.hold()  # once audio is out, holding is a barge-in's business: nothing changes
    assert not speaker.holding
    await speaker.add(ramp(500, 100))
    clock.advance_ms(600)
    await speaker.drain()
    assert np.array_equal(heard(transport), ramp(0, 600)) and started == [1]


async def test_a_held_text_only_reply_starts_when_let_go() -> None:
    """A text-only reply waiting for another to be heard: its text is out, but it is not the
    one the listener attends to until it is let go (the machine then takes it as heard)."""
    clock = FakeClock()
    transport = RecordingTransport(clock, output_rate_hz=RATE)
    listener, started = Listener(), []
    speaker = ReplySpeaker(
        TURN,
        transport,
        listener.on_sent,
        listener.on_cleared,
        on_started=lambda: started.append(1),
        held=True,
    )
    speaker.show()
    assert not speaker.started and started == []
    await speaker.resume()
    assert speaker.started and started == [1]
    speaker.show()
    assert started == [1]  # once


async def test_pause_flushes_and_returns_what_was_played() -> None:
    clock, transport, listener, speaker = setup()
    await speaker.add(ramp(0, 1000))
    clock.advance_ms(370)
    assert speaker.pause() == 370
    assert speaker.holding
    assert transport.clears(TURN) == [370]
    assert listener.cleared == 1
    assert speaker.sent == 370  # rewound to what the listener played
    clock.advance_ms(1000)
    assert transport.played_samples(TURN) == 370  # nothing more played after the flush


async def test_nothing_is_sent_while_paused() -> None:
    clock, transport, listener, speaker = setup()
    await speaker.add(ramp(0, 100))
    clock.advance_ms(40)
    speaker.pause()
    await speaker.add(ramp(100, 400))  # synthesis goes on
    assert speaker.total == 500
    assert len(transport.audio[TURN]) == 1
    assert len(listener.sent) == 1


async def test_resume_resends_exactly_the_unplayed_remainder() -> None:
    clock, transport, listener, speaker = setup()
    await speaker.add(ramp(0, 600))
    clock.advance_ms(250)
    assert speaker.pause() == 250
    await speaker.add(ramp(600, 400))
    clock.advance_ms(500)  # the user's backchannel
    await speaker.resume()
    assert not speaker.holding
    assert np.array_equal(transport.audio[TURN][-1], ramp(250, 750))
    assert np.array_equal(listener.sent[-1], ramp(250, 750))
    clock.advance_ms(750)
    await speaker.drain()
    # every sample of the reply reached the listener exactly once, in order
    assert np.array_equal(heard(transport), ramp(0, 1000))
    assert transport.played_samples(TURN) == speaker.total == 1000


async def test_pause_and_resume_twice() -> None:
    clock, transport, _, speaker = setup()
    await speaker.add(ramp(0, 1000))
    clock.advance_ms(100)
    assert speaker.pause() == 100
    await speaker.resume()
    clock.advance_ms(300)
    assert speaker.pause() == 400  # played counts over both sends
    await speaker.resume()
    clock.advance_ms(600)
    await speaker.drain()
    assert np.array_equal(heard(transport), ramp(0, 1000))


async def test_pause_before_anything_played_resends_everything() -> None:
    clock, transport, _, speaker = setup()
    await speaker.add(ramp(0, 200))
    assert speaker.pause() == 0
    await speaker.resume()
    clock.advance_ms(200)
    await speaker.drain()
    assert np.array_equal(heard(transport), ramp(0, 200))


async def test_drain_waits_through_a_pause() -> None:
    clock, transport, _, speaker = setup()
    await speaker.add(ramp(0, 500))
    drain = asyncio.create_task(speaker.drain())
    await asyncio.sleep(0)
    clock.advance_ms(200)
    speaker.pause()
    clock.advance_ms(1000)  # long past the original end of playback
    for _ in range(5):
        await asyncio.sleep(0)
    assert not drain.done()
    await speaker.resume()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not drain.done()  # the remainder is still playing
    clock.advance(transport.time_of(transport.playout.end_of(TURN)) - clock())
    await asyncio.wait_for(drain, 1.0)
    assert np.array_equal(heard(transport), ramp(0, 500))


async def test_drain_waits_for_the_resent_remainder() -> None:
    """Resumed before the flushed audio would have ended: the remainder now ends later."""
    clock, transport, _, speaker = setup()
    await speaker.add(ramp(0, 500))
    drain = asyncio.create_task(speaker.drain())
    await asyncio.sleep(0)
    clock.advance_ms(200)
    speaker.pause()
    clock.advance_ms(100)
    await speaker.resume()  # the last 300 samples play from 300 to 600 ms
    clock.advance_ms(200)  # 500 ms: where playback would have ended without the pause
    for _ in range(5):
        await asyncio.sleep(0)
    assert transport.played_samples(TURN) == 400
    assert not drain.done()
    clock.advance_ms(100)
    await asyncio.wait_for(drain, 1.0)
    assert transport.played_samples(TURN) == 500


async def test_drain_of_nothing_returns() -> None:
    _, _, _, speaker = setup()
    await asyncio.wait_for(speaker.drain(), 1.0)
