"""TurnRecord.from_dict is the inverse of as_dict (pure): every field there and back."""

from __future__ import annotations

import dataclasses

import pytest
from records import full_record, turn_record

from vad.end_of_turn import Cue, Rule
from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import Mark, TurnLedger
from voice_pipeline.ledger.records import EndOfTurnRecord, TurnRecord, WorkAccount

ORIGINS = [0, 5_000_000_000, 123_456_789_012]


def test_the_full_record_sets_every_field() -> None:
    rec = full_record()
    for f in dataclasses.fields(TurnRecord):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(rec, f.name) != default, f"full_record leaves {f.name} at its default"
    eot = rec.end_of_turn
    assert eot is not None and all(getattr(eot, f.name) is not None for f in dataclasses.fields(eot))


@pytest.mark.parametrize("origin", ORIGINS)
def test_from_dict_inverts_as_dict_for_every_field(origin: int) -> None:
    rec = full_record(origin_ns=origin)
    d = rec.as_dict(origin)
    assert TurnRecord.from_dict(d, origin).as_dict(origin) == d
    assert TurnRecord.from_dict(d).as_dict() == d  # on the session's own timeline (origin 0)
    assert TurnRecord.from_dict(d, origin).marks_ns.keys() == rec.marks_ns.keys()


def test_a_record_on_the_wire_grid_comes_back_equal() -> None:
    grid = TurnRecord.from_dict(full_record().as_dict())
    assert TurnRecord.from_dict(grid.as_dict()) == grid
    assert grid.marks_ns == {"speech_end": 1_000_100_000, "first_audio_sent": 1_735_000_000}  # 0.1 ms
    assert grid.work == WorkAccount(17, 2.5, 1.001, len(grid.assistant_text), len(grid.heard_text))
    assert grid.end_of_turn == EndOfTurnRecord(
        Rule.UNSURE, 612.3, 600.0, 0.457, Cue.COMPLETE, 80.0, 120.1, 33.3, patience_ms=350.0
    )
    assert grid.undone_ends == (
        EndOfTurnRecord(Rule.COMPLETE, 256.0, 250.0, 0.951, Cue.NEUTRAL, 150.1, 220.0, 60.1),
    )


def test_wasted_audio_is_what_the_record_shows_synthesized_minus_heard() -> None:
    # 2.50049 s synthesized, 1.00051 s heard: shown as 2.5 and 1.001, so 1.499 wasted (not 1.500)
    d = full_record().as_dict()["work"]
    assert isinstance(d, dict)
    assert (d["audio_synthesized_s"], d["audio_heard_s"], d["wasted_audio_s"]) == (2.5, 1.001, 1.499)


def test_a_blank_record_and_one_the_ledger_finished_come_back_too() -> None:
    led = TurnLedger(4, BudgetConfig())
    led.mark(Mark.SPEECH_END, 10_000_000)
    led.mark(Mark.ENDPOINT, 10_350_000)
    led.llm_tokens = 5
    finished = led.finish(user_text="hi", assistant_text="Hello!", heard_text="Hel", interrupted=True,
                          audio_heard_s=0.25)  # fmt: skip
    for rec in (turn_record(2), finished):
        assert TurnRecord.from_dict(rec.as_dict(3)).as_dict() == rec.as_dict(3)


@pytest.mark.parametrize("key", ["turn_id", "marks", "work", "llm", "end_of_turn", "discarded"])
def test_a_missing_key_is_a_key_error(key: str) -> None:
    d = full_record().as_dict()
    del d[key]
    with pytest.raises(KeyError):
        TurnRecord.from_dict(d)


def test_a_continued_turn_keeps_each_end_the_user_undid_and_ends_with_the_last() -> None:
    led = TurnLedger(5, BudgetConfig())
    first = EndOfTurnRecord(Rule.COMPLETE, 256.0, 250.0, 0.95, Cue.NEUTRAL)
    second = EndOfTurnRecord(Rule.UNSURE, 512.0, 500.0, 0.2, Cue.COMPLETE, patience_ms=250.0)
    final = EndOfTurnRecord(Rule.INCOMPLETE, 2016.0, 2000.0, 0.01, Cue.NEUTRAL)
    for undone in (first, second):
        led.end_of_turn = undone
        led.continued(tokens=3, audio_s=0.5)
        assert led.end_of_turn is None
    led.end_of_turn = final
    rec = led.finish(
        user_text="a b c", assistant_text="ok", heard_text="ok", interrupted=False, audio_heard_s=1.0
    )
    assert rec.continuations == 2 and rec.undone_ends == (first, second) and rec.end_of_turn == final
    assert [e["rule"] for e in rec.as_dict()["undone_ends"]] == ["complete", "unsure"]  # type: ignore[index]
