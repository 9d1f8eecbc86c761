"""The phone pacer (telephony/pacing.py): what to send next and when, what was heard (pure).

No event loop: an ideal writer (:func:`write`) asks the pacer at a given time,
sends what it is told at once and sleeps as long as it is told, so the times
frames leave at are the pacer's decisions and nothing else. Frames are 20 ms at
8 kHz (160 samples); one byte per sample here, like µ-law.
"""

from __future__ import annotations

import pytest

from voice_pipeline.telephony.pacing import (
    FRAME_NS,
    MAX_PENDING_MARKS,
    Heard,
    Pacer,
    SendClear,
    SendFrame,
    SendMark,
    Sleep,
    Step,
)
from voice_pipeline.transport import KEEP_TURNS

MS = 1_000_000
FRAME = 160  # samples of one 20 ms frame at 8 kHz


def pacer(
    heard: Heard = Heard.MARKED, *, lead_ms: int = 100, marks: int = 10, queued_s: float = 2.0
) -> Pacer:
    return Pacer(
        heard,
        rate_hz=8000,
        frame_bytes=FRAME,
        silence=b"\xff",
        lead_ms=lead_ms,
        max_queued_s=queued_s,
        mark_every_frames=marks,
    )


def push(p: Pacer, turn_id: int, samples: int) -> None:
    p.push(turn_id, bytes([turn_id % 256]) * samples, samples)


def write(p: Pacer, start_ms: float, until_ms: float = 10_000) -> list[tuple[float, Step]]:
    """What an ideal writer sends from ``start_ms`` on: (time in ms, what)."""
    t, out = round(start_ms * MS), []
    while t <= until_ms * MS:
        step = p.next(t)
        if step is None:
            break
        if isinstance(step, Sleep):
            assert step.ns > 0
            t += step.ns
            continue
        out.append((t / MS, step))
    return out


def frame_times(sent: list[tuple[float, Step]]) -> list[float]:
    return [t for t, s in sent if isinstance(s, SendFrame)]


# ---------------------------------------------------------------- pacing


@pytest.mark.parametrize(
    ("lead_ms", "frames", "times_ms"),
    [
        # at most lead_ms ahead of playout: the first lead/20 + 1 leave at once, then real time
        (100, 10, [0, 0, 0, 0, 0, 0, 20, 40, 60, 80]),
        (40, 6, [0, 0, 0, 20, 40, 60]),
        (0, 5, [0, 20, 40, 60, 80]),
        (100, 3, [0, 0, 0]),  # shorter than the lead: all at once
    ],
)
def test_frames_leave_at_most_lead_ahead_of_the_far_ends_playout(
    lead_ms: int, frames: int, times_ms: list[float]
) -> None:
    p = pacer(Heard.DUE, lead_ms=lead_ms)
    push(p, 1, frames * FRAME)
    sent = write(p, 0)
    assert frame_times(sent) == times_ms
    assert p.frames_sent == frames
    assert p.max_lead_ns <= lead_ms * MS  # never more than the lead buffered there


def test_a_far_end_that_ran_dry_plays_the_next_frame_at_once() -> None:
    p = pacer(Heard.DUE, lead_ms=0)
    push(p, 1, 2 * FRAME)
    assert frame_times(write(p, 0)) == [0, 20]
    push(p, 2, 2 * FRAME)  # long after the first reply ended: no catching up in a burst
    assert frame_times(write(p, 500)) == [500, 520]


def test_the_writer_is_told_how_long_to_sleep_and_nothing_when_idle() -> None:
    p = pacer(Heard.DUE, lead_ms=0)
    assert p.next(0) is None
    push(p, 1, 2 * FRAME)
    assert isinstance(p.next(0), SendFrame)
    assert p.next(5 * MS) == Sleep(15 * MS)  # the second is due at 20 ms
    assert isinstance(p.next(20 * MS), SendFrame)
    assert p.next(20 * MS) is None


