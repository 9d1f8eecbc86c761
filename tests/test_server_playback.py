"""ListenerTimeline: what a remote listener has played, from reports or real time (pure)."""

from __future__ import annotations

from voice_pipeline.edge.playback import ListenerTimeline

RATE = 1000  # samples per second: 1 sample = 1 ms
S = 1_000_000_000  # ns


def at(seconds: float) -> int:
    return round(seconds * S)


def test_without_reports_audio_plays_in_real_time_from_when_it_was_sent() -> None:
    tl = ListenerTimeline(RATE, reports=False)
    tl.sent(1, 1000, at(0))
    assert tl.played(1, at(0.4)) == 400
    assert tl.remaining(1, at(0.4)) == 600
    assert tl.played(1, at(5)) == 1000 and tl.remaining(1, at(5)) == 0
    tl.sent(2, 500, at(10))  # the listener was silent between 1 s and 10 s
    assert tl.played(2, at(10.2)) == 200
    assert tl.played(1, at(10.2)) == 1000


def test_chunks_sent_while_playing_queue_behind() -> None:
    tl = ListenerTimeline(RATE, reports=False)
    tl.sent(1, 500, at(0))
    tl.sent(1, 500, at(0.1))
    assert tl.played(1, at(0.8)) == 800
    assert tl.remaining(1, at(0.8)) == 200


def test_reports_set_the_position_and_real_time_extrapolates_a_little() -> None:
    tl = ListenerTimeline(RATE, reports=True, max_ahead_s=0.25)
    tl.sent(1, 2000, at(0))
    assert tl.played(1, at(1)) == 250  # no report yet: at most max_ahead
    tl.report(100, at(1))  # the listener started late
    assert tl.played(1, at(1)) == 100
    assert tl.played(1, at(1.1)) == 200
    assert tl.played(1, at(3)) == 350  # it stopped reporting: do not believe more
    tl.report(1900, at(3))
    assert tl.played(1, at(3)) == 1900
    assert tl.played(1, at(9)) == 2000


def test_reports_beyond_what_was_sent_are_capped() -> None:
    tl = ListenerTimeline(RATE, reports=True)
    tl.sent(1, 300, at(0))
    tl.report(10_000, at(0.1))
    assert tl.played(1, at(0.1)) == 300 and tl.remaining(1, at(0.1)) == 0


def test_a_cut_drops_the_unplayed_rest_and_later_audio_follows_at_the_cut() -> None:
    tl = ListenerTimeline(RATE, reports=False)
    tl.sent(1, 1000, at(0))
    assert tl.cut(1, at(0.3)) == 300
    assert tl.played(1, at(2)) == 300 and tl.remaining(1, at(2)) == 0
    tl.sent(2, 400, at(2))
    assert tl.played(2, at(2.1)) == 100
    assert tl.played(1, at(2.1)) == 300


def test_an_acknowledged_cut_is_redone_at_the_exact_position() -> None:
    for exact in (250, 340):
        tl = ListenerTimeline(RATE, reports=True)
        tl.sent(1, 1000, at(0))
        tl.report(200, at(0.2))
        assert tl.cut(1, at(0.3)) == 300  # estimated
        tl.sent(2, 500, at(0.31))  # the next reply, sent before the acknowledgement
        tl.report(exact, at(0.32), cleared=1)
        assert tl.played(1, at(0.32)) == exact
        assert tl.played(2, at(0.32)) == 0
        tl.report(exact + 100, at(0.42))
        assert tl.played(2, at(0.42)) == 100
        assert tl.played(1, at(0.42)) == exact


def test_a_reply_resumed_after_a_pause_adds_up() -> None:
    tl = ListenerTimeline(RATE, reports=False)
    tl.sent(1, 1000, at(0))
    tl.cut(1, at(0.4))  # paused by the user's speech
    tl.sent(1, 600, at(1.0))  # resumed from where it stopped
    assert tl.played(1, at(1.3)) == 700
    assert tl.played(1, at(5)) == 1000


def test_acknowledgements_of_other_turns_and_stale_cuts_are_harmless() -> None:
    tl = ListenerTimeline(RATE, reports=True)
    tl.sent(1, 1000, at(0))
    tl.report(100, at(0.1))
    tl.cut(1, at(0.2))
    tl.report(150, at(0.25), cleared=7)  # never cut: ignored, the estimate stands
    assert tl.played(1, at(0.3)) == 200
    tl.sent(2, 100, at(20))
    tl.report(250, at(20.05), cleared=1)  # too late to redo the cut
    assert tl.played(1, at(20.05)) == 200


def test_a_long_session_stays_small_and_exact() -> None:
    tl = ListenerTimeline(RATE, reports=True)
    played = 0
    for turn in range(1, 200):
        tl.sent(turn, 100, at(turn))
        tl.sent(turn, 100, at(turn + 0.01))
        if turn % 3 == 0:
            tl.cut(turn, at(turn + 0.05))
            played += 50
            tl.report(played, at(turn + 0.06), cleared=turn)
            assert tl.played(turn, at(turn + 0.06)) == 50
        else:
            played += 200
            tl.report(played, at(turn + 0.5))
            assert tl.played(turn, at(turn + 0.5)) == 200
        assert tl.played(turn - 1, at(turn + 0.5)) in (50, 200) or turn == 1
    assert len(tl._chunks) <= 4
