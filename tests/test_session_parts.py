"""The session's collaborators on their own: its tasks, its input side, its open turns."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from fakes import FakeVAD

from voice_pipeline.config import BargeInConfig
from voice_pipeline.conversation.listening import Listener
from voice_pipeline.conversation.open_turns import OpenTurns
from voice_pipeline.conversation.tasks import SessionTasks
from voice_pipeline.conversation.turn import Turn

RATE = 16000

# ---------------------------------------------------------------- SessionTasks


async def test_a_failed_task_is_logged_and_let_go(caplog: pytest.LogCaptureFixture) -> None:
    tasks = SessionTasks()

    async def boom() -> None:
        raise RuntimeError("boom")

    task = tasks.spawn(boom(), "boom-task")
    with caplog.at_level(logging.ERROR, logger="voice_pipeline.conversation.tasks"):
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # the done callback runs on the next loop step
    assert len(tasks) == 0
    assert any("boom-task" in r.getMessage() for r in caplog.records)


async def test_cancel_all_then_drain_waits_for_tasks_spawned_while_winding_down() -> None:
    tasks = SessionTasks()
    cleaned: list[str] = []

    async def cleanup() -> None:
        await asyncio.sleep(0)
        cleaned.append("cleanup")

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            tasks.spawn(cleanup(), "cleanup")  # like a reply spawning close-asr as it ends

    tasks.spawn(forever(), "forever")
    await asyncio.sleep(0)
    await tasks.cancel_all()
    await tasks.drain()
    assert cleaned == ["cleanup"]
    assert len(tasks) == 0


# ---------------------------------------------------------------- Listener


def test_listener_yields_one_frame_per_vad_frame_with_its_capture_time() -> None:
    vad = FakeVAD()
    listener = Listener(vad, BargeInConfig(), RATE, lambda: 0)
    chunk = np.concatenate([np.zeros(512), 0.3 * np.ones(512), np.zeros(256)]).astype(np.float32)
    t_end = 10_000_000_000
    samples = listener.record(chunk, t_end)
    frames = list(listener.frames(samples, neg_threshold=0.35))
    assert [f.prob for f in frames] == [0.0, 1.0]  # the last 256 samples wait for the next chunk
    ns_per_sample = 1e9 / RATE
    assert frames[0].start_ns == round(t_end - len(chunk) * ns_per_sample)
    assert frames[1].start_ns == round(t_end - (len(chunk) - 512) * ns_per_sample)
    assert listener.input.position == len(chunk)


def test_listener_cleans_non_finite_input() -> None:
    listener = Listener(FakeVAD(), BargeInConfig(), RATE, lambda: 0)
    chunk = np.array([0.1, np.nan, np.inf, -0.1], dtype=np.float32)
    assert np.isfinite(listener.record(chunk, 1)).all()


def test_acoustic_end_is_where_the_sound_stops_not_the_vad_frame() -> None:
    listener = Listener(FakeVAD(), BargeInConfig(), RATE, lambda: 0)
    rng = np.random.default_rng(0)
    sound = (0.3 * rng.standard_normal(RATE // 2)).astype(np.float32)
    silence = np.zeros(RATE // 10, dtype=np.float32)  # the VAD's hangover: 100 ms
    listener.record(np.concatenate([sound, silence]), 1)
    vad_end = len(sound) + len(silence)
    end = listener.acoustic_end(vad_end)
    assert len(sound) - RATE // 50 <= end <= len(sound) + RATE // 50  # within 20 ms of the true end
    assert listener.acoustic_end(len(sound) // 2) <= len(sound) // 2  # never after the VAD's end


# ---------------------------------------------------------------- OpenTurns


def _turn(turn_id: int, *, reply_text: str | None = None) -> Turn:
    reply = None if reply_text is None else SimpleNamespace(text=reply_text)
    utterance = SimpleNamespace(prefetching=False)
    fake: Any = SimpleNamespace(turn_id=turn_id, reply=reply, utterance=utterance)
    return cast(Turn, fake)


def _machine() -> Any:
    """What OpenTurns reads of the machine, set by hand (the machine's own tests drive it)."""
    return SimpleNamespace(user=None, capturing=None, replying=[], spoken_over=lambda turn_id: None)


async def test_open_turns_idle_only_with_no_user_turn_and_no_reply() -> None:
    machine = _machine()
    turns = OpenTurns(machine)
    assert not turns.busy
    first = _turn(1)
    turns.add(first)
    machine.user = machine.capturing = 1  # the machine began turn 1
    turns.settle()
    assert turns.busy and turns.capture is first
    assert turns.capture is first  # another turn's seal (the machine's unsealed turn is still 1)
    machine.capturing = None  # the machine sealed turn 1
    assert turns.capture is None
    machine.user, machine.replying = None, [1]  # turn 1 ended: its reply runs
    turns.settle()
    assert turns.busy and turns.replies == 1 and not turns.llm_idle
    machine.user, machine.replying = 2, []  # the reply is over; the user speaks again
    turns.settle()
    await turns.wait_no_reply()
    assert turns.busy  # the machine still has a user turn
    turns.remove(1)
    machine.user = None
    turns.settle()
    await turns.wait_idle()
    assert not turns.busy and len(turns) == 0


def test_open_turns_said_over_is_the_text_of_the_reply_spoken_over() -> None:
    machine = _machine()
    machine.spoken_over = {2: 1}.get  # the machine's record: turn 2 was spoken over turn 1's reply
    turns = OpenTurns(machine)
    turns.add(_turn(1, reply_text="It is sunny today"))
    turns.add(_turn(2))
    turns.add(_turn(3))
    assert turns.said_over(turns[2]) == "It is sunny today"
    assert turns.said_over(turns[3]) == ""
    assert [t.turn_id for t in turns] == [1, 2, 3]
