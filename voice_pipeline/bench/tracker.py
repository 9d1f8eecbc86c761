"""One simulated caller's view of its conversation (pure: times are passed in).

The protocol adapters turn what arrives on the wire into the typed events
below, stamped with the moment they arrived; the caller's script tells the
:class:`Tracker` when each turn's speech began and ended on the microphone.
From these the tracker attributes reply audio to turns and derives the
client-side figures:

* voice-to-voice: end of the turn's speech -> the first reply frame with a
  sample above :data:`VOICED_LEVEL` (frame granularity: the offset of that
  sample inside its frame is not added; over /ws a frame is a whole clause
  whose first voiced sample is within ~5 ms of its start, over Twilio 20 ms).
* barge-in stop: onset of the interrupting speech -> the later of the last
  reply audio received for the interrupted turn and its ``audio.clear``
  (``clear`` on Twilio), after which nothing more of it can be heard.
* a premature end of turn: the server made more than one turn of one utterance
  (it answered a fragment of a sentence said with pauses); ends of turn that
  continuation undid (``turn.continued``) are counted apart, and so is the reply
  audio that arrived while the utterance was still being spoken.

Reply audio is attributed by ``turn_id`` where the protocol has one (/ws);
otherwise (Twilio) to the latest turn whose speech had ended when it arrived.

Times here are seconds (``t_s``, ``*_t``) on the event loop's clock (``loop.time()``,
monotonic), not integer ns like the pipeline's events: the bench's microphone is paced by
that clock (``asyncio.sleep``), its figures are reported in s and ms, and nothing here
is ever compared with a server's clock (the server's own times arrive in its records, as
ms since its ``ready``); a double holds loop time to well under a microsecond.
The server's latency records are the ledger's typed :class:`~voice_pipeline.ledger.ledger.TurnRecord`
(parsed from ``turn.latency``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from voice_pipeline.bench.scenario import TurnPlan
from voice_pipeline.ledger.records import TurnRecord

#: a reply sample above this (-50 dBFS of int16 full scale) is voiced
VOICED_LEVEL = 104


@dataclass(frozen=True, slots=True)
class ReplyAudio:
    t_s: float
    turn_id: int | None
    samples: int
    rate_hz: int
    voiced: bool


@dataclass(frozen=True, slots=True)
class SpeechHeard:
    t_s: float
    turn_id: int


@dataclass(frozen=True, slots=True)
class AudioCleared:
    t_s: float
    turn_id: int | None


@dataclass(frozen=True, slots=True)
class TurnRecorded:
    t_s: float
    turn_id: int
    record: TurnRecord


@dataclass(frozen=True, slots=True)
class ReplyCut:
    t_s: float
    turn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class TurnContinuedSeen:
    """/ws ``turn.continued``: the server ended the turn, then heard the speaker go on."""

    t_s: float
    turn_id: int


@dataclass(frozen=True, slots=True)
class TurnFailedReported:
    t_s: float
    turn_id: int
    stage: str
    message: str


WireEvent = (
    ReplyAudio | SpeechHeard | AudioCleared | TurnRecorded | ReplyCut | TurnFailedReported | TurnContinuedSeen
)


@dataclass(slots=True)
class TurnObservation:
    plan: TurnPlan
    onset_t: float | None = None
    end_t: float | None = None
    server_turn_ids: list[int] = field(default_factory=list)
    first_voiced_t: float | None = None
    first_audio_t: float | None = None
    last_audio_t: float | None = None
    audio_s: float = 0.0
    playout_end_t: float = 0.0
    cleared_t: list[float] = field(default_factory=list)
    records: dict[int, TurnRecord] = field(default_factory=dict)
    cut_reasons: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    interrupted_at_t: float | None = None  # onset of the speech that interrupted this reply
    interrupt_skipped: str | None = None
    error: str | None = None
    continued: int = 0  # turn.continued: an end of turn the speaker's going on undid
    #: when this turn's reply audio plays at the listener: (start, end) spans, real time from arrival,
    #: queued behind what still plays, cut where an ``audio.clear`` drops the rest
    playing: list[tuple[float, float]] = field(default_factory=list)

    @property
    def talked_over_s(self) -> float:
        """Reply audio heard while this utterance was being spoken (not the audio that arrived
        then: a reply sent ahead in one burst and cleared when the speaker went on was heard
        only until the clear)."""
        if self.onset_t is None:
            return 0.0
        lo, hi = self.onset_t, self.end_t if self.end_t is not None else float("inf")
        return sum(max(0.0, min(end, hi) - max(start, lo)) for start, end in self.playing)


class Tracker:
    def __init__(self) -> None:
        self.turns: list[TurnObservation] = []
        self._by_tid: dict[int, TurnObservation] = {}

    # ------------------------------------------------------------ the script

    def begin(self, plan: TurnPlan) -> TurnObservation:
        obs = TurnObservation(plan)
        self.turns.append(obs)
        return obs

    def speech_onset(self, obs: TurnObservation, t: float, *, interrupting: bool = False) -> None:
        """``interrupting``: this speech starts while the previous turn's reply plays."""
        obs.onset_t = t
        if interrupting and len(self.turns) >= 2:
            self.turns[-2].interrupted_at_t = t

    def speech_end(self, obs: TurnObservation, t: float) -> None:
        obs.end_t = t

    # ------------------------------------------------------------ the wire

    def feed(self, event: WireEvent) -> None:
        match event:
            case SpeechHeard(turn_id=tid):
                current = self.turns[-1] if self.turns else None
                if current is not None and tid not in self._by_tid:
                    self._by_tid[tid] = current
                    current.server_turn_ids.append(tid)
            case ReplyAudio(t_s=t, turn_id=tid, samples=n, rate_hz=rate, voiced=voiced):
                obs = self._owner(tid, t)
                if obs is None:
                    return
                if obs.first_audio_t is None:
                    obs.first_audio_t = t
                if voiced and obs.first_voiced_t is None and obs.end_t is not None and t >= obs.end_t:
                    obs.first_voiced_t = t
                obs.last_audio_t = t
                obs.audio_s += n / rate
                start = max(obs.playout_end_t, t)
                obs.playout_end_t = start + n / rate
                obs.playing.append((start, obs.playout_end_t))
            case AudioCleared(t_s=t, turn_id=tid):
                obs = self._owner(tid, t, by_audio=True)
                if obs is not None:
                    obs.cleared_t.append(t)
                    obs.playout_end_t = t
                    obs.playing = [(start, min(end, t)) for start, end in obs.playing if start < t]
            case TurnRecorded(turn_id=tid, record=record):
                obs = self._by_tid.get(tid)
                if obs is not None:
                    obs.records[tid] = record
            case ReplyCut(turn_id=tid, reason=reason):
                obs = self._by_tid.get(tid)
                if obs is not None:
                    obs.cut_reasons.append(reason)
            case TurnContinuedSeen(turn_id=tid):
                obs = self._by_tid.get(tid)
                if obs is not None:
                    obs.continued += 1
            case TurnFailedReported(turn_id=tid, stage=stage, message=message):
                obs = self._by_tid.get(tid)
                if obs is not None:
                    obs.failures.append(f"{stage}: {message}")

    def _owner(self, tid: int | None, t: float, *, by_audio: bool = False) -> TurnObservation | None:
        if tid is not None:  # /ws: by turn id (one this caller never saw start is not its own)
            return self._by_tid.get(tid)
        if by_audio:  # a clear without a turn id: the turn whose audio came last
            heard = [o for o in self.turns if o.last_audio_t is not None]
            return max(heard, key=lambda o: o.last_audio_t or 0.0) if heard else None
        ended = [o for o in self.turns if o.end_t is not None and o.end_t <= t]
        return ended[-1] if ended else None

    # ------------------------------------------------------------ questions of the script

    def recorded(self, obs: TurnObservation) -> bool:
        """/ws: every server turn of this utterance has sent its ``turn.latency``."""
        return bool(obs.server_turn_ids) and all(tid in obs.records for tid in obs.server_turn_ids)

    def remaining(self, obs: TurnObservation, now: float) -> float:
        """Seconds of the reply's audio received and not yet played (real-time playout from arrival)."""
        return max(0.0, obs.playout_end_t - now)

    def quiet(self, obs: TurnObservation, now: float, quiet_s: float) -> bool:
        """Twilio: the reply has played out and nothing more came for ``quiet_s``."""
        if obs.last_audio_t is None:
            return False
        return now >= obs.playout_end_t and now - obs.last_audio_t >= quiet_s


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The figures of one turn, JSON-ready through :meth:`as_dict`."""

    session: int
    index: int
    text: str
    interrupts_previous: bool
    interrupt_planned: bool
    interrupt_after_s: float | None
    interrupt_skipped: str | None
    server_turn_ids: tuple[int, ...]
    speech_onset_s: float | None  # on the run's timeline (s since the step began)
    speech_end_s: float | None
    first_voiced_s: float | None
    voice_to_voice_ms: float | None
    barge_in_stop_ms: float | None
    reply_audio_s: float
    cleared: bool
    server_interrupted: bool | None  # from the ledger records (None: no record)
    records: tuple[TurnRecord, ...]
    error: str | None
    #: said with pauses inside (a sentence of --pauses, or a recording with inner silences)
    paused: bool = False
    #: the server made more than one turn of this utterance: a turn ended while the speaker
    #: had more to say (None: the protocol has no turn ids, Twilio)
    premature_end: bool | None = None
    #: ends of turn inside the utterance that continuation undid (turn.continued)
    continued: int = 0
    #: reply audio heard (played from arrival, up to any clear) while the utterance was still
    #: being spoken (its pauses included)
    talked_over_s: float = 0.0

    @property
    def record(self) -> TurnRecord | None:
        """The ledger record of the turn's reply (the last server turn of the utterance)."""
        return self.records[-1] if self.records else None

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 1) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "session": self.session,
            "turn": self.index,
            "text": self.text,
            "kind": "interruption" if self.interrupts_previous else "question",
            "interrupt_planned": self.interrupt_planned,
            "interrupt_after_s": self.interrupt_after_s,
            "interrupt_skipped": self.interrupt_skipped,
            "server_turn_ids": list(self.server_turn_ids),
            "speech_onset_s": r(self.speech_onset_s, 3),
            "speech_end_s": r(self.speech_end_s, 3),
            "first_voiced_s": r(self.first_voiced_s, 3),
            "voice_to_voice_ms": r(self.voice_to_voice_ms),
            "barge_in_stop_ms": r(self.barge_in_stop_ms),
            "reply_audio_s": round(self.reply_audio_s, 3),
            "cleared": self.cleared,
            "server_interrupted": self.server_interrupted,
            "records": [r.as_dict() for r in self.records],
            "error": self.error,
            "paused": self.paused,
            "premature_end": self.premature_end,
            "continued": self.continued,
            "talked_over_s": round(self.talked_over_s, 3),
        }


