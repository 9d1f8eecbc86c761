"""One turn at runtime: the user's utterance, the reply to it, and its ledger.

The session creates a :class:`Turn` for every :class:`~voice_pipeline.turntaking.messages.BeginTurn`
and calls its methods to carry out the machine's commands for it; a turn decides
nothing itself. Everything a session's turns share is one
:class:`~voice_pipeline.conversation.turn_context.TurnContext`.

Epochs: a continued turn (the user went on before hearing the reply) drops its
reply and is answered anew, under the same turn id. ``epoch`` counts those restarts;
the marks, compute spans and audibility of a reply of an older epoch are ignored,
so a cancelled reply still winding down cannot write into the new attempt's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from asr.streaming import FinalTranscript, PartialTranscript
from llm.base import ChatMessage
from vad.end_of_turn import Cue, Rule
from vad.endpointer import EndOfTurn
from voice_pipeline import events as ev
from voice_pipeline.clock import ms_to_ns
from voice_pipeline.conversation.history import Context, admits, remember
from voice_pipeline.conversation.reply import Reply, ReplyOptions, ReplyRequest, ReplySpeaker
from voice_pipeline.conversation.turn_context import TurnContext
from voice_pipeline.conversation.utterance import Utterance
from voice_pipeline.errors import EngineError
from voice_pipeline.ledger.ledger import Mark, TurnLedger
from voice_pipeline.ledger.records import EndOfTurnRecord, FailedStage, Span, TurnRecord
from voice_pipeline.turntaking.bargein import InterruptionKind
from voice_pipeline.turntaking.messages import CancelReason
from voice_pipeline.turntaking.phases import Phase

log = logging.getLogger(__name__)

#: policy waits that are the user's, not the pipeline's: they extend the turn's budgets
DELIBERATE = (Rule.UNSURE, Rule.INCOMPLETE)


class Turn:
    def __init__(
        self,
        turn_id: int,
        ledger: TurnLedger,
        ctx: TurnContext,
        *,
        phase: Callable[[], Phase],
    ) -> None:
        """``phase()``: the machine's phase of this turn (its state is the machine's alone)."""
        self.turn_id = turn_id
        self._phase = phase
        self.ledger = ledger
        self._ctx = ctx
        settings = ctx.settings
        self.utterance = Utterance(
            turn_id,
            ctx.engines,
            settings.asr,
            settings.turn,
            settings.prefetch,
            clock=ctx.clock,
            sleep_until=ctx.sleep_until,
            time_of=ctx.time_of,
            spawn=ctx.spawn,
            on_evidence=ctx.on_evidence,
            on_partial=functools.partial(self._partial, turn_id),
        )
        self._committed = ""
        self.epoch = 0
        self.reply_task: asyncio.Task[None] | None = None
        self.reply: Reply | None = None
        self.user_text = ""
        #: a reply asked for directly (``Session.respond``): what it is asked with
        self.request: ReplyRequest | None = None
        #: the stage that failed (the runtime's fact: the machine is told only that the reply ended)
        self.failed: str | None = None
        self._held_since: int | None = None  # a voice holds the reply's first audio since (HoldReply)

    @property
    def done(self) -> bool:
        """The turn is over (finished or dropped): the machine has forgotten it."""
        return self._phase() is Phase.DONE

    @property
    def interrupted(self) -> bool:
        """The reply was cancelled (by a barge-in or the client); asked before the session
        tells the machine the turn is finished (after that, its record keeps it)."""
        return self._phase() is Phase.INTERRUPTED

    @property
    def winding_down(self) -> bool:
        """The reply was cancelled and its task has not ended yet."""
        return self.interrupted and self.reply_task is not None and not self.reply_task.done()

    # ------------------------------------------------------------ bookkeeping

    def _partial(self, turn_id: int, p: PartialTranscript) -> None:
        ctx = self._ctx
        ctx.transport.emit(ev.TranscriptPartial(turn_id, ctx.clock(), p.committed, p.tentative))
        if p.committed != self._committed:
            self._committed = p.committed
            ctx.on_committed(p.committed)

    def mark(self, mark: Mark, t_ns: int) -> None:
        ctx = self._ctx
        for b in self.ledger.mark(mark, t_ns):
            ctx.transport.emit(
                ev.BudgetExceeded(self.turn_id, ctx.clock(), b.stage, b.duration_ms, b.budget_ms)
            )

    def _mark_epoch(self, epoch: int, mark: Mark, t_ns: int) -> None:
        if epoch == self.epoch:
            self.mark(mark, t_ns)

    def _compute_epoch(self, epoch: int, name: Span, start_ns: int, end_ns: int) -> None:
        if epoch == self.epoch:
            self.ledger.compute(name, start_ns, end_ns)

    # ------------------------------------------------------------ the user's side

    def begin(self, onset_ns: int, start_sample: int, audio: NDArray[np.float32]) -> None:
        """The user's turn began; its audio (``audio``) starts at input sample ``start_sample``."""
        self.mark(Mark.SPEECH_START, onset_ns)
        self.utterance.start(audio)
        start_ms = start_sample * 1000 // self._ctx.settings.pipeline_rate_hz
        self._ctx.transport.emit(ev.SpeechStarted(self.turn_id, self._ctx.clock(), start_ms))

    def continue_(self) -> None:
        """The user went on before hearing the reply: the reply is dropped, the turn open again."""
        ctx, reply, task = self._ctx, self.reply, self.reply_task
        self.epoch += 1  # from here on the old reply records nothing
        self.reply, self.reply_task = None, None
        if task is not None and not task.done():
            task.cancel()  # aborts the LLM request, stops synthesis
        if reply is not None and reply.speaker.sent:
            ctx.transport.clear(self.turn_id)
            ctx.echo.cleared(self.turn_id, ctx.clock())
        self.utterance.drop()
        self.utterance.stop_speculating()
        self.user_text, self.failed = "", None
        tokens = reply.llm_tokens if reply is not None else 0
        self.ledger.continued(tokens, reply.audio_synthesized_s if reply is not None else 0.0)
        ctx.transport.emit(ev.TurnContinued(self.turn_id, ctx.clock()))
        self.utterance.listen()

    def drop(self) -> None:
        """The user's turn is abandoned before it ended (the client cleared its input)."""
        self.utterance.drop()

    async def final_transcript(self) -> FinalTranscript:
        """The utterance's final words. If the reply is cancelled meanwhile because the user
        began a new turn before hearing it, the words are still waited for: they enter the
        history unanswered, and the next reply answers both messages."""
        task = asyncio.ensure_future(self.utterance.transcriber.final())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self.interrupted and not task.done():
                with contextlib.suppress(Exception):
                    self.user_text = (await task).text.strip()
            task.cancel()
            raise

    def transcribed(self, final: FinalTranscript) -> None:
        """The utterance's final words came: recorded, and told to the listener."""
        ctx = self._ctx
        self.ledger.asr_decode_ms = final.decode_ms
        self.ledger.asr_speculative = final.speculative
        self.ledger.compute(Span.ASR_FINAL, final.decode_start_ns, final.decode_end_ns)
        self.mark(Mark.TRANSCRIPT_FINAL, ctx.clock())
        self.user_text = final.text.strip()
        ctx.transport.emit(ev.TranscriptFinalized(self.turn_id, ctx.clock(), self.user_text))

    def end(self, end: EndOfTurn, speech_end_ns: int) -> None:
        """The machine ended the user's turn (``speech_end_ns``: the acoustic end of speech)."""
        ctx, utterance = self._ctx, self.utterance
        utterance.stop_partials()
        if end.rule in (Rule.PUSH_TO_TALK, Rule.MAX_TURN, Rule.COMMIT):
            utterance.transcriber.speculate()  # the final decode starts now
        self.mark(Mark.SPEECH_END, speech_end_ns)
        decided = ctx.clock()
        extra_ms = end.wait_ms - ctx.settings.end_silence_ms  # the user's (DELIBERATE, patience, statement)
        statement = end.rule is Rule.COMPLETE and end.evidence.cue is Cue.NEUTRAL  # turn.statement_silence_ms
        allowed = extra_ms if end.rule in DELIBERATE or statement else min(extra_ms, end.patience_ms)
        if allowed > 0:
            self.ledger.allow(allowed, "endpointing", "voice_to_voice")
        self.mark(Mark.ENDPOINT, decided)
        # the wait the turn-taking policy requires: VAD hangover + the silence the rule asked for
        required = ctx.time_of(end.speech_end_sample) + ms_to_ns(end.wait_ms)
        self.ledger.compute(Span.ENDPOINT_WAIT, speech_end_ns, min(required, decided))
        at = utterance.evidence_at
        self.ledger.end_of_turn = EndOfTurnRecord(
            rule=end.rule,
            silence_ms=(end.decided_sample - end.speech_end_sample) * 1000 / ctx.settings.pipeline_rate_hz,
            wait_ms=end.wait_ms,
            p_complete=end.evidence.p_complete,
            cue=end.evidence.cue,
            words_after_ms=at.words_after_ms,
            sound_after_ms=at.sound_after_ms,
            sound_compute_ms=at.sound_compute_ms,
            patience_ms=end.patience_ms,
        )
        utterance.drop_evidence()
        end_ms = end.speech_end_sample * 1000 // ctx.settings.pipeline_rate_hz
        ctx.transport.emit(ev.EndpointDetected(self.turn_id, decided, speech_end_ns, end_ms))

    # ------------------------------------------------------------ the reply

    def new_reply(self) -> Reply:
        ctx, epoch, tid = self._ctx, self.epoch, self.turn_id
        out_rate = ctx.transport.output_rate_hz
        speaker = ReplySpeaker(
            tid,
            ctx.transport,
            lambda pcm: ctx.echo.sent(tid, pcm, out_rate, ctx.clock()),
            lambda: ctx.echo.cleared(tid, ctx.clock()),
            on_started=functools.partial(ctx.on_audible, tid, epoch),
            played_base=ctx.transport.played_samples(tid),
            held=self._held_since is not None,
        )
        mark = functools.partial(self._mark_epoch, epoch)
        return Reply(tid, ctx.reply, speaker, mark, functools.partial(self._compute_epoch, epoch))

    def ask(self, request: ReplyRequest) -> None:
        """A reply is asked for directly (``Session.respond``): the turn has no user speech."""
        self.request, self.user_text = request, request.user_text
        self.mark(Mark.REPLY_ASKED, self._ctx.clock())

    async def answer_request(self, request: ReplyRequest) -> None:
        """Reply as asked, once the words the request reads are in (push-to-talk: those of the
        audio just committed); their wait is the record's ``asr_final``."""
        self.request = request = await request.settled()
        self.user_text = request.user_text
        self.mark(Mark.TRANSCRIPT_FINAL, self._ctx.clock())
        self.reply = self.new_reply()
        await self.reply.run(list(request.messages), options=request.options)

    def prefetch(self, context: Context, session_tag: str) -> None:
        """Start the speculative reply to the utterance, asked with ``context``."""
        request = functools.partial(context.request, turn_id=self.turn_id)
        self.utterance.prefetch(request, context.version, f"{session_tag}-{self.turn_id}-{self.epoch}")

    async def answer(self, context: Context, options: ReplyOptions) -> None:
        """Reply to the user's words, asked with ``context`` (the prefetched stream if it was
        started on these very words; the filler if no clause is ready in time)."""
        prefetched = await self.utterance.take_prefetch(self.user_text, context.version)
        self.ledger.llm_prefetched = prefetched is not None
        messages = context.request(self.user_text, self.turn_id)
        self.reply = self.new_reply()
        filler_at = None
        speech_end, after_ms = self.ledger.get(Mark.SPEECH_END), self._ctx.settings.filler_after_ms
        if after_ms > 0 and speech_end is not None:
            filler_at = speech_end + ms_to_ns(after_ms)
        await self.reply.run(messages, prefetched, filler_at_ns=filler_at, options=options)

    def spoken(self, options: ReplyOptions) -> bool:
        """The turn's reply is spoken (not text only; ``options``: the session's, for a reply
        not begun): an apology is too."""
        if self.reply is not None:
            return self.reply.options.speak
        return (self.request.options if self.request is not None else options).speak

    async def apologize(self, text: str) -> None:
        """Say ``text`` after whatever the reply said (the turn failed)."""
        if self.reply is None:
            self.reply = self.new_reply()
        await self.reply.say(text, Mark.APOLOGY_SENT)

    def pause_reply(self, onset_ns: int) -> None:
        if self.reply is None:
            return
        self.mark(Mark.BARGE_IN_ONSET, onset_ns)
        self.reply.speaker.pause()
        self.mark(Mark.FLUSH_SENT, self._ctx.clock())
        self._ctx.transport.emit(ev.ReplyPaused(self.turn_id, self._ctx.clock()))

    def hold_reply(self, held: bool) -> None:
        """A voice began that may be the user going on: nothing of the reply is sent (``held``);
        or it was not (the reply goes now; the wait is the user's, not a budget breach), or it
        was (the reply was dropped: nothing to do)."""
        now, since, reply = self._ctx.clock(), self._held_since, self.reply
        self._held_since = now if held else None
        if reply is None or (not held and self._phase() not in (Phase.REPLYING, Phase.AUDIBLE)):
            return  # continued (a new reply to come) or cancelled: nothing of this one goes out
        if held:
            reply.speaker.hold()
            return
        ready = self.ledger.get(Mark.TTS_FIRST_AUDIO)
        if since is not None and ready is not None and not reply.speaker.sent:
            self.ledger.held_first_audio((now - max(ready, since)) / 1e6)
        self._ctx.spawn(reply.let_go(), f"let-go-{self.turn_id}")

    def resume_reply(self, kind: InterruptionKind) -> None:
        self.ledger.false_interruptions += 1
        self._ctx.transport.emit(ev.ReplyResumed(self.turn_id, self._ctx.clock(), kind))
        if self.reply is not None:
            self._ctx.spawn(self.reply.speaker.resume(), f"resume-{self.turn_id}")

    def cancel_reply(self, reason: CancelReason, *, barge_in: bool) -> None:
        ctx = self._ctx
        if barge_in:
            self.mark(Mark.BARGE_IN_CONFIRMED, ctx.clock())
        if reason.false_interruption:  # not resumed
            self.ledger.false_interruptions += 1
        if self.reply_task is None:  # the machine cancels only a reply in progress, and once
            return
        ctx.transport.clear(self.turn_id)
        ctx.echo.cleared(self.turn_id, ctx.clock())
        ctx.transport.emit(ev.ReplyInterrupted(self.turn_id, ctx.clock(), reason))
        self.reply_task.cancel()

    def fail(self, exc: BaseException) -> None:
        """A stage raised during the turn (``exc``, or the first exception of the group):
        report it (the turn then apologizes and ends)."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        stage = (self.reply.failed_stage or FailedStage.REPLY) if self.reply is not None else FailedStage.ASR
        if isinstance(exc, EngineError):
            log.warning("turn %d failed in %s: %s", self.turn_id, stage, exc)
            message, retryable = str(exc), exc.retryable
        else:  # a bug or an engine's own exception: still this turn's problem only
            log.error("turn %d failed in %s", self.turn_id, stage, exc_info=exc)
            message, retryable = f"internal error in {stage}: {type(exc).__name__}", False
        self.failed = self.ledger.failed = stage
        self._ctx.transport.emit(ev.TurnFailed(self.turn_id, self._ctx.clock(), stage, message, retryable))

    def tool_messages(self) -> list[ChatMessage]:
        """The reply's tool calls and results, as they stand (see voice_pipeline/tools/loop.py)."""
        return self.reply.tool_messages() if self.reply is not None else []

    def finish(self, context: Context) -> TurnRecord:
        """The turn is over: its record. What of it the history admits (the user's words and
        what the listener heard of the reply) is remembered in ``context``. Called before the
        machine is told the turn is over (it then forgets it): the outcome is read here."""
        interrupted = self.interrupted
        self.mark(Mark.TURN_END, self._ctx.clock())
        reply = self.reply
        self.ledger.speculation = self.utterance.speculation.record()
        played = reply.speaker.played() if reply else 0
        heard = reply.heard(played, interrupted) if reply else ""
        if reply is not None:
            self.ledger.llm_tokens = reply.llm_tokens
            self.ledger.audio_synthesized_s = reply.audio_synthesized_s
            first = reply.llm_first
            if first is not None:
                self.ledger.llm_request(first.prompt_tokens, first.cached_tokens, first.prefill_ms)
        record = self.ledger.finish(
            user_text=self.user_text,
            assistant_text=reply.text.strip() if reply else "",
            heard_text=heard,
            interrupted=interrupted,
            audio_heard_s=played / self._ctx.transport.output_rate_hz,
        )
        asked, failed = self.request is None or self.request.remember, self.failed is not None
        if admits(self.user_text, asked=asked, interruption=record.interruption, failed=failed, heard=heard):
            cut, tools = interrupted or failed, self.tool_messages()
            remember(context, self.user_text, heard, cut=cut, tools=tools)
        return record
