"""The end-of-turn state machine, table-driven, no event loop, no audio.

Frames are written as strings, one character per frame:
``#`` = 0.9 (voiced), ``=`` = 0.5 (exactly threshold), ``-`` = 0.4 (between the
thresholds), ``~`` = 0.35 (exactly neg_threshold), ``.`` = 0.0 (silence).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from vad.endpointer import (
    EndOfTurn,
    EndpointAction,
    Endpointer,
    PauseStarted,
    SpeechResumed,
    SpeechStarted,
)
from voice_pipeline.config import VADConfig
from voice_pipeline.errors import ConfigError

PROB = {"#": 0.9, "=": 0.5, "-": 0.4, "~": 0.35, ".": 0.0}

# 16 kHz, 20 ms frames: min speech = 3 frames, end silence = 5 frames, pre-roll = 2 frames
F = 320
CFG = VADConfig(threshold=0.5, neg_threshold=0.35, min_speech_ms=60, end_silence_ms=100, pre_roll_ms=40)


def run(
    pattern: str, cfg: VADConfig = CFG, rate: int = 16000, frame: int = F, ep: Endpointer | None = None
) -> list[tuple[int, EndpointAction]]:
    """Feed the pattern; return (frame index, action) for every action emitted."""
    ep = ep or Endpointer(cfg, rate, frame)
    out: list[tuple[int, EndpointAction]] = []
    for i, ch in enumerate(pattern):
        out.extend((i, a) for a in ep.update(PROB[ch]))
    return out


@dataclass(frozen=True)
class Case:
    name: str
    pattern: str
    expected: list[tuple[int, EndpointAction]]
    cfg: VADConfig = CFG
    rate: int = 16000
    frame: int = F


CASES = [
    Case(
        "clean turn",
        "..#####......",
        [
            (4, SpeechStarted(onset_sample=2 * F, start_sample=0, decided_sample=5 * F)),
            (7, PauseStarted(speech_end_sample=7 * F)),
            (11, EndOfTurn(speech_end_sample=7 * F, decided_sample=12 * F)),
        ],
    ),
    Case(
        "pre-roll not clamped",
        ".....###......",
        [
            (7, SpeechStarted(onset_sample=5 * F, start_sample=3 * F, decided_sample=8 * F)),
            (8, PauseStarted(8 * F)),
            (12, EndOfTurn(8 * F, 13 * F)),
        ],
    ),
    Case(
        "pre-roll clamped at 0, onset at 0",
        "###.....",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
        ],
    ),
    Case(
        "pre-roll clamped at 0, onset inside pre-roll",
        ".###.....",
        [
            (3, SpeechStarted(F, 0, 4 * F)),
            (4, PauseStarted(4 * F)),
            (8, EndOfTurn(4 * F, 9 * F)),
        ],
    ),
    Case("too-short burst ignored", "..##......", []),
    Case("bursts separated by silence do not add up", "##.##.##.......", []),
    Case("no turn until min speech reached", "..##", []),
    Case(
        "pause and resume",
        "####...###......",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (4, PauseStarted(4 * F)),
            (7, SpeechResumed(7 * F, 60)),  # the silence it broke: 3 frames of 20 ms
            (10, PauseStarted(10 * F)),
            (14, EndOfTurn(10 * F, 15 * F)),
        ],
    ),
    Case(
        "resume resets the end-silence count",
        "###....#....",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, SpeechResumed(7 * F, 80)),
            (8, PauseStarted(8 * F)),
        ],
    ),
    Case(
        "hysteresis: between-threshold frames keep a candidate run alive",
        "#-#-#.....",
        [
            (4, SpeechStarted(0, 0, 5 * F)),
            (5, PauseStarted(5 * F)),
            (9, EndOfTurn(5 * F, 10 * F)),
        ],
    ),
    Case("hysteresis: between-threshold frames do not count as voiced", "#----......", []),
    Case("hysteresis: a dip below neg_threshold kills a candidate run", "##.#.##......", []),
    Case(
        "hysteresis: between-threshold frames extend speech in a turn",
        "###---......",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (6, PauseStarted(6 * F)),
            (10, EndOfTurn(6 * F, 11 * F)),
        ],
    ),
    Case(
        "hysteresis: between-threshold frames do not resume a pause",
        "###.-.-.",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
        ],
    ),
    Case(
        "thresholds are inclusive",
        "===~~~......",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (6, PauseStarted(6 * F)),
            (10, EndOfTurn(6 * F, 11 * F)),
        ],
    ),
    Case(
        "end silence: one frame short of the boundary",
        "###....",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
        ],
    ),
    Case(
        "end silence: exactly on the boundary",
        "###.....",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
        ],
    ),
    Case(
        "end silence not a whole number of frames rounds up",
        "###.....",
        cfg=VADConfig(min_speech_ms=60, end_silence_ms=90, pre_roll_ms=40),
        expected=[
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
        ],
    ),
    Case(
        "end silence shorter than a frame: pause and end on the same frame",
        "###.",
        cfg=VADConfig(min_speech_ms=60, end_silence_ms=32),
        frame=512,
        expected=[
            (1, SpeechStarted(0, 0, 2 * 512)),
            (3, PauseStarted(3 * 512)),
            (3, EndOfTurn(3 * 512, 4 * 512)),
        ],
    ),
    Case(
        "min_speech_ms=0 starts on the first voiced frame",
        "..#.....",
        cfg=VADConfig(min_speech_ms=0, end_silence_ms=100, pre_roll_ms=0),
        expected=[
            (2, SpeechStarted(2 * F, 2 * F, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
        ],
    ),
    Case(
        "second turn's pre-roll is clamped to the previous turn's end",
        "###.....#####......",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
            (10, SpeechStarted(onset_sample=8 * F, start_sample=8 * F, decided_sample=11 * F)),
            (13, PauseStarted(13 * F)),
            (17, EndOfTurn(13 * F, 18 * F)),
        ],
    ),
    Case(
        "second turn with enough gap gets its full pre-roll",
        "###......#####",
        [
            (2, SpeechStarted(0, 0, 3 * F)),
            (3, PauseStarted(3 * F)),
            (7, EndOfTurn(3 * F, 8 * F)),
            (11, SpeechStarted(onset_sample=9 * F, start_sample=8 * F, decided_sample=12 * F)),
        ],
    ),
    # 8 kHz, Silero's 256-sample (32 ms) frames with the default config:
    # min speech 150 ms = 1200 samples -> 5 frames (1280); end silence 300 ms = 2400 -> 10 frames;
    # pre-roll (150 ms by default) = 1200 samples
    Case(
        "8 kHz, 256-sample frames, defaults",
        "." * 12 + "#####" + "." * 10,
        cfg=VADConfig(end_silence_ms=300),
        rate=8000,
        frame=256,
        expected=[
            (16, SpeechStarted(12 * 256, 12 * 256 - VADConfig().pre_roll_ms * 8, 17 * 256)),
            (17, PauseStarted(17 * 256)),
            (26, EndOfTurn(17 * 256, 27 * 256)),
        ],
    ),
    Case(
        "8 kHz, 256-sample frames, 4 frames is too short",
        "####" + "." * 10,
        cfg=VADConfig(end_silence_ms=300),
        rate=8000,
        frame=256,
        expected=[],
    ),
    # 8 kHz, WebRTC's 240-sample (30 ms) frames: exactly 5 and 10 frames
    Case(
        "8 kHz, 240-sample frames, defaults",
        "#####" + "." * 10,
        cfg=VADConfig(end_silence_ms=300),
        rate=8000,
        frame=240,
        expected=[
            (4, SpeechStarted(0, 0, 5 * 240)),
            (5, PauseStarted(5 * 240)),
            (14, EndOfTurn(5 * 240, 15 * 240)),
        ],
    ),
    Case(
        "8 kHz, 240-sample frames, 9 silent frames are not enough",
        "#####" + "." * 9,
        cfg=VADConfig(end_silence_ms=300),
        rate=8000,
        frame=240,
        expected=[
            (4, SpeechStarted(0, 0, 5 * 240)),
            (5, PauseStarted(5 * 240)),
        ],
    ),
]


def silence_rule(
    expected: list[tuple[int, EndpointAction]], cfg: VADConfig
) -> list[tuple[int, EndpointAction]]:
    """Without a policy every turn ends by the silence rule, which waits ``end_silence_ms``."""
    return [
        (i, dataclasses.replace(a, wait_ms=cfg.end_silence_ms) if isinstance(a, EndOfTurn) else a)
        for i, a in expected
    ]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_table(case: Case) -> None:
    assert run(case.pattern, case.cfg, case.rate, case.frame) == silence_rule(case.expected, case.cfg)


def test_properties_follow_the_turn() -> None:
    ep = Endpointer(CFG, 16000, F)
    seen: list[tuple[int, bool, int | None]] = []
    for ch in "..###..#.....":
        ep.update(PROB[ch])
        seen.append((ep.position, ep.in_turn, ep.speech_end_sample))
    assert seen == [
        (1 * F, False, None),
        (2 * F, False, None),
        (3 * F, False, None),  # candidate run, not a turn yet
        (4 * F, False, None),
        (5 * F, True, 5 * F),  # SpeechStarted
        (6 * F, True, 5 * F),  # PauseStarted
        (7 * F, True, 5 * F),
        (8 * F, True, 8 * F),  # SpeechResumed
        (9 * F, True, 8 * F),
        (10 * F, True, 8 * F),
        (11 * F, True, 8 * F),
        (12 * F, True, 8 * F),
        (13 * F, False, None),  # EndOfTurn
    ]


def test_reset_forgets_everything() -> None:
    ep = Endpointer(CFG, 16000, F)
    run("###.....###.", ep=ep)  # one finished turn, a second one in progress
    assert ep.in_turn
    ep.reset()
    assert (ep.position, ep.in_turn, ep.speech_end_sample) == (0, False, None)
    # position restarts at 0 and the previous turn's end no longer clamps the pre-roll
    assert run("..###......", ep=ep) == silence_rule(
        [
            (4, SpeechStarted(2 * F, 0, 5 * F)),
            (5, PauseStarted(5 * F)),
            (9, EndOfTurn(5 * F, 10 * F)),
        ],
        CFG,
    )


def test_reset_discards_a_candidate_run() -> None:
    ep = Endpointer(CFG, 16000, F)
    run("##", ep=ep)
    ep.reset()
    assert run("#.....", ep=ep) == []


def test_begin_starts_a_turn_the_voiced_count_has_not() -> None:
    # one voiced frame, then (the next frame, "-", between the thresholds) barge-in paused a
    # reply: too short a run for a turn, so begin() starts one, its onset 1 frame before the
    # next, with the pre-roll
    ep = Endpointer(CFG, 16000, F)
    assert run("....#", ep=ep) == []
    assert ep.begin(1) == [SpeechStarted(4 * F, 2 * F, 5 * F)]
    assert ep.in_turn and ep.begin(1) == []  # nothing while a turn is open
    # it goes on as any turn: the next frame is its own, then it ends on silence
    assert run("-......", ep=ep) == silence_rule(
        [(1, PauseStarted(6 * F)), (5, EndOfTurn(6 * F, 11 * F))], CFG
    )


def test_begin_starts_no_earlier_than_the_last_turn_ended() -> None:
    ep = Endpointer(CFG, 16000, F)
    run("###.....", ep=ep)  # a turn that ended at frame 8 (decided at its end)
    assert not ep.in_turn
    assert ep.begin(5) == [SpeechStarted(8 * F, 8 * F, 8 * F)]


def test_every_turn_is_well_formed_on_a_long_random_stream() -> None:
    import random

    rng = random.Random(7)
    ep = Endpointer(VADConfig(), 16000, 512)
    actions: list[EndpointAction] = []
    p = 0.0
    for _ in range(20_000):
        p = min(1.0, max(0.0, p + rng.uniform(-0.3, 0.3)))
        actions.extend(ep.update(p))
    kinds = [type(a) for a in actions]
    assert kinds.count(SpeechStarted) >= 10
    in_turn = False
    last_end = 0
    for a in actions:
        match a:
            case SpeechStarted(onset, start, decided):
                assert not in_turn and last_end <= start <= onset < decided
                in_turn = True
            case PauseStarted(end) | SpeechResumed(end):
                assert in_turn and end % 512 == 0
            case EndOfTurn(speech_end, decided):
                assert in_turn and speech_end < decided
                in_turn, last_end = False, decided
    assert in_turn == ep.in_turn


def test_bad_frame_size_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Endpointer(CFG, 16000, 0)
