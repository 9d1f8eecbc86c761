"""The simulated listener's playout buffer: pure, positions in output samples."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from voice_pipeline.playout import Playout


def pcm(n: int, value: int = 1000) -> NDArray[np.int16]:
    return np.full(n, value, dtype=np.int16)


SENDS: list[tuple[list[tuple[int, int]], list[int]]] = [
    # (sends as (samples, sent at), expected start positions)
    ([(100, 0)], [0]),
    ([(100, 40)], [40]),
    ([(100, 0), (50, 10), (30, 20)], [0, 100, 150]),  # back to back while earlier audio plays
    ([(100, 0), (50, 100)], [0, 100]),  # exactly at the end
    ([(100, 0), (50, 500)], [0, 500]),  # a gap: starts when sent
    ([(100, 0), (50, 120), (10, 130)], [0, 120, 170]),
]


@pytest.mark.parametrize(("sends", "starts"), SENDS)
def test_chunks_start_at_the_later_of_send_time_and_previous_end(
    sends: list[tuple[int, int]], starts: list[int]
) -> None:
    p = Playout(1000)
    assert [p.send(1, pcm(n), at) for n, at in sends] == starts


def test_turns_share_one_queue() -> None:
    p = Playout(1000)
    p.send(1, pcm(100), 0)
    assert p.send(2, pcm(100), 50) == 100


PLAYED: list[tuple[int, int]] = [
    (0, 0),
    (50, 50),
    (100, 100),
    (120, 100),
    (250, 150),
    (275, 175),
    (10_000, 200),
]


@pytest.mark.parametrize(("at", "played"), PLAYED)
def test_played_counts_samples_up_to_a_position(at: int, played: int) -> None:
    p = Playout(1000)
    p.send(1, pcm(100), 0)  # 0..100
    p.send(1, pcm(100), 200)  # 200..300, after a gap
    p.send(2, pcm(40), 0)  # 300..340, another turn: not counted
    assert p.played(1, at) == played


CLEARS: list[tuple[int, int, int]] = [
    # (clear at, samples of turn 1 played in the end, end of turn 1)
    (0, 0, 0),
    (60, 60, 60),
    (100, 100, 100),  # between chunks: the second one is dropped whole
    (150, 150, 150),
    (199, 199, 199),
    (200, 200, 200),  # everything had played: nothing to cut
    (5000, 200, 200),
]


@pytest.mark.parametrize(("at", "played", "end"), CLEARS)
def test_clear_cuts_at_the_right_sample(at: int, played: int, end: int) -> None:
    p = Playout(1000)
    p.send(1, pcm(100), 0)
    p.send(1, pcm(100), 0)  # queued: plays 100..200
    p.clear(1, at)
    assert p.played(1, 10_000) == played
    assert p.end_of(1) == end
    out = p.render(300)
    assert np.all(out[:played] == 1000)
    assert np.all(out[played:] == 0)


def test_clear_of_a_chunk_not_yet_started_drops_it() -> None:
    p = Playout(1000)
    p.send(1, pcm(100), 0)
    p.send(1, pcm(100), 500)
    p.clear(1, 300)
    assert p.played(1, 10_000) == 100
    assert p.end_of(1) == 100


def test_clear_only_touches_its_turn() -> None:
    p = Playout(1000)
    p.send(1, pcm(100, 1), 0)
    p.send(2, pcm(100, 2), 0)  # 100..200
    p.clear(1, 150)  # turn 1 has fully played by then
    p.clear(2, 50)  # turn 2 has not started: dropped whole
    p.clear(3, 0)  # unknown turn: nothing happens
    assert p.played(1, 1000) == 100
    assert p.played(2, 1000) == 0
    out = p.render(0)
    assert len(out) == 100
    assert np.all(out == 1)


def test_clear_does_not_touch_the_other_turn_playing_at_the_same_time() -> None:
    p = Playout(1000)
    p.send(1, pcm(100, 1), 0)
    p.send(2, pcm(100, 2), 0)  # 100..200
    p.clear(2, 150)
    assert p.played(1, 1000) == 100
    assert p.played(2, 1000) == 50


def test_second_clear_never_restores_audio() -> None:
    p = Playout(1000)
    p.send(1, pcm(100), 0)
    p.clear(1, 40)
    p.clear(1, 80)
    assert p.played(1, 1000) == 40


def test_audio_sent_after_a_clear_starts_at_the_cut() -> None:
    p = Playout(1000)
    p.send(1, pcm(1000), 0)
    p.clear(1, 300)
    assert p.send(2, pcm(100), 300) == 300
    assert p.played(2, 1000) == 100


def test_queued_audio_dropped_by_a_clear_does_not_delay_the_next_reply() -> None:
    # turn 1 queued three clauses (0..100, 100..200, 200..300); barge-in at 60
    p = Playout(1000)
    for _ in range(3):
        p.send(1, pcm(100), 0)
    p.clear(1, 60)
    assert p.end_of(1) == 60
    # the next reply, sent at 80, plays at once: nothing of turn 1 is left to wait for
    assert p.send(2, pcm(50), 80) == 80
    out = p.render(0)
    assert len(out) == 130
    assert np.all(out[:60] == 1000)
    assert np.all(out[60:80] == 0)
    assert np.all(out[80:] == 1000)


def test_end_of_a_turn_without_audio_is_zero() -> None:
    p = Playout(1000)
    assert p.end_of(1) == 0
    p.send(2, pcm(10), 5)
    assert p.end_of(1) == 0
    assert p.end_of(2) == 15


RENDER: list[tuple[list[tuple[int, int]], int, int]] = [
    # (sends, requested length, rendered length)
    ([], 0, 0),
    ([], 500, 500),
    ([(100, 0)], 50, 100),  # never shorter than the audio
    ([(100, 0)], 500, 500),
    ([(100, 0), (100, 450)], 500, 550),
]


@pytest.mark.parametrize(("sends", "length", "rendered"), RENDER)
def test_render_length(sends: list[tuple[int, int]], length: int, rendered: int) -> None:
    p = Playout(1000)
    for n, at in sends:
        p.send(1, pcm(n), at)
    out = p.render(length)
    assert out.dtype == np.int16
    assert len(out) == rendered


def test_render_places_each_chunk_where_it_plays() -> None:
    p = Playout(1000)
    p.send(1, np.arange(1, 11, dtype=np.int16), 5)  # 5..15
    p.send(2, np.full(5, -7, dtype=np.int16), 0)  # queued: 15..20
    out = p.render(25)
    assert out.tolist() == [0] * 5 + list(range(1, 11)) + [-7] * 5 + [0] * 5
