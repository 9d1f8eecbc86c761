"""The lifecycle of a turn and its reply: one pure state machine (no clock, no asyncio).

Everything that decides who has the floor lives here, as h11 keeps its state machine in one file:
the session runtime feeds it what happened (VAD frames, the evidence about a pause, transcripts,
playback, push-to-talk, an interrupt) and carries out the commands it answers with. Each turn moves
only through the transition table of :mod:`voice_pipeline.turntaking.phases` (``TurnState.move``); the
messages are :mod:`voice_pipeline.turntaking.messages`; the finer decisions, its pure parts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from vad.end_of_turn import Cue, EndOfTurnPolicy, Rule
from vad.endpointer import EndOfTurn, EndpointAction, Endpointer, PauseStarted, SpeechResumed, SpeechStarted
from voice_pipeline.config import BargeInConfig, TurnConfig, VADConfig
from voice_pipeline.turntaking import messages as cmd
from voice_pipeline.turntaking.bargein import (
    BargeInTracker,
    ConfirmInterruption,
    EchoOverReply,
    EchoProbe,
    InterruptionKind,
    SpeechOverReply,
    StopWindow,
    answers,
    asks_to_stop,
    classify_interruption,
)
from voice_pipeline.turntaking.ending import Continuation, Patience
from voice_pipeline.turntaking.hold import Hold
from voice_pipeline.turntaking.messages import CancelReason, Command, EvidenceFound, TurnOptions
from voice_pipeline.turntaking.phases import (
    HEARD_PHASES,
    REPLY_PHASES,
    Phase,
    Step,
    TurnState,
    TurnTable,
)


class TurnMachine(TurnTable):
    """One per session. Every method takes what happened and returns the commands."""

    def __init__(
        self,
        vad: VADConfig,
        turn: TurnConfig,
        barge_in: BargeInConfig,
        *,
        sample_rate_hz: int,
        frame_samples: int,
        time_of: Callable[[int], int],
        policy: EndOfTurnPolicy | None,
        prefetch: bool,
        options: TurnOptions | None = None,
    ) -> None:
        """``time_of(sample)``: the monotonic time of an input sample; ``policy``: the semantic
        end-of-turn policy (None = silence alone); ``prefetch``: ``dialogue.speculative_start``."""
        super().__init__()
        self._vad, self._barge_in, self._prefetch = vad, barge_in, prefetch
        self._frame_ms, self._options = frame_samples * 1000 / sample_rate_hz, options or TurnOptions()
        self.endpointer = Endpointer(vad, sample_rate_hz, frame_samples, policy)
        self.continuation = Continuation(turn, sample_rate_hz=sample_rate_hz, time_of=time_of)
        self._policy, self.patience = policy, Patience.of(turn)
        self.tracker = BargeInTracker(barge_in, self._frame_ms)
        self._ids = itertools.count(1)
        self.user: int | None = None  # the turn the user is speaking (LISTENING, MAYBE_FINISHED)
        self._hold, self._time_of, self._stops = Hold(sample_rate_hz, time_of), time_of, StopWindow()

    # ------------------------------------------------------------ inputs

    def frame(self, p: float, *, frame_start_ns: int, now_ns: int, is_echo: EchoProbe) -> list[Command]:
        """One VAD frame (``p`` with the per-frame echo already removed)."""
        cmds: list[Command] = []
        if self._options.detection is cmd.Detection.MANUAL:
            return self._manual_frame(now_ns)
        self._barge_in_frame(p, frame_start_ns, is_echo, cmds)
        steps = self.endpointer.update(p)
        if self._hold.key_down:
            self._held_max_turn(self._hold.key_since_ns, now_ns, cmds)
        else:  # push-to-talk decides the turn's start and end
            for step in steps:
                self._endpoint(step, cmds)
        return cmds + self.tick(now_ns)

    def tick(self, now_ns: int) -> list[Command]:
        """Time passed: seal turns that can no longer be continued; hold back or release their
        first audio (a voice that may continue the turn, or an earlier reply still to be heard)."""
        cmds: list[Command] = []
        pending, min_speech_ms = self.endpointer.pending_onset, self._vad.min_speech_ms
        for t in self._turns.values():  # oldest first: a reply let go here holds back the next
            if self.continuation.expired(t, now_ns, pending):
                t.sealed = True
                cmds.append(cmd.Seal(t.turn_id))
            voice = self.continuation.holds(t, now_ns, pending, min_speech_ms)
            if t.held is not (held := voice or self._queued(t)):
                t.held = held
                until = self.continuation.hold_until(pending, min_speech_ms) if voice else None
                cmds.append(cmd.HoldReply(t.turn_id, held, until))
        return cmds

    def evidence(self, found: EvidenceFound) -> list[Command]:
        """The words or the sound of a pause are known."""
        t = self._turns.get(found.turn_id)
        if t is None or self.user != t.turn_id or t.phase is not Phase.MAYBE_FINISHED or self._hold.key_down:
            return []
        cmds: list[Command] = []
        prefetch = self._prefetch and self._options.auto_reply and t.spoken_over is None
        if found.cue not in (None, Cue.INCOMPLETE) and prefetch:  # not with no reply to come
            cmds.append(cmd.Prefetch(t.turn_id))
        for step in self.endpointer.evidence(
            found.speech_end_sample, cue=found.cue, p_complete=found.p_complete, no_sound=found.no_sound
        ):
            self._endpoint(step, cmds)
        return cmds

    def transcribed(self, turn_id: int, text: str, said: str = "") -> cmd.Transcribed:
        """The final transcript of a turn that ended; ``said``: the reply it was spoken over (echo?)."""
        t = self._turns.get(turn_id)
        if t is None or t.phase not in REPLY_PHASES:
            return cmd.Transcribed((), None)
        over = self._turns.get(t.spoken_over) if t.spoken_over is not None else None
        before: list[Command] = []
        if t.spoken_over is None:
            kind = None
        elif over is None or over.phase not in HEARD_PHASES:  # confirmed already, or over
            kind = InterruptionKind.WORDS if text else InterruptionKind.NO_WORDS
        else:
            kind = classify_interruption(text, self._barge_in.backchannels, said)
            ok = kind is InterruptionKind.WORDS
            before = self._confirm(over, CancelReason.WORDS) if ok else self._false_interruption(over, kind)
        after_reply = self._stops.covers(t.onset_ns, self._barge_in.stop_after_reply_ms)
        cut = (t.spoken_over is not None or t.continued or after_reply) and self._options.auto_reply
        answer = answers(text, kind, cut_reply=cut, stop_phrases=self._barge_in.stop_phrases)
        if cut and asks_to_stop(text, self._barge_in.stop_phrases):
            self._stops.stopped()  # a stop said again is meant for the same reply
        t.no_words = not text and kind is None  # heard as nothing: open while its speaker may go on
        verdict = self._options.verdict(turn_id, kind) if answer else cmd.Dismiss(turn_id, kind)
        t.answered = isinstance(verdict, cmd.Answer)
        before += self._supersede(t) if t.answered else []
        return cmd.Transcribed((*before, verdict), verdict)

    def reply_audible(self, turn_id: int, now_ns: int) -> list[Command]:
        if (t := self._turns.get(turn_id)) is not None and t.phase is Phase.REPLYING:
            t.move(Step.AUDIBLE)
            t.audible_ns = now_ns
        return []

    def reply_finished(self, turn_id: int, now_ns: int) -> list[Command]:
        """The reply's task ended (completed, cancelled or failed): the turn is over."""
        if (t := self._turns.get(turn_id)) is None or t.phase not in (*REPLY_PHASES, Phase.INTERRUPTED):
            return []
        if t.phase is Phase.AUDIBLE:  # heard to its end (its task waits for the playout)
            self._stops.heard(now_ns)
        t.move(Step.FINISH)
        del self._turns[turn_id]
        cut = self._behind(t, cut=True)  # over while speech over it was undecided: not over the user
        return cut + ([] if t.sealed else [cmd.Seal(turn_id)]) + self.tick(now_ns)  # the next reply's turn

    def interrupt(self, now_ns: int) -> list[Command]:
        """Explicit interrupt: every reply in progress stops now, without waiting for the VAD."""
        cmds: list[Command] = []
        for t in list(self._turns.values()):
            cmds.extend(self._pause(t, now_ns))  # if audible
            if t.phase in REPLY_PHASES:
                cmds.extend(self._confirm(t, CancelReason.EXPLICIT))
        return cmds

    def ptt_pressed(self, position: int, now_ns: int) -> list[Command]:
        """Push-to-talk pressed at ``position``: interrupt; the user's turn starts now (not the VAD's)."""
        cmds = self.interrupt(now_ns)
        self.endpointer.abandon()
        start = self._hold.press(position, now_ns, self._vad.pre_roll_ms)
        if self.user is None:
            return [*cmds, *self._begin(position, start, spoken_over=None, ptt=True)]
        t = self._turns[self.user]
        t.ptt = True
        if t.phase is Phase.MAYBE_FINISHED:
            t.move(Step.RESUME)
            cmds.append(cmd.StopSpeculating(t.turn_id))
        return cmds

    def ptt_released(self, position: int) -> list[Command]:
        """Push-to-talk released: the user's turn ends now (no end-of-speech silence)."""
        if not self._hold.release():
            return []
        self.endpointer.abandon()
        return [] if self.user is None else self._end(EndOfTurn(position, position, Rule.PUSH_TO_TALK))

    def commit(self, position: int) -> list[Command]:
        """The client committed its input at sample ``position``: the user's turn ends now
        (manual detection: the audio since the last commit or clear; VAD: the speech so far)."""
        if not self._hold.input_cut(position) or self.user is None:
            return []
        speech_end = position
        if self._options.detection is cmd.Detection.VAD:
            speech_end = self.endpointer.speech_end_sample or position
            self.endpointer.abandon()
        return self._end(EndOfTurn(speech_end, position, Rule.COMMIT))

    def drop(self, position: int) -> list[Command]:
        """The client cleared its input at ``position``: the user's turn is abandoned unheard."""
        if not self._hold.input_cut(position) or self.user is None:
            return []
        t = self._turns.pop(self.user)
        t.move(Step.DROP)
        self.user = None
        self.endpointer.abandon()
        cmds: list[Command] = [cmd.DropTurn(t.turn_id)]
        over = self._turns.get(t.spoken_over or 0)  # a reply its speech paused: its words will never come
        if over is not None and over.phase is Phase.PAUSED:
            cmds += self._false_interruption(over, InterruptionKind.NO_WORDS)
        return cmds

    def respond(self) -> list[Command]:
        """A reply with no user speech (a realtime ``response.create``): REPLYING and sealed."""
        t = TurnState(next(self._ids), phase=Phase.REPLYING, sealed=True)
        self._turns[t.turn_id] = t
        t.held = self._queued(t)  # another reply has the floor: this one speaks after it
        hold = [cmd.HoldReply(t.turn_id, True)] if t.held else []
        return [cmd.BeginReply(t.turn_id), *hold, cmd.StartReply(t.turn_id)]

    def cancel(self, turn_id: int) -> list[Command]:
        """The client cancelled this turn's reply (a realtime ``response.cancel``)."""
        if (t := self._turns.get(turn_id)) is not None and t.phase in HEARD_PHASES:
            self.tracker.resolved()
        return [] if t is None else self._cancel(t, CancelReason.CLIENT)

    def configure(
        self, vad: VADConfig, barge_in: BargeInConfig, policy: EndOfTurnPolicy | None, options: TurnOptions,
        *, position: int,
    ) -> list[Command]:  # fmt: skip
        """New settings for the frames and turns to come (a realtime ``session.update``). Changing
        who detects turns drops the user's turn in progress (``position``: the input's now)."""
        cmds = self.drop(position) if options.detection is not self._options.detection else []
        if barge_in != self._barge_in:
            self.tracker = BargeInTracker(barge_in, self._frame_ms)
        self._vad, self._barge_in, self._options, self._policy = vad, barge_in, options, policy
        self._be_patient()
        return cmds

    # ------------------------------------------------------------ internals

    def _barge_in_frame(self, p: float, frame_start_ns: int, is_echo: EchoProbe, cmds: list[Command]) -> None:
        audible = self._latest(HEARD_PHASES)
        heard = self.tracker.hear(
            p, self._vad, is_echo, assistant_audible=audible is not None, frame_start_ns=frame_start_ns
        )
        if audible is None:
            return
        match heard:
            case SpeechOverReply(onset_ns=onset, frames_before=frames):
                cmds.extend(self._pause(audible, onset))
                if self.user is None:  # the VAD's count had not made it a turn: it is one now (or
                    for step in self.endpointer.begin(frames):  # it goes on with the user's last)
                        self._endpoint(step, cmds)
                # the user's turn was open (a reply asked for in it) or goes on: its words decide the pause
                user = self._turns.get(self.user or 0)
                over = user is not None and self.phase(user.spoken_over or 0) in HEARD_PHASES
                if user is not None and not over and audible.phase is Phase.PAUSED:
                    user.spoken_over = audible.turn_id
            case ConfirmInterruption():
                cmds.extend(self._confirm(audible, CancelReason.LONG_SPEECH))
            case EchoOverReply():
                cmds.extend(self._false_interruption(audible, InterruptionKind.ECHO))

    def _endpoint(self, step: EndpointAction, cmds: list[Command]) -> None:
        user = self._turns.get(self.user) if self.user is not None else None
        match step:
            case SpeechStarted():
                cmds.extend(self._speech_started(step))
            case PauseStarted(speech_end_sample=end) if user is not None and user.phase is Phase.LISTENING:
                user.move(Step.PAUSE)
                cmds.append(cmd.Speculate(user.turn_id, end))
            case SpeechResumed() if user is not None and user.phase is Phase.MAYBE_FINISHED:
                self.patience.resumed(step.silence_ms)
                self._be_patient()
                user.move(Step.RESUME)
                cmds.append(cmd.StopSpeculating(user.turn_id))
            case EndOfTurn() if user is not None:
                cmds.extend(self._end(step))

    def _speech_started(self, s: SpeechStarted) -> list[Command]:
        t = self._latest(REPLY_PHASES, spoken=True)  # the user's last turn: this speech may go on with it
        if t is not None and self.continuation.continues(t, s.onset_sample):
            return self._continue(t, s.onset_sample)
        unheard = [o for o in self._turns.values() if o.phase is Phase.REPLYING and not o.no_words]
        heard = self._latest(HEARD_PHASES) if self._barge_in.enabled else None
        for o in unheard:  # a reply asked for behind the one heard waits for what this speech is
            if heard is not None and o.onset_ns is None and o.turn_id > heard.turn_id:
                o.behind = heard.turn_id
        cut = [o for o in unheard if o.behind is None and self._barge_in.enabled]
        cmds = [c for o in cut for c in self._cancel(o, CancelReason.UNHEARD)]
        return cmds + self._begin(s.onset_sample, s.start_sample, spoken_over=self.audible)

    def _begin(self, onset: int, start: int, *, spoken_over: int | None, ptt: bool = False) -> list[Command]:
        cmds: list[Command] = [cmd.Seal(t.turn_id) for t in self._turns.values() if not t.sealed]
        for t in self._turns.values():
            t.sealed = True
        t = TurnState(next(self._ids), spoken_over=spoken_over, ptt=ptt, onset_ns=self._time_of(onset))
        self._turns[t.turn_id] = t
        self.user = t.turn_id
        self.patience.new_turn()
        self._be_patient()
        cmds.insert(0, cmd.BeginTurn(t.turn_id, onset, start, spoken_over))
        return cmds

    def _end(self, end: EndOfTurn) -> list[Command]:
        assert self.user is not None
        t = self._turns[self.user]
        self.user = None
        t.move(Step.END)
        t.ended_by, t.speech_end_sample = end.rule, end.speech_end_sample
        cmds: list[Command] = [cmd.EndTurn(t.turn_id, end)]
        if not self._barge_in.enabled:  # no barge-in: the new turn supersedes what is playing
            for old in list(self._turns.values()):
                if old is not t and old.phase in REPLY_PHASES:
                    cmds.extend(self._cancel(old, CancelReason.SUPERSEDED))
        cmds += [*self._supersede(t), cmd.StartReply(t.turn_id)]
        if end.rule in (Rule.MAX_TURN, Rule.COMMIT) or t.ptt:
            t.sealed = True
            cmds.append(cmd.Seal(t.turn_id))
        return cmds

    def _supersede(self, t: TurnState) -> list[Command]:
        """Replies asked for (response.create) since ``t`` began yield to it, unless its speech paused one."""
        asked = [o for o in self._turns.values() if o.turn_id > t.turn_id and o.onset_ns is None]
        cut = [o for o in asked if o.phase is not Phase.PAUSED and self._options.auto_reply]
        return [c for o in cut for c in self._cancel(o, CancelReason.SUPERSEDED)]

    def _continue(self, t: TurnState, onset: int) -> list[Command]:
        if t.phase in HEARD_PHASES:
            self.tracker.resolved()  # its pause (if any) was this same speech
        t.move(Step.CONTINUE)
        self.patience.continued(t.ended_by, self.continuation.gap_ms(t, onset))
        self._be_patient()
        t.ended_by, t.audible_ns, t.no_words, t.continued, t.answered = None, None, False, True, False
        self.user = t.turn_id
        return [cmd.ContinueTurn(t.turn_id, onset)]

    def _be_patient(self) -> None:  # the waits this speaker needs now
        self.endpointer.reconfigure(self._vad, self.patience.policy(self._policy))

    def _manual_frame(self, now_ns: int) -> list[Command]:
        """Manual detection: the frame is only counted; with no turn open one starts."""
        cmds: list[Command] = []
        start = self.endpointer.position
        self.endpointer.update(0.0)
        if self.user is None:
            start = self._hold.manual(start)
            cmds.extend(self._begin(start, start, spoken_over=None))
        self._held_max_turn(self._hold.manual_since_ns, now_ns, cmds)
        return cmds

    def _held_max_turn(self, since: int | None, now_ns: int, cmds: list[Command]) -> None:
        """A push-to-talk or manual turn longer than ``vad.max_turn_s`` ends anyway."""
        if self.user is not None and self._hold.overdue(since, now_ns, self._vad.max_turn_s):
            pos = self.endpointer.position
            cmds.extend(self._end(EndOfTurn(pos, pos, Rule.MAX_TURN)))

    def _pause(self, t: TurnState, onset_ns: int) -> list[Command]:
        if t.phase is not Phase.AUDIBLE:
            return []
        t.move(Step.BARGE)
        return [cmd.PauseReply(t.turn_id, onset_ns)]

    def _confirm(self, t: TurnState, reason: CancelReason) -> list[Command]:
        self.tracker.resolved()
        return self._cancel(t, reason, barge_in=True)

    def _cancel(self, t: TurnState, reason: CancelReason, *, barge_in: bool = False) -> list[Command]:
        if t.phase not in REPLY_PHASES:
            return []
        t.move(Step.CANCEL)
        return [cmd.CancelReply(t.turn_id, reason, barge_in), *self._behind(t, cut=True)]

    def _false_interruption(self, t: TurnState, kind: InterruptionKind) -> list[Command]:
        self.tracker.resolved()
        if t.phase is not Phase.PAUSED:
            return self._behind(t, cut=False)  # never stopped: not an interruption at all
        if not self._barge_in.resume_after_false_interruption:
            return self._cancel(t, CancelReason.stopped_by(kind))
        t.move(Step.RESUME_REPLY)
        return [cmd.ResumeReply(t.turn_id, kind), *self._behind(t, cut=False)]

    def _behind(self, t: TurnState, *, cut: bool) -> list[Command]:
        """The replies waiting behind ``t`` since speech began over it: cut with it, or (the speech
        was no interruption) still waiting, to be heard after it."""
        waiting = [o for o in self._turns.values() if o.behind == t.turn_id]
        for o in waiting:
            o.behind = None
        return [c for o in waiting if cut for c in self._cancel(o, CancelReason.UNHEARD)]
