"""What a paused speaker hears the assistant say over them (pure: the bench's and the e2e
test's measure of the target "no reply audio while a paused speaker is still speaking")."""

from __future__ import annotations

import numpy as np

from voice_pipeline.bench.paused import FLUSH_S, PausedSpeech, reply_heard_in_pauses

IN_RATE, OUT_RATE, LEAD_S = 16000, 22050, 0.5


def clip() -> PausedSpeech:
    # three phrases: pauses of 1.0 s after 1.0 s of speech and 0.5 s after 2.5 s
    return PausedSpeech(
        ("one", "two", "three"),
        np.zeros(4 * IN_RATE, np.float32),
        IN_RATE,
        (IN_RATE, 5 * IN_RATE // 2),
        (1.0, 0.5),
    )


def timeline(*spans_s: tuple[float, float], dtype: type = np.int16) -> np.ndarray:
    out = np.zeros(6 * OUT_RATE, np.float32)
    t = np.arange(len(out)) / OUT_RATE
    for a, b in spans_s:
        out[(t >= a) & (t < b)] = 0.3 * np.sin(2 * np.pi * 220 * t[(t >= a) & (t < b)])
    return (out * 32767).astype(np.int16) if dtype is np.int16 else out


def test_silence_in_the_pauses_is_nothing_heard() -> None:
    # a reply after the sentence (it ends 0.5 + 4.0 s in) is not over the speaker
    assert reply_heard_in_pauses(timeline((4.6, 5.5)), OUT_RATE, clip(), LEAD_S) == [0.0, 0.0]


def test_a_reply_in_a_pause_is_counted_in_that_pause() -> None:
    # 0.4 s of reply in the first pause (it runs from 1.5 to 2.5 s of the output)
    heard = reply_heard_in_pauses(timeline((1.9, 2.3)), OUT_RATE, clip(), LEAD_S)
    assert abs(heard[0] - 0.4) <= 0.02 and heard[1] == 0.0


def test_the_flush_after_the_pause_counts_and_float_output_reads_alike() -> None:
    # reply running on into the next phrase: counted up to FLUSH_S into it, not further
    spans = ((2.3, 3.5),)
    for out in (timeline(*spans), timeline(*spans, dtype=np.float32)):
        heard = reply_heard_in_pauses(out, OUT_RATE, clip(), LEAD_S)
        assert abs(heard[0] - (0.2 + FLUSH_S)) <= 0.02, heard
