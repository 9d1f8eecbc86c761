"""The latency budget ledger: where every millisecond of every turn went.

Pure logic: callers pass ``time.monotonic_ns()`` timestamps in; nothing here
reads a clock. A :class:`TurnLedger` collects the marks of one turn, derives the
stage durations, and reports each budget a stage breaks the moment its end mark
arrives (a :class:`BudgetBreach` the runtime turns into an event). The critical
path stages are consecutive intervals between marks, so they add up exactly to
``voice_to_voice`` (true end of user speech -> first reply audio sent):

    speech_end -> endpoint -> transcript_final -> llm_first_token
               -> first_clause -> tts_first_audio -> first_audio_sent

A turn whose reply called a server-side tool before its first clause follows
:data:`TOOL_PATH`: the LLM writes its calls (``tool_call``), the tools run (``tool``),
the LLM answers with their results (``tool_answer``), which replace ``first_clause``:

    ... -> llm_first_token -> tool_start -> tool_done -> first_clause -> ...

A reply asked for directly (``Session.respond``: a realtime client's ``response.create``)
has no user speech of its own. Its path starts when it is asked, and its total is
``asked_to_audio``; ``asr_final`` is then the wait for the words it reads (push-to-talk:
the committed audio's transcript; none for typed text):

    reply_asked -> transcript_final -> llm_first_token -> ... -> first_audio_sent

A session's :class:`~voice_pipeline.ledger.aggregate.SessionLedger` keeps the latest
completed turns' records and per-stage aggregates over the whole session.

Fixed phrases do not count as the reply: a late reply's filler has its own mark
(``filler_sent``) and figure (:attr:`TurnRecord.filler_ms`), a failed turn's apology is
``apology_sent``; ``voice_to_voice`` ends at the reply's own first audio only.

Where latency is measured: every mark and the one place that sets it (the session's
clock; input times are capture stamps, :meth:`voice_pipeline.inputbuf.InputHistory.time_of`)::

    speech_start        turn.Turn.begin            capture time of the turn's first voiced frame
    speech_end          turn.Turn.end              capture time of the acoustic end (Listener.acoustic_end)
    endpoint            turn.Turn.end              the end of turn is carried out (the machine's EndTurn)
    reply_asked         turn.Turn.ask              a reply was asked for directly (the machine's BeginReply)
    transcript_final    turn.Turn.transcribed      the final transcript is in hand (an asked reply:
                        turn.Turn.answer_request   the words it reads are in hand)
    llm_first_token     reply.Reply._generate      the first LLM delta arrives (prefetched or requested)
    first_clause        reply.Reply._generate      the first complete clause is queued for Piper
    tts_first_audio     reply.Reply._speak         its audio is synthesized (or held audio taken)
    audio_held          reply.Reply._speak         a released speculative reply's first chunk was synthesized
                                                   and held (usually before ``endpoint``)
    first_audio_sent    reply.Reply._speak         it was handed to the transport (not paused)
    llm_done            reply.Reply._generate      the LLM stream ended (its last round)
    tool_start          reply.Reply._run_tools     the first round of server-side calls starts
    tool_done           reply.Reply._run_tools     ... and all of its calls are done
    last_audio_sent     reply.Reply._speak         the last clause was handed to the transport
    turn_end            turn.Turn.finish           the reply is over (played, cut or failed)
    barge_in_onset      turn.Turn.pause_reply      onset of the interrupting speech (the barge-in tracker)
    flush_sent          turn.Turn.pause_reply      the transport was told to flush; nothing more is sent
    barge_in_confirmed  turn.Turn.cancel_reply     the interruption was decided for good
    llm_aborted         reply.Reply.run            the reply's task was cancelled (the request aborted) ...
    tts_stopped         reply.Reply.run            ... and synthesis stopped (the same moment)
    filler_sent         reply.Reply._speak         the filler was handed to the transport
    apology_sent        reply.Reply.say            the apology was handed to the transport

A continued turn (the user went on before hearing the reply) forgets every mark but
``speech_start`` (:meth:`TurnLedger.continued`), so its stages measure the final attempt.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.records import (
    UNDONE_KEPT,
    BudgetBreach,
    EndOfTurnRecord,
    FailedStage,
    Span,
    SpeculationRecord,
    StageName,
    TurnRecord,
    WorkAccount,
)
from voice_pipeline.turntaking.bargein import InterruptionKind


class Mark(enum.StrEnum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"  # true end of user speech (last voiced frame)
    ENDPOINT = "endpoint"  # end of turn decided
    REPLY_ASKED = "reply_asked"  # a reply asked for directly (no user speech of its own)
    TRANSCRIPT_FINAL = "transcript_final"
    LLM_FIRST_TOKEN = "llm_first_token"
    FIRST_CLAUSE = "first_clause"  # first clause complete, handed to TTS
    TTS_FIRST_AUDIO = "tts_first_audio"  # first clause synthesized
    FIRST_AUDIO_SENT = "first_audio_sent"  # first reply audio handed to the transport
    AUDIO_HELD = "audio_held"  # a released speculative reply's first chunk was synthesized (and held)
    LLM_DONE = "llm_done"
    TOOL_START = "tool_start"  # the reply's first round of server-side tool calls starts
    TOOL_DONE = "tool_done"  # ... all its calls returned (or failed, or timed out)
    LAST_AUDIO_SENT = "last_audio_sent"
    TURN_END = "turn_end"
    # barge-in, on the interrupted reply's turn
    BARGE_IN_ONSET = "barge_in_onset"  # the interrupting speech began
    FLUSH_SENT = "flush_sent"  # paused: listener told to flush; nothing more is sent
    BARGE_IN_CONFIRMED = "barge_in_confirmed"  # interruption decided for good
    LLM_ABORTED = "llm_aborted"
    TTS_STOPPED = "tts_stopped"
    # fixed phrases (not the reply: never an end of voice_to_voice)
    FILLER_SENT = "filler_sent"  # the filler handed to the transport (the reply was late)
    APOLOGY_SENT = "apology_sent"  # a stage failed: the apology handed to the transport


@dataclass(frozen=True, slots=True)
class Stage:
    name: StageName
    start: Mark
    end: Mark
    budget_key: str  # field of BudgetConfig


#: critical path, in order; consecutive, so the durations add up to the total
CRITICAL_PATH: tuple[Stage, ...] = (
    Stage(StageName.ENDPOINTING, Mark.SPEECH_END, Mark.ENDPOINT, "endpointing_ms"),
    Stage(StageName.ASR_FINAL, Mark.ENDPOINT, Mark.TRANSCRIPT_FINAL, "asr_final_ms"),
    Stage(StageName.LLM_FIRST_TOKEN, Mark.TRANSCRIPT_FINAL, Mark.LLM_FIRST_TOKEN, "llm_first_token_ms"),
    Stage(StageName.FIRST_CLAUSE, Mark.LLM_FIRST_TOKEN, Mark.FIRST_CLAUSE, "first_clause_ms"),
    Stage(StageName.TTS_FIRST_AUDIO, Mark.FIRST_CLAUSE, Mark.TTS_FIRST_AUDIO, "tts_first_audio_ms"),
    Stage(StageName.TRANSPORT, Mark.TTS_FIRST_AUDIO, Mark.FIRST_AUDIO_SENT, "transport_ms"),
)
TOTAL = Stage(StageName.VOICE_TO_VOICE, Mark.SPEECH_END, Mark.FIRST_AUDIO_SENT, "voice_to_voice_ms")
#: interrupting speech onset -> the listener flushed and nothing more sent
BARGE_IN_STOP = Stage(StageName.BARGE_IN_STOP, Mark.BARGE_IN_ONSET, Mark.FLUSH_SENT, "barge_in_stop_ms")
STAGES: tuple[Stage, ...] = (*CRITICAL_PATH, TOTAL, BARGE_IN_STOP)
#: a reply asked for directly: it starts when asked; the first stage waits for its words
ASKED_WORDS = Stage(StageName.ASR_FINAL, Mark.REPLY_ASKED, Mark.TRANSCRIPT_FINAL, "asr_final_ms")
ASKED_TOTAL = Stage(StageName.ASKED_TO_AUDIO, Mark.REPLY_ASKED, Mark.FIRST_AUDIO_SENT, "asked_to_audio_ms")
#: the critical path of a turn whose tools ran before its first clause: consecutive too
TOOL_PATH: tuple[Stage, ...] = (
    *CRITICAL_PATH[:3],
    Stage(StageName.TOOL_CALL, Mark.LLM_FIRST_TOKEN, Mark.TOOL_START, "tool_call_ms"),
    Stage(StageName.TOOL, Mark.TOOL_START, Mark.TOOL_DONE, "tool_ms"),
    Stage(StageName.TOOL_ANSWER, Mark.TOOL_DONE, Mark.FIRST_CLAUSE, "tool_answer_ms"),
    *CRITICAL_PATH[4:],
)
TOOL_STAGES: tuple[Stage, ...] = (*TOOL_PATH, TOTAL, BARGE_IN_STOP)
#: every stage a turn may have (each budget is in ``ready``; the session's summary)
ALL_STAGES: tuple[Stage, ...] = (*STAGES, *TOOL_PATH[3:6], ASKED_TOTAL)


def path_of(marks: Mapping[Mark, int] | Mapping[str, int]) -> tuple[Stage, ...]:
    """The critical path of a turn with these marks (consecutive stages): :data:`TOOL_PATH`
    if its tools ran before its first clause, else :data:`CRITICAL_PATH`; an asked reply's
    starts with :data:`ASKED_WORDS` instead of the end of the user's turn."""
    tool, clause = marks.get(Mark.TOOL_START), marks.get(Mark.FIRST_CLAUSE)
    path = TOOL_PATH if tool is not None and (clause is None or clause >= tool) else CRITICAL_PATH
    return (ASKED_WORDS, *path[2:]) if Mark.REPLY_ASKED in marks else path