def test_a_chunks_last_frame_is_padded_with_silence() -> None:
    p = pacer()
    p.push(1, b"\x01" * 200, 200)
    frames = [s for _, s in write(p, 0) if isinstance(s, SendFrame)]
    assert [len(f.payload) for f in frames] == [FRAME, FRAME]
    assert frames[1].payload == b"\x01" * 40 + b"\xff" * 120


@pytest.mark.parametrize(
    ("queued_s", "pushed_frames", "room"),
    [(0.1, 4, True), (0.1, 5, False), (2.0, 99, True), (2.0, 100, False), (0.0, 1, False)],
)
def test_room_is_max_queued_s_of_frames(queued_s: float, pushed_frames: int, room: bool) -> None:
    p = pacer(queued_s=queued_s)
    push(p, 1, pushed_frames * FRAME)
    assert p.has_room() is room


def test_a_frame_sent_makes_room() -> None:
    p = pacer(queued_s=0.1, lead_ms=0)
    push(p, 1, 5 * FRAME)
    assert not p.has_room()
    assert isinstance(p.next(0), SendFrame)
    assert p.has_room()


# ---------------------------------------------------------------- MARKED (Twilio)


def test_marks_follow_every_n_frames_and_the_end_of_each_chunk() -> None:
    p = pacer(marks=3)
    push(p, 1, 6 * FRAME + 40)  # 7 frames, the last one short
    kinds = [
        "F" if isinstance(s, SendFrame) else s.name for _, s in write(p, 0) if not isinstance(s, SendClear)
    ]
    assert kinds == ["F", "F", "F", "t1-1", "F", "F", "F", "t1-2", "F", "t1-3"]


@pytest.mark.parametrize(
    ("echoed", "heard"),
    [
        ([], 0),
        (["t1-1"], 3 * FRAME),
        (["t1-2"], 6 * FRAME),  # a mark echoed means everything before it played
        (["t1-2", "t1-1"], 6 * FRAME),  # echoes out of order never move it back
        (["t1-3"], 6 * FRAME + 40),
        (["nope"], 0),  # not ours
    ],
)
def test_heard_is_the_last_echoed_mark(echoed: list[str], heard: int) -> None:
    p = pacer(marks=3)
    push(p, 1, 6 * FRAME + 40)
    write(p, 0)
    for name in echoed:
        p.mark_echoed(name)
    assert p.heard(1, 10_000 * MS) == heard  # time alone never counts as heard
    assert p.unplayed(1, 10_000 * MS) == 6 * FRAME + 40 - heard


def test_a_clear_goes_first_drops_the_turn_and_forgets_its_outstanding_marks() -> None:
    p = pacer(marks=2, lead_ms=40)
    push(p, 1, 8 * FRAME)
    push(p, 2, 2 * FRAME)
    sent = write(p, 0, until_ms=0)  # three frames and a mark leave at once
    assert [type(s) for _, s in sent] == [SendFrame, SendFrame, SendMark, SendFrame]
    assert p.mark_echoed("t1-1")
    assert p.epoch(1) == 0
    p.clear(1)
    assert p.epoch(1) == 1
    assert p.heard(1, 0) == 2 * FRAME and p.unplayed(1, 0) == 0  # what was echoed before the clear
    rest = write(p, 10)
    assert isinstance(rest[0][1], SendClear)
    assert {s.turn_id for _, s in rest if isinstance(s, SendFrame)} == {2}  # turn 1's frames are gone
    # the clear emptied the far end's buffer: turn 2 leaves at once, with the clear
    assert frame_times(rest) == [10, 10]
    assert not p.mark_echoed("t1-2")  # echoed as Twilio flushes: never heard
    assert p.heard(1, 0) == 2 * FRAME


def test_a_second_clear_with_nothing_queued_since_sends_nothing() -> None:
    p = pacer(marks=1)
    push(p, 1, FRAME)
    write(p, 0)
    p.clear(1)
    p.clear(1)
    assert [type(s) for _, s in write(p, 0)] == [SendClear]
    push(p, 1, FRAME)  # audio again: the next clear is sent
    p.clear(1)
    assert [type(s) for _, s in write(p, 100)] == [SendClear]
    assert p.epoch(1) == 3