def result(obs: TurnObservation, session: int, origin_t: float, *, has_turn_ids: bool = True) -> TurnResult:
    """The figures of ``obs``; times on a timeline that starts at ``origin_t``.
    ``has_turn_ids``: the protocol names the server's turns (/ws; not Twilio)."""

    def at(t: float | None) -> float | None:
        return None if t is None else t - origin_t

    v2v = None
    if obs.first_voiced_t is not None and obs.end_t is not None:
        v2v = (obs.first_voiced_t - obs.end_t) * 1000
    stop = None
    onset = obs.interrupted_at_t
    if onset is not None:
        after = [t for t in obs.cleared_t if t >= onset]
        ends = [t for t in (obs.last_audio_t, *after[:1]) if t is not None]
        if ends and (after or max(ends) >= onset):
            stop = (max(ends) - onset) * 1000
    records = tuple(obs.records[tid] for tid in obs.server_turn_ids if tid in obs.records)
    # the reply's record is the last one (an utterance the server split has a record per part)
    interrupted = records[-1].interrupted if records else None
    error = obs.error
    if error is None and obs.failures:
        error = "; ".join(obs.failures)
    return TurnResult(
        session=session,
        index=obs.plan.index,
        text=obs.plan.clip.text,
        interrupts_previous=obs.plan.interrupts_previous,
        interrupt_planned=obs.plan.interrupt_after_s is not None,
        interrupt_after_s=obs.plan.interrupt_after_s,
        interrupt_skipped=obs.interrupt_skipped,
        server_turn_ids=tuple(obs.server_turn_ids),
        speech_onset_s=at(obs.onset_t),
        speech_end_s=at(obs.end_t),
        first_voiced_s=at(obs.first_voiced_t),
        voice_to_voice_ms=v2v,
        barge_in_stop_ms=stop,
        reply_audio_s=obs.audio_s,
        cleared=bool(obs.cleared_t),
        server_interrupted=interrupted,
        records=records,
        error=error,
        paused=obs.plan.clip.paused,
        premature_end=(len(obs.server_turn_ids) > 1) if has_turn_ids and obs.server_turn_ids else None,
        continued=obs.continued,
        talked_over_s=obs.talked_over_s,
    )