def stages_of(marks: Mapping[Mark, int] | Mapping[str, int]) -> tuple[Stage, ...]:
    """Every stage of a turn with these marks: its path (:func:`path_of`), the total
    (``voice_to_voice``, or ``asked_to_audio`` for an asked reply) and the barge-in stop."""
    total = ASKED_TOTAL if Mark.REPLY_ASKED in marks else TOTAL
    return (*path_of(marks), total, BARGE_IN_STOP)


#: compute spans on the critical path (see :func:`critical_path`): the end-of-turn wait
#: (VAD hangover + the configured silence), the final ASR decode used, the LLM from its
#: request to the first clause, Piper synthesizing that clause
COMPUTE_SPANS = tuple(Span)


def covered_ns(start: int, end: int, spans: Iterable[tuple[int, int]]) -> int:
    """How much of ``[start, end)`` the union of ``spans`` covers (overlaps count once)."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in spans if min(b, end) > max(a, start))
    total, reach = 0, start
    for a, b in clipped:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def critical_path(
    marks: dict[Mark, int], spans: dict[Span, tuple[int, int]]
) -> tuple[dict[Span, float], float] | None:
    """Model compute on the voice-to-voice path, and the pipeline's overhead.

    The window is ``speech_end -> first_audio_sent`` (``reply_asked -> ...`` for an asked
    reply). Each span is clipped to it; the overhead is the part of the window no span
    covers: time in which no model was working on this reply and no required wait ran
    (queues, scheduling, hand-offs, resampling, the event loop). None when the turn has no total.
    """
    start, end = marks.get(Mark.SPEECH_END, marks.get(Mark.REPLY_ASKED)), marks.get(Mark.FIRST_AUDIO_SENT)
    if start is None or end is None or end < start:
        return None
    compute = {name: covered_ns(start, end, [span]) / 1e6 for name, span in spans.items()}
    return compute, (end - start - covered_ns(start, end, spans.values())) / 1e6


class TurnLedger:
    """Marks of one turn. The first timestamp of a mark wins (later ones are ignored)."""

    def __init__(self, turn_id: int, budget: BudgetConfig) -> None:
        self.turn_id = turn_id
        self._budget = budget
        self._marks: dict[Mark, int] = {}
        self._spans: dict[Span, tuple[int, int]] = {}
        self._breaches: list[BudgetBreach] = []
        self.llm_tokens = 0
        self.audio_synthesized_s = 0.0
        self.asr_decode_ms = 0.0
        self.asr_speculative = False
        self.false_interruptions = 0
        self.interruption: InterruptionKind | None = None
        self.llm_prefetched = False
        self.failed: FailedStage | None = None
        self.end_of_turn: EndOfTurnRecord | None = None
        self.continuations = 0
        self.undone_ends: tuple[EndOfTurnRecord, ...] = ()
        self.first_audio_held_ms = 0.0
        self.discarded_tokens = 0
        self.discarded_audio_s = 0.0
        self._allowance_ms: dict[str, float] = {}
        self.llm_prompt_tokens: int | None = None
        self.llm_cached_tokens: int | None = None
        self.llm_prefill_ms: float | None = None
        self.speculation: SpeculationRecord | None = None

    def llm_request(
        self, prompt_tokens: int | None, cached_tokens: int | None, prefill_ms: float | None
    ) -> None:
        """How the reply's LLM request was served (from its first delta); the first call wins."""
        if self.llm_prompt_tokens is None and self.llm_prefill_ms is None:
            self.llm_prompt_tokens = prompt_tokens
            self.llm_cached_tokens = cached_tokens
            self.llm_prefill_ms = prefill_ms

    def mark(self, mark: Mark, t_ns: int) -> list[BudgetBreach]:
        """Record ``mark`` at ``t_ns``; return the budgets broken by stages it ends."""
        if mark in self._marks:
            return []
        self._marks[mark] = t_ns
        new: list[BudgetBreach] = []
        for stage in stages_of(self._marks):
            if stage.end is not mark or stage.start not in self._marks:
                continue
            ms = (t_ns - self._marks[stage.start]) / 1e6
            budget: float = getattr(self._budget, stage.budget_key) + self._allowance_ms.get(stage.name, 0.0)
            if ms > budget:
                new.append(BudgetBreach(stage.name, ms, budget))
        self._breaches.extend(new)
        return new

    def allow(self, ms: float, *stages: str) -> None:
        """Extend the budget of ``stages`` by ``ms`` for this turn: a wait the end-of-turn
        policy chose on purpose (the user sounded or read unfinished) is not a breach.
        The stage durations are recorded as measured either way."""
        for stage in stages:
            self._allowance_ms[stage] = self._allowance_ms.get(stage, 0.0) + ms

    def held_first_audio(self, ms: float) -> None:
        """The reply's first audio, ready, waited ``ms`` for a voice that was not the user going
        on: part of voice-to-voice (and of the transport stage), not a breach of their budgets."""
        self.first_audio_held_ms += ms
        self.allow(ms, StageName.TRANSPORT, StageName.VOICE_TO_VOICE, StageName.ASKED_TO_AUDIO)

    def continued(self, tokens: int, audio_s: float) -> None:
        """The user went on speaking: the turn is open again. Everything after its speech
        start is forgotten; the dropped reply's work is kept as discarded, its end in ``undone_ends``."""
        self._marks = {m: t for m, t in self._marks.items() if m is Mark.SPEECH_START}
        self._spans.clear()
        self._breaches.clear()
        self._allowance_ms.clear()
        self.continuations += 1
        self.discarded_tokens += tokens
        self.discarded_audio_s += audio_s
        self.llm_tokens, self.first_audio_held_ms = 0, 0.0
        self.audio_synthesized_s = 0.0
        self.asr_decode_ms, self.asr_speculative = 0.0, False
        self.llm_prefetched, self.false_interruptions = False, 0
        if self.end_of_turn is not None:  # kept: how the turn was ended too soon
            self.undone_ends, self.end_of_turn = (*self.undone_ends, self.end_of_turn)[:UNDONE_KEPT], None
        self.llm_prompt_tokens = self.llm_cached_tokens = self.llm_prefill_ms = None

    def compute(self, name: Span, start_ns: int, end_ns: int) -> None:
        """Record a model's compute span on the critical path (the first one of a name wins)."""
        if name not in self._spans and end_ns >= start_ns:
            self._spans[name] = (start_ns, end_ns)

    def has(self, mark: Mark) -> bool:
        return mark in self._marks

    def get(self, mark: Mark) -> int | None:
        return self._marks.get(mark)

    def stages_ms(self) -> dict[StageName, float]:
        """Durations of every stage whose two marks are present."""
        out: dict[StageName, float] = {}
        for stage in stages_of(self._marks):
            a, b = self._marks.get(stage.start), self._marks.get(stage.end)
            if a is not None and b is not None:
                out[stage.name] = (b - a) / 1e6
        return out

    def finish(
        self,
        *,
        user_text: str,
        assistant_text: str,
        heard_text: str,
        interrupted: bool,
        audio_heard_s: float,
    ) -> TurnRecord:
        speech_end, filler = self._marks.get(Mark.SPEECH_END), self._marks.get(Mark.FILLER_SENT)
        path = critical_path(self._marks, self._spans)
        return TurnRecord(
            turn_id=self.turn_id,
            user_text=user_text,
            assistant_text=assistant_text,
            heard_text=heard_text,
            interrupted=interrupted,
            marks_ns={str(k): v for k, v in sorted(self._marks.items(), key=lambda kv: kv[1])},
            stages_ms=self.stages_ms(),
            budgets_broken=tuple(self._breaches),
            work=WorkAccount(
                llm_tokens=self.llm_tokens,
                audio_synthesized_s=self.audio_synthesized_s,
                audio_heard_s=audio_heard_s,
                text_chars=len(assistant_text),
                heard_chars=len(heard_text),
            ),
            asr_decode_ms=self.asr_decode_ms,
            asr_speculative=self.asr_speculative,
            llm_prefetched=self.llm_prefetched,
            false_interruptions=self.false_interruptions,
            interruption=self.interruption,
            failed=self.failed,
            filler_ms=None if speech_end is None or filler is None else (filler - speech_end) / 1e6,
            compute_ms={} if path is None else path[0],
            overhead_ms=None if path is None else path[1],
            end_of_turn=self.end_of_turn,
            continuations=self.continuations,
            undone_ends=self.undone_ends,
            first_audio_held_ms=self.first_audio_held_ms,
            discarded_tokens=self.discarded_tokens,
            discarded_audio_s=self.discarded_audio_s,
            llm_prompt_tokens=self.llm_prompt_tokens,
            llm_cached_tokens=self.llm_cached_tokens,
            llm_prefill_ms=self.llm_prefill_ms,
            speculation=self.speculation,
        )
