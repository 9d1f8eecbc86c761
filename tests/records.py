"""Ledger records for tests: a blank one with the fields a test cares about, or every field set."""

from __future__ import annotations

import dataclasses
from typing import Any

from vad.end_of_turn import Cue, Rule
from voice_pipeline.ledger.records import (
    BudgetBreach,
    EndOfTurnRecord,
    SpeculationRecord,
    TurnRecord,
    WorkAccount,
)


def turn_record(turn_id: int = 1, **fields: Any) -> TurnRecord:
    """A record of nothing (no texts, marks, stages or work) but ``fields``."""
    blank = TurnRecord(
        turn_id=turn_id,
        user_text="",
        assistant_text="",
        heard_text="",
        interrupted=False,
        marks_ns={},
        stages_ms={},
        budgets_broken=(),
        work=WorkAccount(0, 0.0, 0.0, 0, 0),
        asr_decode_ms=0.0,
        asr_speculative=False,
    )
    return dataclasses.replace(blank, **fields)


def full_record(turn_id: int = 3, origin_ns: int = 0) -> TurnRecord:
    """A record with every field set (none at its default), its figures not on the wire's grid."""
    assistant, heard = "It is noon. Anything else?", "It is noon."
    return TurnRecord(
        turn_id=turn_id,
        user_text="what time is it",
        assistant_text=assistant,
        heard_text=heard,
        interrupted=True,
        marks_ns={"speech_end": origin_ns + 1_000_123_456, "first_audio_sent": origin_ns + 1_734_987_654},
        stages_ms={"endpointing": 301.23456, "voice_to_voice": 734.864198},
        budgets_broken=(BudgetBreach("voice_to_voice", 734.864198, 700.0),),
        work=WorkAccount(17, 2.50049, 1.00051, len(assistant), len(heard)),
        asr_decode_ms=42.26,
        asr_speculative=True,
        llm_prefetched=True,
        false_interruptions=2,
        interruption="words",
        failed="tts",
        filler_ms=512.345,
        compute_ms={"endpoint_wait": 280.04, "asr_final": 40.06, "llm": 150.55, "tts": 99.95},
        overhead_ms=164.25,
        end_of_turn=EndOfTurnRecord(
            Rule.UNSURE, 612.34, 600.0, 0.4567, Cue.COMPLETE, 80.04, 120.06, 33.33, patience_ms=350.0
        ),
        continuations=1,
        undone_ends=(
            EndOfTurnRecord(Rule.COMPLETE, 256.04, 250.0, 0.95123, Cue.NEUTRAL, 150.06, 220.04, 60.06),
        ),
        first_audio_held_ms=96.0,
        discarded_tokens=9,
        discarded_audio_s=0.7505,
        llm_prompt_tokens=321,
        llm_cached_tokens=256,
        llm_prefill_ms=88.88,
        speculation=SpeculationRecord(2, 2, 1, 1, 1, 7, 0.512),
    )
