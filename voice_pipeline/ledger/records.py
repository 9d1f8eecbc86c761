"""What the ledger says about a finished turn: typed, frozen, JSON both ways.

:class:`TurnRecord` is one turn's record (the ledger builds it:
:meth:`voice_pipeline.ledger.ledger.TurnLedger.finish`); :meth:`TurnRecord.as_dict` is its JSON
form -- the ``record`` of the ``turn.latency`` message (docs/protocol.md), of the realtime
``voice_pipeline.turn.latency`` event, of ``voice-pipeline run --report`` -- and
:meth:`TurnRecord.from_dict` its inverse, what clients and the bench read. Names that are
a closed set are enums (string-valued, so JSON and comparisons with strings still work):
the stages (:class:`StageName`), the compute spans (:class:`Span`), the stage that failed
(:class:`FailedStage`), what an utterance over a reply was (:class:`InterruptionKind`),
and the rule and cue that ended the user's turn (:class:`~vad.end_of_turn.Rule`,
:class:`~vad.end_of_turn.Cue`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vad.end_of_turn import Cue, Rule
from voice_pipeline.turntaking.bargein import InterruptionKind


class StageName(enum.StrEnum):
    """The ledger's stages (voice_pipeline.ledger.ledger.STAGES)."""

    ENDPOINTING = "endpointing"
    ASR_FINAL = "asr_final"
    LLM_FIRST_TOKEN = "llm_first_token"
    FIRST_CLAUSE = "first_clause"
    TTS_FIRST_AUDIO = "tts_first_audio"
    TRANSPORT = "transport"
    VOICE_TO_VOICE = "voice_to_voice"
    ASKED_TO_AUDIO = "asked_to_audio"  # a reply asked for directly: asked -> its first audio sent
    BARGE_IN_STOP = "barge_in_stop"
    # a turn whose reply called a server-side tool before its first clause
    # (voice_pipeline.ledger.ledger.TOOL_PATH: they replace first_clause)
    TOOL_CALL = "tool_call"
    TOOL = "tool"
    TOOL_ANSWER = "tool_answer"


class Span(enum.StrEnum):
    """Model compute on the voice-to-voice path (voice_pipeline.ledger.ledger.critical_path)."""

    ENDPOINT_WAIT = "endpoint_wait"  # the VAD hangover + the silence the end-of-turn rule required
    ASR_FINAL = "asr_final"  # the final ASR decode that was used
    LLM = "llm"  # the LLM, from its request to the first clause (or to its calls)
    TOOL = "tool"  # the server-side tools of the reply's first round of calls
    LLM_ANSWER = "llm_answer"  # the LLM asked again with the tools' results, to the first clause
    TTS = "tts"  # Piper on the first clause


class FailedStage(enum.StrEnum):
    """The stage that failed in a failed turn."""

    ASR = "asr"
    LLM = "llm"
    TTS = "tts"
    TOOL = "tool"  # every server-side call of a round raised or timed out
    REPLY = "reply"  # the reply failed outside a model (a bug)


def _enum_keys(kind: type[enum.StrEnum], values: Mapping[str, float]) -> dict[Any, float]:
    """``values`` keyed by ``kind`` (keys a newer server sends that this one does not know are dropped)."""
    known = {m.value for m in kind}
    return {kind(k): v for k, v in values.items() if k in known}


@dataclass(frozen=True, slots=True)
class BudgetBreach:
    stage: StageName
    duration_ms: float
    budget_ms: float


@dataclass(frozen=True, slots=True)
class WorkAccount:
    """Work done for a turn and how much of it reached the listener."""

    llm_tokens: int
    audio_synthesized_s: float
    audio_heard_s: float
    text_chars: int
    heard_chars: int

    @property
    def wasted_audio_s(self) -> float:  # to the ms, so that the record's three figures add up
        return max(0.0, round(self.audio_synthesized_s, 3) - round(self.audio_heard_s, 3))

    @property
    def wasted_tokens(self) -> int:
        if self.text_chars == 0:
            return self.llm_tokens
        return round(self.llm_tokens * (1 - self.heard_chars / self.text_chars))


#: the ends of turn the user undid that a turn's record keeps (its first ones; ``continuations``
#: counts them all): a turn is bounded by ``vad.max_turn_s``, its record by this
UNDONE_KEPT = 16