def test_a_clear_of_a_turn_never_played_sends_nothing() -> None:
    p = pacer()
    p.clear(7)
    assert p.next(0) is None and p.epoch(7) == 1


# ---------------------------------------------------------------- DUE (AudioSocket)


@pytest.mark.parametrize(
    ("t_ms", "heard"),
    [
        (0, 0),
        (19, 0),
        (20, FRAME),
        (55, 2 * FRAME),
        (99, 4 * FRAME),
        (100, 5 * FRAME - 40),
        (900, 5 * FRAME - 40),
    ],
)
def test_heard_is_what_was_due_to_have_played(t_ms: int, heard: int) -> None:
    p = pacer(Heard.DUE)
    push(p, 1, 5 * FRAME - 40)  # five frames, all sent at once (within the lead)
    assert frame_times(write(p, 0)) == [0, 0, 0, 0, 0]
    assert p.heard(1, t_ms * MS) == heard
    assert p.unplayed(1, t_ms * MS) == 5 * FRAME - 40 - heard


@pytest.mark.parametrize(
    ("lead_ms", "clear_ms", "heard"),
    [
        (100, 30, 7 * FRAME),  # six sent at once (the lead), the seventh at 20 ms: not recalled
        (0, 30, 2 * FRAME),  # two had left by 30 ms
        (0, 500, 10 * FRAME),  # all of it had played
    ],
)
def test_a_clear_drops_the_queue_and_what_was_sent_counts_as_heard(
    lead_ms: int, clear_ms: int, heard: int
) -> None:
    p = pacer(Heard.DUE, lead_ms=lead_ms)
    push(p, 1, 10 * FRAME)
    write(p, 0, until_ms=clear_ms)
    p.clear(1)
    assert p.heard(1, clear_ms * MS) == heard and p.unplayed(1, clear_ms * MS) == 0
    assert write(p, clear_ms) == []  # no clear to send: AudioSocket has none
    assert p.heard(1, 10_000 * MS) == heard


def test_due_has_no_marks() -> None:
    p = pacer(Heard.DUE, marks=1)
    push(p, 1, 3 * FRAME)
    assert all(isinstance(s, SendFrame) for _, s in write(p, 0))


# ---------------------------------------------------------------- bounded


@pytest.mark.parametrize("heard", list(Heard))
def test_the_books_keep_the_latest_turns_only(heard: Heard) -> None:
    p = pacer(heard, marks=1)
    t = 0
    for turn in range(1, 301):
        push(p, turn, FRAME)
        write(p, t, until_ms=t + 1000)
        if turn % 2:
            p.clear(turn)
        t += 100
    books = (p._epoch, p._queued_pos, p._played, p._floor, p._log, p._unflushed)
    assert all(len(b) <= KEEP_TURNS for b in books), [len(b) for b in books]
    assert len(p._pending) <= MAX_PENDING_MARKS
    assert p.heard(300, t * MS) == (0 if heard is Heard.MARKED else FRAME)  # the latest still answer


def test_marks_never_echoed_are_forgotten_beyond_the_cap() -> None:
    p = pacer(marks=1, lead_ms=10**9)  # no pacing wait
    push(p, 1, 2 * MAX_PENDING_MARKS * FRAME)
    sent = write(p, 0)
    names = [s.name for _, s in sent if isinstance(s, SendMark)]
    assert len(names) == 2 * MAX_PENDING_MARKS and len(p._pending) == MAX_PENDING_MARKS
    assert not p.mark_echoed(names[0])  # the oldest: forgotten
    assert p.mark_echoed(names[-1])
    assert p.heard(1, 0) == 2 * MAX_PENDING_MARKS * FRAME


def test_frame_ns_is_20_ms() -> None:
    assert FRAME_NS == 20 * MS and pacer().frame_samples == FRAME
