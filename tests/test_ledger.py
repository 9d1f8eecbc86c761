"""The latency ledger: pure, no event loop, timestamps passed in."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.aggregate import SessionLedger, percentile
from voice_pipeline.ledger.ledger import (
    ASKED_TOTAL,
    BARGE_IN_STOP,
    CRITICAL_PATH,
    STAGES,
    TOOL_PATH,
    TOTAL,
    Mark,
    TurnLedger,
    covered_ns,
    critical_path,
    path_of,
    stages_of,
)
from voice_pipeline.ledger.records import BudgetBreach, TurnRecord, WorkAccount
from voice_pipeline.ledger.report import format_turn

MS = 1_000_000
T0 = 5_000 * MS  # a non-zero origin, like time.monotonic_ns()
#: explicit, so the tables below do not move with the defaults
BUDGET = BudgetConfig(
    endpointing_ms=350.0,
    asr_final_ms=150.0,
    llm_first_token_ms=150.0,
    first_clause_ms=250.0,
    tts_first_audio_ms=150.0,
    transport_ms=20.0,
    voice_to_voice_ms=800.0,
)

ORDER = (
    Mark.SPEECH_START,
    Mark.SPEECH_END,
    Mark.ENDPOINT,
    Mark.TRANSCRIPT_FINAL,
    Mark.LLM_FIRST_TOKEN,
    Mark.FIRST_CLAUSE,
    Mark.TTS_FIRST_AUDIO,
    Mark.FIRST_AUDIO_SENT,
    Mark.LLM_DONE,
    Mark.LAST_AUDIO_SENT,
    Mark.TURN_END,
)


def ledger_with(offsets_ms: dict[Mark, int], budget: BudgetConfig = BUDGET) -> TurnLedger:
    led = TurnLedger(1, budget)
    for mark in ORDER:
        if mark in offsets_ms:
            led.mark(mark, T0 + offsets_ms[mark] * MS)
    return led


#: a turn within every budget: stages 320, 80, 100, 200, 90, 10 -> 800 (exactly at the limit)
WITHIN = {
    Mark.SPEECH_START: 0,
    Mark.SPEECH_END: 1000,
    Mark.ENDPOINT: 1320,
    Mark.TRANSCRIPT_FINAL: 1400,
    Mark.LLM_FIRST_TOKEN: 1500,
    Mark.FIRST_CLAUSE: 1700,
    Mark.TTS_FIRST_AUDIO: 1790,
    Mark.FIRST_AUDIO_SENT: 1800,
    Mark.LLM_DONE: 2100,
    Mark.LAST_AUDIO_SENT: 2500,
    Mark.TURN_END: 4000,
}


# ---------------------------------------------------------------- stage arithmetic


def test_stage_table_is_a_consecutive_chain_ending_in_the_total() -> None:
    for a, b in itertools.pairwise(CRITICAL_PATH):
        assert a.end is b.start
    assert CRITICAL_PATH[0].start is TOTAL.start
    assert CRITICAL_PATH[-1].end is TOTAL.end
    # barge_in_stop is off the critical path: it comes after the total
    assert STAGES == (*CRITICAL_PATH, TOTAL, BARGE_IN_STOP)
    assert (BARGE_IN_STOP.start, BARGE_IN_STOP.end) == (Mark.BARGE_IN_ONSET, Mark.FLUSH_SENT)


def test_stage_durations() -> None:
    assert ledger_with(WITHIN).stages_ms() == {
        "endpointing": 320.0,
        "asr_final": 80.0,
        "llm_first_token": 100.0,
        "first_clause": 200.0,
        "tts_first_audio": 90.0,
        "transport": 10.0,
        "voice_to_voice": 800.0,
    }


def test_critical_path_adds_up_exactly_to_voice_to_voice() -> None:
    stages = ledger_with(WITHIN).stages_ms()
    assert sum(stages[s.name] for s in CRITICAL_PATH) == stages["voice_to_voice"]


@pytest.mark.parametrize("seed", range(20))
def test_critical_path_adds_up_for_arbitrary_nanoseconds(seed: int) -> None:
    rng = random.Random(seed)
    led = TurnLedger(1, BUDGET)
    t = rng.randrange(1, 10**15)
    for stage in CRITICAL_PATH:
        led.mark(stage.start, t)
        t += rng.randrange(0, 10**9)
    led.mark(CRITICAL_PATH[-1].end, t)
    stages = led.stages_ms()
    total = sum(stages[s.name] for s in CRITICAL_PATH)
    assert total == pytest.approx(stages["voice_to_voice"], rel=0, abs=1e-6)


MISSING: list[tuple[set[Mark], set[str]]] = [
    (set(), set()),
    ({Mark.TTS_FIRST_AUDIO}, {"tts_first_audio", "transport"}),
    ({Mark.FIRST_AUDIO_SENT}, {"transport", "voice_to_voice"}),
    ({Mark.SPEECH_END}, {"endpointing", "voice_to_voice"}),
    # a turn without words: no LLM, no audio
    (
        {Mark.LLM_FIRST_TOKEN, Mark.FIRST_CLAUSE, Mark.TTS_FIRST_AUDIO, Mark.FIRST_AUDIO_SENT},
        {"llm_first_token", "first_clause", "tts_first_audio", "transport", "voice_to_voice"},
    ),
]


@pytest.mark.parametrize(("missing", "absent"), MISSING)
def test_missing_marks_leave_their_stages_out(missing: set[Mark], absent: set[str]) -> None:
    marks = {m: t for m, t in WITHIN.items() if m not in missing}
    stages = ledger_with(marks).stages_ms()
    # a turn nobody interrupted has no barge_in_stop stage
    assert set(stages) == {s.name for s in STAGES} - absent - {"barge_in_stop"}


def test_first_mark_wins() -> None:
    led = TurnLedger(1, BUDGET)
    led.mark(Mark.SPEECH_END, T0)
    assert led.mark(Mark.ENDPOINT, T0 + 100 * MS) == []
    # a later ENDPOINT that would break the budget is ignored, and reports nothing
    assert led.mark(Mark.ENDPOINT, T0 + 900 * MS) == []
    assert led.get(Mark.ENDPOINT) == T0 + 100 * MS
    assert led.stages_ms()["endpointing"] == 100.0
    # an earlier duplicate is ignored too
    led.mark(Mark.SPEECH_END, T0 - 500 * MS)
    assert led.get(Mark.SPEECH_END) == T0


def test_has_and_get() -> None:
    led = TurnLedger(7, BUDGET)
    assert not led.has(Mark.ENDPOINT)
    assert led.get(Mark.ENDPOINT) is None
    led.mark(Mark.ENDPOINT, 0)  # zero is a valid timestamp, not "missing"
    assert led.has(Mark.ENDPOINT)
    assert led.get(Mark.ENDPOINT) == 0


# ---------------------------------------------------------------- budget breaches

#: (offsets, {mark at which breaches are reported: [(stage, duration_ms, budget_ms)]})
BREACHES: list[tuple[dict[Mark, int], dict[Mark, list[tuple[str, float, float]]]]] = [
    (WITHIN, {}),  # exactly at the budget is not over it
    (
        {**WITHIN, Mark.ENDPOINT: 1351},
        {Mark.ENDPOINT: [("endpointing", 351.0, 350.0)]},
    ),
    (
        # slow transport: its own stage and the total, both at FIRST_AUDIO_SENT
        {**WITHIN, Mark.FIRST_AUDIO_SENT: 1830, Mark.LLM_DONE: 2100},
        {Mark.FIRST_AUDIO_SENT: [("transport", 40.0, 20.0), ("voice_to_voice", 830.0, 800.0)]},
    ),
    (
        # slow ASR shifts everything after it: only asr_final and the total break
        {
            m: (t + 400 if m not in (Mark.SPEECH_START, Mark.SPEECH_END, Mark.ENDPOINT) else t)
            for m, t in WITHIN.items()
        },
        {
            Mark.TRANSCRIPT_FINAL: [("asr_final", 480.0, 150.0)],
            Mark.FIRST_AUDIO_SENT: [("voice_to_voice", 1200.0, 800.0)],
        },
    ),
    (
        {
            **WITHIN,
            Mark.LLM_FIRST_TOKEN: 1551,
            Mark.FIRST_CLAUSE: 1802,
            Mark.TTS_FIRST_AUDIO: 1953,
            Mark.FIRST_AUDIO_SENT: 1960,
        },
        {
            Mark.LLM_FIRST_TOKEN: [("llm_first_token", 151.0, 150.0)],
            Mark.FIRST_CLAUSE: [("first_clause", 251.0, 250.0)],
            Mark.TTS_FIRST_AUDIO: [("tts_first_audio", 151.0, 150.0)],
            Mark.FIRST_AUDIO_SENT: [("voice_to_voice", 960.0, 800.0)],
        },
    ),
]


@pytest.mark.parametrize(("offsets", "expected"), BREACHES)
def test_breaches_are_reported_when_the_stage_end_mark_arrives(
    offsets: dict[Mark, int], expected: dict[Mark, list[tuple[str, float, float]]]
) -> None:
    led = TurnLedger(1, BUDGET)
    everything: list[BudgetBreach] = []
    for mark in ORDER:
        got = led.mark(mark, T0 + offsets[mark] * MS)
        want = [BudgetBreach(*b) for b in expected.get(mark, [])]
        assert got == want, mark
        everything += got
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=0.0)
    assert list(rec.budgets_broken) == everything


def test_end_mark_before_its_start_mark_reports_nothing() -> None:
    led = TurnLedger(1, BUDGET)
    assert led.mark(Mark.ENDPOINT, T0 + 10_000 * MS) == []
    # the stage only completes when its *end* mark arrives; the start arriving later reports nothing
    assert led.mark(Mark.SPEECH_END, T0) == []
    assert led.stages_ms()["endpointing"] == 10_000.0


def test_breach_uses_the_configured_budget() -> None:
    tight = BudgetConfig(endpointing_ms=100.0)
    led = TurnLedger(1, tight)
    led.mark(Mark.SPEECH_END, T0)
    assert led.mark(Mark.ENDPOINT, T0 + 101 * MS) == [BudgetBreach("endpointing", 101.0, 100.0)]


# ---------------------------------------------------------------- barge-in

#: a reply the user spoke over 1.2 s after it started: paused 180 ms after the onset,
#: confirmed later, LLM and TTS stopped with the cancellation
BARGE_IN: dict[Mark, int] = {
    **{m: t for m, t in WITHIN.items() if m not in (Mark.LAST_AUDIO_SENT, Mark.TURN_END)},
    Mark.BARGE_IN_ONSET: 3000,
    Mark.FLUSH_SENT: 3180,
    Mark.BARGE_IN_CONFIRMED: 3700,
    Mark.LLM_ABORTED: 3701,
    Mark.TTS_STOPPED: 3701,
    Mark.TURN_END: 3702,
}
BARGE_IN_ORDER = (
    *(m for m in ORDER if m in BARGE_IN and m is not Mark.TURN_END),
    Mark.BARGE_IN_ONSET,
    Mark.FLUSH_SENT,
    Mark.BARGE_IN_CONFIRMED,
    Mark.LLM_ABORTED,
    Mark.TTS_STOPPED,
    Mark.TURN_END,
)


def test_barge_in_stop_is_onset_to_flush_and_leaves_the_critical_path_alone() -> None:
    led = TurnLedger(1, BUDGET)
    for mark in BARGE_IN_ORDER:
        assert led.mark(mark, T0 + BARGE_IN[mark] * MS) == [], mark
    stages = led.stages_ms()
    assert stages["barge_in_stop"] == 180.0
    assert {k: v for k, v in stages.items() if k != "barge_in_stop"} == ledger_with(WITHIN).stages_ms()
    rec = led.finish(user_text="q", assistant_text="a b", heard_text="a", interrupted=True, audio_heard_s=1.2)
    assert list(rec.marks_ns) == [str(m) for m in BARGE_IN_ORDER]


@pytest.mark.parametrize(
    ("flush_ms", "expected"),
    [(250, []), (251, [BudgetBreach("barge_in_stop", 251.0, 250.0)])],
)
def test_barge_in_stop_breach_is_reported_at_the_flush(flush_ms: int, expected: list[BudgetBreach]) -> None:
    led = TurnLedger(1, BUDGET)
    assert led.mark(Mark.BARGE_IN_ONSET, T0) == []
    assert led.mark(Mark.FLUSH_SENT, T0 + flush_ms * MS) == expected
    # the later barge-in marks end no stage
    for mark in (Mark.BARGE_IN_CONFIRMED, Mark.LLM_ABORTED, Mark.TTS_STOPPED):
        assert led.mark(mark, T0 + 10_000 * MS) == []


def test_a_second_pause_of_the_same_reply_does_not_move_barge_in_stop() -> None:
    led = TurnLedger(1, BUDGET)
    led.mark(Mark.BARGE_IN_ONSET, T0)
    led.mark(Mark.FLUSH_SENT, T0 + 200 * MS)
    # resumed after a backchannel, paused again later: the first pause is the one measured
    assert led.mark(Mark.BARGE_IN_ONSET, T0 + 5_000 * MS) == []
    assert led.mark(Mark.FLUSH_SENT, T0 + 5_900 * MS) == []
    assert led.stages_ms() == {"barge_in_stop": 200.0}


def test_false_interruptions_and_interruption_kind_reach_the_record() -> None:
    led = TurnLedger(4, BUDGET)
    rec = led.finish(user_text="", assistant_text="", heard_text="", interrupted=False, audio_heard_s=0.0)
    assert (rec.false_interruptions, rec.interruption) == (0, None)
    d = rec.as_dict()
    assert (d["false_interruptions"], d["interruption"]) == (0, None)

    led.false_interruptions = 2
    led.interruption = "backchannel"
    rec = led.finish(user_text="uh-huh", assistant_text="", heard_text="", interrupted=False, audio_heard_s=0)
    assert (rec.false_interruptions, rec.interruption) == (2, "backchannel")
    d = rec.as_dict()
    assert (d["false_interruptions"], d["interruption"]) == (2, "backchannel")


def test_session_summary_reports_barge_in_stop_against_its_budget() -> None:
    sl = SessionLedger(BUDGET)
    sl.add(record(1, {"voice_to_voice": 700.0}))
    sl.add(record(2, {"voice_to_voice": 600.0, "barge_in_stop": 180.0}))
    summary = sl.summary()
    assert list(summary) == ["voice_to_voice", "barge_in_stop"]
    assert summary["barge_in_stop"] == {"n": 1.0, "p50": 180.0, "p95": 180.0, "p99": 180.0, "budget": 250.0}


# ---------------------------------------------------------------- percentiles

PERCENTILES: list[tuple[list[float], float, float]] = [
    ([5.0], 0, 5.0),
    ([5.0], 50, 5.0),
    ([5.0], 99, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
    ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # unsorted input
    ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
    ([10.0, 20.0], 95, 19.5),
    ([float(x) for x in range(1, 101)], 95, 95.05),
    ([float(x) for x in range(1, 101)], 99, 99.01),
    ([3.0, 3.0, 3.0], 73, 3.0),
]


@pytest.mark.parametrize(("values", "q", "expected"), PERCENTILES)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))
    assert math.isnan(percentile(iter(()), 99))


def test_percentile_accepts_any_iterable() -> None:
    assert percentile((float(x) for x in (3, 1, 2)), 50) == 2.0


# ---------------------------------------------------------------- session ledger


def record(turn_id: int, stages_ms: dict[str, float]) -> TurnRecord:
    return TurnRecord(
        turn_id, "q", "a", "a", False, {}, stages_ms, (), WorkAccount(0, 0.0, 0.0, 0, 0), 0.0, False
    )


def test_session_summary() -> None:
    sl = SessionLedger(BUDGET)
    assert sl.summary() == {}
    for i, ms in enumerate([100.0, 200.0, 300.0, 400.0], 1):
        sl.add(record(i, {"endpointing": ms, "voice_to_voice": ms * 2}))
    sl.add(record(5, {}))  # a turn without stages counts nowhere
    summary = sl.summary()
    assert list(summary) == ["endpointing", "voice_to_voice"]  # stage order, present ones only
    assert summary["endpointing"] == {"n": 4.0, "p50": 250.0, "p95": 385.0, "p99": 397.0, "budget": 350.0}
    assert summary["voice_to_voice"]["p50"] == 500.0
    assert summary["voice_to_voice"]["budget"] == 800.0


def test_session_summary_rounds_to_a_tenth() -> None:
    sl = SessionLedger(BUDGET)
    sl.add(record(1, {"transport": 1.23456}))
    assert sl.summary()["transport"]["p50"] == 1.2


def test_new_turn_uses_the_session_budget() -> None:
    sl = SessionLedger(BudgetConfig(transport_ms=1.0))
    led = sl.new_turn(3)
    assert led.turn_id == 3
    led.mark(Mark.TTS_FIRST_AUDIO, T0)
    assert led.mark(Mark.FIRST_AUDIO_SENT, T0 + 2 * MS) == [BudgetBreach("transport", 2.0, 1.0)]


# ---------------------------------------------------------------- work account

WORK: list[tuple[WorkAccount, int, float]] = [
    # (account, wasted tokens, wasted audio s)
    (WorkAccount(40, 4.0, 4.0, 100, 100), 0, 0.0),  # everything heard
    (WorkAccount(40, 4.0, 1.0, 100, 25), 30, 3.0),  # a quarter heard
    (WorkAccount(40, 4.0, 0.0, 100, 0), 40, 4.0),  # nothing heard
    (WorkAccount(7, 0.0, 0.0, 0, 0), 7, 0.0),  # tokens but no text: all wasted
    (WorkAccount(3, 1.0, 1.5, 10, 5), 2, 0.0),  # rounding; heard more than synthesized -> 0
]


@pytest.mark.parametrize(("work", "tokens", "audio_s"), WORK)
def test_work_account(work: WorkAccount, tokens: int, audio_s: float) -> None:
    assert work.wasted_tokens == tokens
    assert work.wasted_audio_s == pytest.approx(audio_s)


# ---------------------------------------------------------------- records


def finished(offsets: dict[Mark, int] = WITHIN) -> TurnRecord:
    led = ledger_with(offsets)
    led.llm_tokens = 12
    led.audio_synthesized_s = 2.5
    led.asr_decode_ms = 42.26
    led.asr_speculative = True
    return led.finish(
        user_text="what time is it",
        assistant_text="It is noon. Anything else?",
        heard_text="It is noon.",
        interrupted=True,
        audio_heard_s=1.0,
    )


def test_finish_builds_the_record() -> None:
    rec = finished()
    assert rec.turn_id == 1
    assert list(rec.marks_ns) == [str(m) for m in ORDER]  # sorted by time, keys are strings
    assert rec.marks_ns["endpoint"] == T0 + 1320 * MS
    assert rec.stages_ms == ledger_with(WITHIN).stages_ms()
    assert rec.work == WorkAccount(12, 2.5, 1.0, len("It is noon. Anything else?"), len("It is noon."))
    assert rec.asr_speculative is True


def test_finish_sorts_marks_by_time_not_by_arrival() -> None:
    led = TurnLedger(1, BUDGET)
    led.mark(Mark.ENDPOINT, T0 + 300 * MS)
    led.mark(Mark.SPEECH_START, T0)
    led.mark(Mark.SPEECH_END, T0 + 200 * MS)
    rec = led.finish(user_text="", assistant_text="", heard_text="", interrupted=False, audio_heard_s=0)
    assert list(rec.marks_ns) == ["speech_start", "speech_end", "endpoint"]


def test_as_dict_relative_to_an_origin() -> None:
    d = finished().as_dict(origin_ns=T0)
    assert d["turn_id"] == 1
    assert d["user_text"] == "what time is it"
    assert d["heard_text"] == "It is noon."
    assert d["interrupted"] is True
    assert d["marks"] == {str(m): float(WITHIN[m]) for m in ORDER}
    assert d["stages_ms"] == ledger_with(WITHIN).stages_ms()
    assert d["budgets_broken"] == []
    assert d["asr"] == {"decode_ms": 42.3, "speculative": True}
    text, heard = len("It is noon. Anything else?"), len("It is noon.")
    assert d["work"] == {
        "llm_tokens": 12,
        "wasted_tokens": round(12 * (1 - heard / text)),
        "audio_synthesized_s": 2.5,
        "audio_heard_s": 1.0,
        "wasted_audio_s": 1.5,
    }


def test_as_dict_with_a_timeline_uses_it_instead_of_the_marks() -> None:
    timeline = {"speech_end": 1234.56, "endpoint": 1567.84}
    d = finished().as_dict(origin_ns=T0, timeline=timeline)
    assert d["marks"] == {"speech_end": 1234.6, "endpoint": 1567.8}
    # an empty timeline is a timeline, not "no timeline"
    assert finished().as_dict(timeline={})["marks"] == {}


def test_as_dict_lists_breaches_rounded() -> None:
    rec = finished({**WITHIN, Mark.ENDPOINT: 1351})
    d = rec.as_dict()
    assert d["budgets_broken"] == [{"stage": "endpointing", "duration_ms": 351.0, "budget_ms": 350.0}]
    # without an origin the marks are absolute ms
    marks = d["marks"]
    assert isinstance(marks, dict)
    assert marks["speech_end"] == round((T0 + 1000 * MS) / 1e6, 1)


# ---------------------------------------------------------------- critical path


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], 0),
        ([(0, 10)], 10),
        ([(-5, 3)], 3),  # clipped to the window
        ([(95, 200)], 5),
        ([(10, 20), (15, 30)], 20),  # overlaps count once
        ([(10, 20), (30, 40)], 20),
        ([(30, 40), (10, 20), (12, 18)], 20),  # order and nesting do not matter
        ([(200, 300)], 0),
        ([(50, 40)], 0),  # empty
    ],
)
def test_covered_ns(spans: list[tuple[int, int]], expected: int) -> None:
    assert covered_ns(0, 100, spans) == expected


def test_critical_path_overhead_is_the_uncovered_part_of_voice_to_voice() -> None:
    marks = {Mark.SPEECH_END: 1_000_000_000, Mark.FIRST_AUDIO_SENT: 1_600_000_000}
    spans = {
        "endpoint_wait": (1_000_000_000, 1_300_000_000),
        "asr_final": (1_050_000_000, 1_150_000_000),  # hidden in the wait
        "llm": (1_150_000_000, 1_450_000_000),
        "tts": (1_480_000_000, 1_580_000_000),
    }
    path = critical_path(marks, spans)
    assert path is not None
    compute, overhead = path
    assert compute == {"endpoint_wait": 300.0, "asr_final": 100.0, "llm": 300.0, "tts": 100.0}
    assert overhead == 50.0  # 1450-1480 and 1580-1600
    assert critical_path({Mark.SPEECH_END: 5}, spans) is None


def test_turn_record_carries_compute_and_overhead() -> None:
    led = TurnLedger(1, BudgetConfig())
    led.mark(Mark.SPEECH_END, 0)
    led.compute("llm", 10_000_000, 50_000_000)
    led.compute("llm", 0, 90_000_000)  # the first span of a name wins
    led.mark(Mark.FIRST_AUDIO_SENT, 100_000_000)
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1.0)
    assert rec.compute_ms == {"llm": 40.0}
    assert rec.overhead_ms == 60.0
    assert rec.as_dict()["critical_path"] == {"compute_ms": {"llm": 40.0}, "overhead_ms": 60.0}


# ---------------------------------------------------------------- a reply asked for directly

#: a reply asked for (response.create) as push-to-talk asks it, with its audio just committed:
#: its words take 180 ms to come back, then 60, 120, 90, 10 -> 460 ms asked -> audio
ASKED = {
    Mark.REPLY_ASKED: 0,
    Mark.TRANSCRIPT_FINAL: 180,
    Mark.LLM_FIRST_TOKEN: 240,
    Mark.FIRST_CLAUSE: 360,
    Mark.TTS_FIRST_AUDIO: 450,
    Mark.FIRST_AUDIO_SENT: 460,
}


def asked_ledger(offsets_ms: dict[Mark, int], budget: BudgetConfig = BUDGET) -> TurnLedger:
    led = TurnLedger(1, budget)
    for mark, ms in sorted(offsets_ms.items(), key=lambda kv: kv[1]):
        led.mark(mark, T0 + ms * MS)
    return led


def test_an_asked_reply_s_stages_start_when_asked_and_add_up_to_asked_to_audio() -> None:
    """It has no user speech of its own: no endpointing and no voice_to_voice, but its wait
    for the words (asr_final), the LLM, the clause, Piper and the transport, which add up to
    ``asked_to_audio`` (before, it had only the last three, and no total)."""
    led = asked_ledger(ASKED)
    assert [s.name for s in path_of(ASKED)] == ["asr_final", *(s.name for s in CRITICAL_PATH[2:])]
    stages = led.stages_ms()
    assert stages == {
        "asr_final": 180.0,
        "llm_first_token": 60.0,
        "first_clause": 120.0,
        "tts_first_audio": 90.0,
        "transport": 10.0,
        "asked_to_audio": 460.0,
    }
    assert sum(stages[s.name] for s in path_of(ASKED)) == stages[ASKED_TOTAL.name]
    assert stages_of(ASKED)[-2:] == (ASKED_TOTAL, BARGE_IN_STOP)
    assert "voice_to_voice" not in stages  # the summary's voice-to-voice is people's speech only


def test_an_asked_reply_breaks_its_own_budget_and_a_held_wait_is_not_a_breach() -> None:
    budget = BudgetConfig(asked_to_audio_ms=400.0, asr_final_ms=200.0)
    (breach,) = [b for b in asked_ledger(ASKED, budget).finish(
        user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1.0
    ).budgets_broken if b.stage == "asked_to_audio"]  # fmt: skip
    assert (breach.duration_ms, breach.budget_ms) == (460.0, 400.0)
    # queued behind another reply that was playing: its first audio waited 2 s, by rule
    led = TurnLedger(1, budget)
    for mark, ms in ASKED.items():
        if mark is Mark.FIRST_AUDIO_SENT:
            led.held_first_audio(2000.0)
            ms += 2000
        led.mark(mark, T0 + ms * MS)
    rec = led.finish(user_text="q", assistant_text="a", heard_text="a", interrupted=False, audio_heard_s=1.0)
    assert rec.stages_ms["asked_to_audio"] == 2460.0 and rec.first_audio_held_ms == 2000.0
    assert [b.stage for b in rec.budgets_broken] == ["asked_to_audio"]  # the 60 ms over, not the wait
    assert rec.budgets_broken[0].budget_ms == 2400.0


def test_an_asked_reply_s_overhead_is_measured_from_the_ask() -> None:
    marks = {Mark.REPLY_ASKED: 0, Mark.FIRST_AUDIO_SENT: 400 * MS}
    path = critical_path(marks, {"llm": (0, 300 * MS), "tts": (300 * MS, 380 * MS)})
    assert path is not None and path[1] == 20.0


def test_an_asked_reply_with_a_tool_before_its_words_follows_the_tool_path() -> None:
    marks = {Mark.REPLY_ASKED: 0, Mark.TRANSCRIPT_FINAL: 1, Mark.TOOL_START: 5, Mark.FIRST_CLAUSE: 9}
    assert [s.name for s in path_of(marks)] == [
        "asr_final", "llm_first_token", "tool_call", "tool", "tool_answer", "tts_first_audio", "transport"
    ]  # fmt: skip
    assert path_of({Mark.SPEECH_END: 0, Mark.TOOL_START: 5, Mark.FIRST_CLAUSE: 9}) == TOOL_PATH


def test_the_report_shows_an_asked_reply_s_stages_and_total() -> None:
    stages = {"asr_final": 180, "llm_first_token": 60, "first_clause": 120, "tts_first_audio": 90,
              "transport": 10, "asked_to_audio": 460}  # fmt: skip
    text = format_turn({"turn_id": 2, "user_text": "q", "assistant_text": "a", "stages_ms": stages}, BUDGET)
    rows = [line.split()[0] for line in text.splitlines()[4:] if not line.strip().startswith("-")]
    assert rows == list(stages)
    assert text.splitlines()[-1].split()[1:] == ["460", "500"]  # asked_to_audio against its own budget