@dataclass(frozen=True, slots=True)
class EndOfTurnRecord:
    """How the user's turn was decided over (see vad/end_of_turn.py)."""

    #: the rule that ended it
    rule: Rule
    #: silence from the VAD's last voiced frame to the decision, ms
    silence_ms: float
    #: the silence the rule required, ms (0 for push-to-talk and the maximum length)
    wait_ms: float
    #: the turn model's P(complete) of the last pause (None: no model, or not back)
    p_complete: float | None
    #: what the words of the last pause said (None: not back)
    cue: Cue | None
    #: when the words and the model's answer came back, ms after the VAD's last voiced frame
    words_after_ms: float | None = None
    sound_after_ms: float | None = None
    #: the turn model's own compute time on the last pause, ms
    sound_compute_ms: float | None = None
    #: of ``wait_ms``, what this speaker's patience added (they went on after an earlier end)
    patience_ms: float = 0.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EndOfTurnRecord:
        """The inverse of :meth:`as_dict`."""
        return cls(**{**d, "rule": Rule(d["rule"]), "cue": None if d["cue"] is None else Cue(d["cue"])})

    def as_dict(self) -> dict[str, object]:
        def r(v: float | None, nd: int = 1) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "rule": self.rule,
            "silence_ms": r(self.silence_ms),
            "wait_ms": r(self.wait_ms),
            "p_complete": r(self.p_complete, 3),
            "cue": self.cue,
            "words_after_ms": r(self.words_after_ms),
            "sound_after_ms": r(self.sound_after_ms),
            "sound_compute_ms": r(self.sound_compute_ms),
            "patience_ms": r(self.patience_ms),
        }


@dataclass(frozen=True, slots=True)
class SpeculationRecord:
    """The turn's speculative replies (voice_pipeline/conversation/speculation.py): prepared during a pause,
    their first chunk held, then released at the endpoint or dropped."""

    prepared: int = 0
    held: int = 0
    released: int = 0
    dropped: int = 0
    #: pauses not speculated on because the machine had no room
    skipped: int = 0
    #: what the dropped ones cost: LLM tokens generated, seconds of audio synthesized
    wasted_tokens: int = 0
    wasted_audio_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What the ledger knows about one finished turn (JSON-ready via :meth:`as_dict`)."""

    turn_id: int
    user_text: str
    assistant_text: str
    heard_text: str
    interrupted: bool
    marks_ns: dict[str, int]
    stages_ms: dict[StageName, float]
    budgets_broken: tuple[BudgetBreach, ...]
    work: WorkAccount
    asr_decode_ms: float
    asr_speculative: bool
    #: the LLM was started on the speculative transcript, before the endpoint
    llm_prefetched: bool = False
    #: this reply was paused by speech that turned out not to be an interruption
    false_interruptions: int = 0
    #: for a user turn spoken over the assistant: what it was
    interruption: InterruptionKind | None = None
    #: the stage that failed, if the turn failed
    failed: FailedStage | None = None
    #: end of user speech -> filler audio sent, if a filler was spoken (not voice_to_voice)
    filler_ms: float | None = None
    #: model compute inside voice_to_voice, per span (ms)
    compute_ms: dict[Span, float] = field(default_factory=dict)
    #: voice_to_voice minus the union of the compute spans (ms); None without voice_to_voice
    overhead_ms: float | None = None
    #: how the user's turn ended (None for a turn that never ended on its own)
    end_of_turn: EndOfTurnRecord | None = None
    #: times the user went on after the end of this turn, before its reply was heard
    #: (the reply was dropped and both parts transcribed as one message)
    continuations: int = 0
    #: how the first :data:`UNDONE_KEPT` of those ends were decided: the rule that ended the turn too soon
    undone_ends: tuple[EndOfTurnRecord, ...] = ()
    #: how long the reply's first audio, ready, waited for a voice that then was not the user
    #: going on (ms; voice_pipeline.turntaking.ending.Continuation.holds): the user's wait, no breach
    first_audio_held_ms: float = 0.0
    #: work of those dropped replies (``work`` is the answer's own)
    discarded_tokens: int = 0
    discarded_audio_s: float = 0.0
    #: the reply's LLM request, as its engine reported it (None: not known): prompt tokens,
    #: how many of them came from the prefix cache, and request -> first token (ms)
    llm_prompt_tokens: int | None = None
    llm_cached_tokens: int | None = None
    llm_prefill_ms: float | None = None
    #: the speculative replies of this turn (None: not recorded)
    speculation: SpeculationRecord | None = None

    def as_dict(self, origin_ns: int = 0, timeline: dict[str, float] | None = None) -> dict[str, object]:
        marks = (
            timeline if timeline is not None else {k: (v - origin_ns) / 1e6 for k, v in self.marks_ns.items()}
        )
        return {
            "turn_id": self.turn_id,
            "user_text": self.user_text,
            "assistant_text": self.assistant_text,
            "heard_text": self.heard_text,
            "interrupted": self.interrupted,
            "marks": {k: round(v, 1) for k, v in marks.items()},
            "stages_ms": {k: round(v, 1) for k, v in self.stages_ms.items()},
            "budgets_broken": [
                {"stage": b.stage, "duration_ms": round(b.duration_ms, 1), "budget_ms": b.budget_ms}
                for b in self.budgets_broken
            ],
            "asr": {"decode_ms": round(self.asr_decode_ms, 1), "speculative": self.asr_speculative},
            "llm": {
                "prefetched": self.llm_prefetched,
                "prompt_tokens": self.llm_prompt_tokens,
                "cached_tokens": self.llm_cached_tokens,
                "prefill_ms": None if self.llm_prefill_ms is None else round(self.llm_prefill_ms, 1),
            },
            "false_interruptions": self.false_interruptions,
            "interruption": self.interruption,
            "failed": self.failed,
            "filler_ms": None if self.filler_ms is None else round(self.filler_ms, 1),
            "end_of_turn": None if self.end_of_turn is None else self.end_of_turn.as_dict(),
            "continuations": self.continuations,
            "undone_ends": [e.as_dict() for e in self.undone_ends],
            "first_audio_held_ms": round(self.first_audio_held_ms, 1),
            "critical_path": {
                "compute_ms": {k: round(v, 1) for k, v in self.compute_ms.items()},
                "overhead_ms": None if self.overhead_ms is None else round(self.overhead_ms, 1),
            },
            "work": {
                "llm_tokens": self.work.llm_tokens,
                "wasted_tokens": self.work.wasted_tokens,
                "audio_synthesized_s": round(self.work.audio_synthesized_s, 3),
                "audio_heard_s": round(self.work.audio_heard_s, 3),
                "wasted_audio_s": round(self.work.wasted_audio_s, 3),
            },
            "discarded": {"llm_tokens": self.discarded_tokens, "audio_s": round(self.discarded_audio_s, 3)},
            "speculation": None if self.speculation is None else dataclasses.asdict(self.speculation),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], origin_ns: int = 0) -> TurnRecord:
        """The inverse of :meth:`as_dict` (``marks``: ms after ``origin_ns``; the work's character
        counts are the texts', as :meth:`TurnLedger.finish` sets them). KeyError: a key is missing."""
        asr, llm, path, work, gone, eot, text, heard = (d[k] for k in _UNPACK)
        kind, failed = d["interruption"], d["failed"]
        return cls(
            **{k: d[k] for k in _PLAIN_KEYS},
            marks_ns={k: origin_ns + round(ms * 1e6) for k, ms in d["marks"].items()},
            stages_ms=_enum_keys(StageName, d["stages_ms"]),
            budgets_broken=tuple(BudgetBreach(StageName(b["stage"]), b["duration_ms"], b["budget_ms"])
                                 for b in d["budgets_broken"] if b["stage"] in set(StageName)),
            work=WorkAccount(*(work[k] for k in _WORK_KEYS), *map(len, (text, heard))),
            asr_decode_ms=asr["decode_ms"], asr_speculative=asr["speculative"],
            **{f"llm_{k}": llm[k] for k in ("prefetched", "prompt_tokens", "cached_tokens", "prefill_ms")},
            interruption=None if kind is None else InterruptionKind(kind),
            failed=None if failed is None else FailedStage(failed),
            compute_ms=_enum_keys(Span, path["compute_ms"]), overhead_ms=path["overhead_ms"],
            end_of_turn=None if eot is None else EndOfTurnRecord.from_dict(eot),
            undone_ends=tuple(EndOfTurnRecord.from_dict(e) for e in d.get("undone_ends", ())),
            discarded_tokens=gone["llm_tokens"], discarded_audio_s=gone["audio_s"],
            speculation=None if d.get("speculation") is None else SpeculationRecord(**d["speculation"]),
        )  # fmt: skip


#: :meth:`TurnRecord.as_dict`'s keys that are the record's fields; those unpacked; the work's figures
_PLAIN_KEYS = ("turn_id", "user_text", "assistant_text", "heard_text", "interrupted",
               "false_interruptions", "filler_ms", "continuations", "first_audio_held_ms")  # fmt: skip
_UNPACK = ("asr", "llm", "critical_path", "work", "discarded", "end_of_turn", "assistant_text", "heard_text")
_WORK_KEYS = ("llm_tokens", "audio_synthesized_s", "audio_heard_s")
