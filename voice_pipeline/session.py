"""One conversation: the asyncio graph that wires VAD -> ASR -> LLM -> TTS.

Decisions live elsewhere and are pure (``vad.endpointer``, ``voice_pipeline.turns``,
``voice_pipeline.bargein``, ``voice_pipeline.echo``, ``asr.local_agreement``,
``tts.chunker``, ``voice_pipeline.ledger``); this module owns the tasks, queues
and clocks and carries the decisions out.

Ownership:

* The transport calls :meth:`Session.push_audio` for every input chunk; VAD,
  the echo check, barge-in counting and endpointing run inline there (well
  under a millisecond per frame), so input backpressure is the transport's own await.
* Each user turn owns a partial-transcript task; each assistant reply owns one
  task running :meth:`voice_pipeline.reply.Reply.run` (one TaskGroup: LLM ->
  clauses -> TTS -> listener). Barge-in is a direct ``cancel()`` of that task --
  never a message racing the data -- which aborts the vLLM request, stops
  synthesis and tells the transport to flush.
* :meth:`Session.aclose` cancels and awaits every task it owns; it is idempotent.

Failures: an exception from ASR, LLM or TTS during a turn (an :class:`EngineError`,
or any other ``Exception`` from an engine) ends that turn only: ``TurnFailed``
(stage ``asr``/``llm``/``tts``), then ``llm.apology`` spoken like a reply (barge-in
works on it), then ``TurnCompleted`` with ``record.failed`` set. The history keeps a
failed turn only if some of the reply's own words were heard (user message + those
words + "..."); otherwise the turn is left out, and the apology never enters it.

History budget: before each request, and after each turn for the list itself, the
history is cut to the most recent whole turns that fit ``llm.history_max_tokens``
together with the system prompt (and the new user message)
(:func:`voice_pipeline.turns.fit_history`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asr.streaming import UtteranceTranscriber
from llm.base import ChatMessage
from vad.endpointer import EndOfTurn, Endpointer, PauseStarted, SpeechResumed, SpeechStarted
from voice_pipeline import events as ev
from voice_pipeline.audio import finite_audio, last_sound_end, resample_int16, to_float32
from voice_pipeline.bargein import (
    BargeInTracker,
    ConfirmInterruption,
    InterruptionKind,
    PauseReply,
    classify_interruption,
)
from voice_pipeline.clock import ms_to_ns, now_ns
from voice_pipeline.config import Config
from voice_pipeline.echo import echo_residual_db
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError, VoicePipelineError
from voice_pipeline.inputbuf import InputHistory
from voice_pipeline.ledger import Mark, SessionLedger, TurnLedger, TurnRecord
from voice_pipeline.playout import Playout
from voice_pipeline.reply import Phrases, PrefetchedStream, Reply, ReplySpeaker
from voice_pipeline.transport import Transport
from voice_pipeline.turns import (
    BeginUserTurn,
    CancelReply,
    Command,
    StartReply,
    TurnTaker,
    fit_history,
    message_tokens,
    request_budget,
)

log = logging.getLogger(__name__)

_HISTORY_S = 4.0  # recent input kept for pre-roll, sample->time lookups and the echo check
_END_SEARCH_S = 0.3  # how far before the VAD's end of speech to look for the acoustic end
_ECHO_WINDOW_S = 0.128  # microphone window compared with what was played
_REFERENCE_KEEP_S = 10.0


@dataclass(slots=True)
class _Turn:
    """Mutable state of one turn (the user's utterance and the reply to it)."""

    turn_id: int
    ledger: TurnLedger
    transcriber: UtteranceTranscriber
    partial_task: asyncio.Task[None] | None = None
    reply_task: asyncio.Task[None] | None = None
    reply: Reply | None = None
    user_text: str = ""
    user_paused: bool = False  # the VAD hears a pause inside the user's utterance
    spoken_over: int | None = None  # the reply this utterance was spoken over
    prefetch_task: asyncio.Task[None] | None = None  # LLM started on the speculative transcript
    prefetched: PrefetchedStream | None = None
    prefetch_ready: asyncio.Event = field(default_factory=asyncio.Event)
    interrupted: bool = False
    failed: str | None = None  # the stage that failed
    done: bool = False


class Session:
    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        transport: Transport,
        *,
        clock: Callable[[], int] = now_ns,
        sleep_until: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """``sleep_until(t_ns)`` waits until ``clock()`` reaches ``t_ns`` (default: real time)."""
        self._engines = engines
        self._cfg = cfg
        self._transport = transport
        self._clock = clock
        self._sleep_until = sleep_until or self._real_sleep_until
        self._phrases = Phrases(engines.tts, transport.output_rate_hz)
        self._phrases_prepared = False
        self.rate_hz = cfg.audio.pipeline_rate_hz
        self._vad = engines.vad.stream()
        self._frame = engines.vad.frame_samples
        self._endpointer = Endpointer(cfg.vad, self.rate_hz, self._frame)
        self._bargein = BargeInTracker(cfg.barge_in, self._frame * 1000 / self.rate_hz)
        self._turns = TurnTaker(interrupt_on_speech=cfg.barge_in.enabled)
        self.ledger = SessionLedger(cfg.budget)
        self.history: list[ChatMessage] = []
        self._history_version = 0  # changes whenever the history does (prefetch check)
        self._input = InputHistory(self.rate_hz, _HISTORY_S, clock)
        self._vad_end = 0  # end sample of the last VAD frame
        # what the listener is playing, on a timeline of pipeline-rate samples since t0
        self._t0 = clock()
        self._reference = Playout(self.rate_hz)
        self._by_id: dict[int, _Turn] = {}
        self._user: _Turn | None = None
        self._replies: dict[int, _Turn] = {}  # replies in progress
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._ptt = False  # push-to-talk held: the user's turn is decided by the key, not the VAD
        self._idle = asyncio.Event()  # no user turn and no reply in progress
        self._idle.set()
        self._no_reply = asyncio.Event()
        self._no_reply.set()

    # ------------------------------------------------------------ input side

    async def push_audio(self, samples: NDArray[np.float32], t_ns: int | None = None) -> None:
        """Feed mono float32 input at ``rate_hz``; ``t_ns`` = when its last sample was captured."""
        if self._closed:
            raise VoicePipelineError("session is closed")
        if not self._phrases_prepared:
            self._prepare_phrases()
        samples = finite_audio(samples)  # one NaN would corrupt the VAD's recurrent state
        self._input.append(samples, self._clock() if t_ns is None else t_ns)
        if self._user is not None:
            self._user.transcriber.append(samples)
        for prob in self._vad.push(samples):
            self._vad_end += self._frame
            self._on_frame(prob)

    def _on_frame(self, prob: float) -> None:
        speaking = self._audible_reply()
        if prob >= self._cfg.vad.neg_threshold and self._is_echo():
            prob = 0.0  # the assistant's own voice coming back
        vad = self._cfg.vad
        action = self._bargein.frame(
            voiced=prob >= (vad.neg_threshold if self._bargein.counting else vad.threshold),
            assistant_audible=speaking is not None,
            frame_start_ns=self._input.time_of(self._vad_end - self._frame),
        )
        if speaking is not None:
            match action:
                case PauseReply(onset_ns=onset):
                    if self._long_echo(onset):  # frames that slipped through the per-frame gate
                        self._bargein.resolved()
                    else:
                        self._pause_reply(speaking, onset)
                case ConfirmInterruption(onset_ns=onset):
                    if self._long_echo(onset):  # a long window tells echo apart reliably
                        self._false_interruption(speaking, InterruptionKind.ECHO)
                    else:
                        self._confirm_interruption(speaking, "barge-in: long speech")
        steps = self._endpointer.update(prob)
        if self._ptt:
            return  # push-to-talk decides the turn's start and end
        for step in steps:
            match step:
                case SpeechStarted():
                    current = self._by_id.get(self._turns.reply_turn or 0)
                    audible = (
                        current is not None
                        and current.reply is not None
                        and current.reply.speaker.started
                        and not current.interrupted
                    )
                    self._run(self._turns.speech_started(reply_audible=audible), step)
                case PauseStarted():
                    if self._user is not None:
                        self._user.user_paused = True
                        if self._cfg.asr.speculative_final:
                            self._user.transcriber.speculate()
                            self._start_prefetch(self._user)
                case SpeechResumed():
                    if self._user is not None:
                        self._user.user_paused = False
                        self._user.transcriber.invalidate()
                        self._drop_prefetch(self._user)
                case EndOfTurn():
                    self._end_user_turn(step)
                    self._run(self._turns.end_of_turn(), step)

    def time_of_sample(self, sample: int) -> int:
        return self._input.time_of(sample)

    # ------------------------------------------------------------ echo reference

    def _ref_pos(self, t_ns: int) -> int:
        return round((t_ns - self._t0) * self.rate_hz / 1e9)

    def _reference_sent(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        pcm16 = resample_int16(pcm, self._transport.output_rate_hz, self.rate_hz)
        now = self._ref_pos(self._clock())
        self._reference.send(turn_id, pcm16, now)
        self._reference.forget_before(now - int(_REFERENCE_KEEP_S * self.rate_hz))

    def _reference_cleared(self, turn_id: int) -> None:
        self._reference.clear(turn_id, self._ref_pos(self._clock()))

    def _long_echo(self, onset_ns: int) -> bool:
        """Is the speech since ``onset_ns`` (up to 1 s of it) the assistant's own voice?"""
        span = (self._input.time_of(self._vad_end) - onset_ns) / 1e9
        return self._is_echo(min(1.0, max(span, _ECHO_WINDOW_S)))

    def _is_echo(self, window_s: float = _ECHO_WINDOW_S) -> bool:
        cfg = self._cfg.barge_in
        if not cfg.echo_suppression:
            return False
        n = int(window_s * self.rate_hz)
        mic = self._input.window(self._vad_end, n)
        if mic is None:
            return False
        end = self._ref_pos(self._input.time_of(self._vad_end))
        lag = cfg.echo_max_delay_ms * self.rate_hz // 1000
        ref = to_float32(self._reference.window(end - n - lag, end))
        return echo_residual_db(mic, ref, lag) < cfg.echo_residual_db

    # ------------------------------------------------------------ turns

    def _run(self, commands: list[Command], cause: SpeechStarted | EndOfTurn) -> None:
        for cmd in commands:
            match cmd:
                case CancelReply(turn_id=tid, reason=reason):
                    self._cancel_reply(tid, reason)
                case BeginUserTurn(turn_id=tid):
                    assert isinstance(cause, SpeechStarted)
                    self._begin_user_turn(tid, cause)
                case StartReply(turn_id=tid):
                    turn = self._by_id[tid]
                    self._replies[tid] = turn
                    self._no_reply.clear()
                    turn.reply_task = self._spawn(self._reply_turn(turn), f"reply-{tid}")
                    turn.reply_task.add_done_callback(functools.partial(self._reply_done, turn))

    def _begin_user_turn(self, turn_id: int, started: SpeechStarted) -> None:
        transcriber = UtteranceTranscriber(self._engines.asr, self._cfg.asr, stamp=self._clock)
        turn = _Turn(turn_id, self.ledger.new_turn(turn_id), transcriber)
        speaking = self._audible_reply()
        turn.spoken_over = speaking.turn_id if speaking is not None else None
        self._by_id[turn_id] = turn
        self._user = turn
        self._idle.clear()
        self._mark(turn, Mark.SPEECH_START, self.time_of_sample(started.onset_sample))
        transcriber.start(self._input.since(started.start_sample))
        self._transport.emit(ev.SpeechStarted(turn_id, self._clock()))
        if self._cfg.asr.partial_interval_ms > 0:
            turn.partial_task = self._spawn(self._partials(turn), f"partials-{turn_id}")

    def _end_user_turn(self, end: EndOfTurn) -> None:
        turn, self._user = self._user, None
        if turn is None:
            return
        if turn.partial_task is not None:
            turn.partial_task.cancel()
        speech_end = self.time_of_sample(self._acoustic_end(end.speech_end_sample))
        self._mark(turn, Mark.SPEECH_END, speech_end)
        decided = self._clock()
        self._mark(turn, Mark.ENDPOINT, decided)
        # the wait the turn-taking policy requires: VAD hangover + the configured silence
        required = self.time_of_sample(end.speech_end_sample) + ms_to_ns(self._cfg.vad.end_silence_ms)
        turn.ledger.compute("endpoint_wait", speech_end, min(required, decided))
        self._transport.emit(ev.EndpointDetected(turn.turn_id, decided, speech_end))

    def _acoustic_end(self, vad_end: int) -> int:
        """The VAD's last voiced frame ends 40-100 ms after the sound does (model
        hangover); look at the level of the audio before it for the true end."""
        start = max(0, vad_end - int(_END_SEARCH_S * self.rate_hz))
        end = last_sound_end(self._input.since(start)[: vad_end - start], self.rate_hz)
        return vad_end if end is None else min(vad_end, start + end)

    # ------------------------------------------------------------ LLM prefetch

    def _messages(self, user_text: str) -> list[ChatMessage]:
        """The request: system prompt, the past turns that fit the token budget, the new message."""
        system, user = ChatMessage("system", self._cfg.llm.system_prompt), ChatMessage("user", user_text)
        budget = request_budget(self._cfg.llm.history_max_tokens, system, user)
        return [system, *fit_history(self.history, budget), user]

    def _start_prefetch(self, turn: _Turn) -> None:
        """Start the LLM on the speculative transcript while the end-of-turn silence runs."""
        if not self._cfg.llm.speculative_start or turn.spoken_over is not None:
            return
        self._drop_prefetch(turn)
        turn.prefetch_ready = asyncio.Event()
        turn.prefetch_task = self._spawn(
            self._prefetch(turn, turn.prefetch_ready), f"prefetch-{turn.turn_id}"
        )

    def _drop_prefetch(self, turn: _Turn) -> None:
        if turn.prefetch_task is not None:
            turn.prefetch_task.cancel()  # closes the stream: the request is aborted
        turn.prefetch_task, turn.prefetched = None, None

    async def _prefetch(self, turn: _Turn, ready: asyncio.Event) -> None:
        try:
            text = (await turn.transcriber.final()).text.strip()
            if not text:
                return
            buffer = PrefetchedStream(text, history_version=self._history_version, started_ns=self._clock())
            turn.prefetched = buffer
            ready.set()
            request_id = f"prefetch-{id(self)}-{turn.turn_id}"
            await buffer.fill(self._engines.llm, self._messages(text), request_id)
        finally:
            ready.set()

    async def _take_prefetch(self, turn: _Turn) -> PrefetchedStream | None:
        """The prefetched reply if it was asked with exactly this turn's words and history."""
        if turn.prefetch_task is None:
            return None
        await turn.prefetch_ready.wait()
        buffer = turn.prefetched
        stale = buffer is not None and buffer.history_version != self._history_version
        if buffer is None or buffer.user_text != turn.user_text or stale:
            self._drop_prefetch(turn)
            return None
        return buffer

    # ------------------------------------------------------------ barge-in

    def _audible_reply(self) -> _Turn | None:
        """The reply the listener is hearing (or that is paused by their speech)."""
        for turn in reversed(self._replies.values()):
            if turn.reply is not None and turn.reply.speaker.started and not turn.interrupted:
                return turn
        return None

    def interrupt(self) -> None:
        """Explicit interrupt (push-to-talk pressed while the assistant speaks)."""
        for turn in list(self._replies.values()):
            if not turn.interrupted:
                self._pause_reply(turn, self._clock())
                self._confirm_interruption(turn, "explicit interrupt")

    def ptt_start(self) -> None:
        """Push-to-talk pressed: interrupt the assistant and start the user's turn now."""
        self.interrupt()
        self._ptt = True
        if self._user is None:
            pos = self._input.position
            pre = self._cfg.vad.pre_roll_ms * self.rate_hz // 1000
            started = SpeechStarted(onset_sample=pos, start_sample=max(0, pos - pre), decided_sample=pos)
            self._run(self._turns.speech_started(reply_audible=False), started)

    def ptt_end(self) -> None:
        """Push-to-talk released: the user's turn ends now (no end-of-speech silence)."""
        self._ptt = False
        if self._user is None:
            return
        pos = self._input.position
        end = EndOfTurn(speech_end_sample=pos, decided_sample=pos)
        self._user.transcriber.speculate()
        self._end_user_turn(end)
        self._run(self._turns.end_of_turn(), end)

    def _pause_reply(self, turn: _Turn, onset_ns: int) -> None:
        if turn.reply is None or not turn.reply.speaker.started or turn.reply.speaker.paused or turn.done:
            return
        self._mark(turn, Mark.BARGE_IN_ONSET, onset_ns)
        turn.reply.speaker.pause()
        self._mark(turn, Mark.FLUSH_SENT, self._clock())
        self._transport.emit(ev.ReplyPaused(turn.turn_id, self._clock()))

    def _confirm_interruption(self, turn: _Turn, reason: str) -> None:
        self._mark(turn, Mark.BARGE_IN_CONFIRMED, self._clock())
        self._bargein.resolved()
        self._cancel_reply(turn.turn_id, reason)

    def _false_interruption(self, turn: _Turn, kind: InterruptionKind) -> None:
        self._bargein.resolved()
        if turn.reply is None or not turn.reply.speaker.paused:
            return  # never stopped: not an interruption at all
        turn.ledger.false_interruptions += 1
        if not self._cfg.barge_in.resume_after_false_interruption:
            self._cancel_reply(turn.turn_id, f"stopped by {kind}")
            return
        self._turns.reply_resumed(turn.turn_id)
        self._transport.emit(ev.ReplyResumed(turn.turn_id, self._clock(), str(kind)))
        self._spawn(turn.reply.speaker.resume(), f"resume-{turn.turn_id}")

    def _cancel_reply(self, turn_id: int, reason: str) -> None:
        turn = self._by_id.get(turn_id)
        if turn is None or turn.done or turn.interrupted or turn.reply_task is None:
            return
        turn.interrupted = True
        self._transport.clear(turn_id)
        self._reference_cleared(turn_id)
        self._transport.emit(ev.ReplyInterrupted(turn_id, self._clock(), reason))
        turn.reply_task.cancel()

    # ------------------------------------------------------------ tasks

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _reply_done(self, turn: _Turn, _task: asyncio.Task[None]) -> None:
        if not turn.done:  # cancelled before its first step: its finally never ran
            self._finish(turn)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def _partials(self, turn: _Turn) -> None:
        interval = self._cfg.asr.partial_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if turn.user_paused:
                continue  # the speculative final decode has the CPU
            partial = await turn.transcriber.partial()
            if partial is not None:
                self._transport.emit(
                    ev.TranscriptPartial(turn.turn_id, self._clock(), partial.committed, partial.tentative)
                )

    async def _reply_turn(self, turn: _Turn) -> None:
        try:
            try:
                await self._answer(turn)
            except* Exception as group:
                self._failed(turn, _first_leaf(group))
            if turn.failed is not None and self._cfg.llm.apology:
                reply = turn.reply or self._new_reply(turn)
                turn.reply = reply
                await reply.say(self._cfg.llm.apology, Mark.APOLOGY_SENT)
        finally:
            self._drop_prefetch(turn)
            self._finish(turn)

    async def _answer(self, turn: _Turn) -> None:
        final = await turn.transcriber.final()
        turn.ledger.asr_decode_ms = final.decode_ms
        turn.ledger.asr_speculative = final.speculative
        turn.ledger.compute("asr_final", final.decode_start_ns, final.decode_end_ns)
        self._mark(turn, Mark.TRANSCRIPT_FINAL, self._clock())
        turn.user_text = final.text.strip()
        self._transport.emit(ev.TranscriptFinalized(turn.turn_id, self._clock(), turn.user_text))
        over = self._by_id.get(turn.spoken_over) if turn.spoken_over is not None else None
        if not self._decide_spoken_over(turn) or not turn.user_text:
            return  # a backchannel, echo or noise: no reply
        if over is not None and over.reply_task is not None and not over.reply_task.done():
            await asyncio.wait([over.reply_task])  # its heard text enters the history first
        prefetched = await self._take_prefetch(turn)
        turn.ledger.llm_prefetched = prefetched is not None
        messages = self._messages(turn.user_text)
        turn.reply = self._new_reply(turn)
        filler_at = None
        if self._cfg.llm.filler_after_ms > 0:
            user_end = turn.ledger.get(Mark.SPEECH_END) or turn.ledger.get(Mark.ENDPOINT) or self._clock()
            filler_at = user_end + self._cfg.llm.filler_after_ms * 1_000_000
        await turn.reply.run(messages, prefetched, filler_at_ns=filler_at)

    def _new_reply(self, turn: _Turn) -> Reply:
        speaker = ReplySpeaker(
            turn.turn_id,
            self._transport,
            functools.partial(self._reference_sent, turn.turn_id),
            functools.partial(self._reference_cleared, turn.turn_id),
        )
        return Reply(
            turn.turn_id,
            self._engines,
            self._cfg,
            self._transport,
            self._clock,
            functools.partial(self._mark, turn),
            speaker,
            turn.ledger.compute,
            self._phrases,
            self._sleep_until,
        )

    def _failed(self, turn: _Turn, exc: BaseException) -> None:
        """A stage raised during the turn: report it (the turn then apologizes and ends)."""
        stage = (turn.reply.failed_stage or "reply") if turn.reply is not None else "asr"
        if isinstance(exc, EngineError):
            log.warning("turn %d failed in %s: %s", turn.turn_id, stage, exc)
            message, retryable = str(exc), exc.retryable
        else:  # a bug or an engine's own exception: still this turn's problem only
            log.error("turn %d failed in %s", turn.turn_id, stage, exc_info=exc)
            message, retryable = f"internal error in {stage}: {type(exc).__name__}", False
        turn.failed = turn.ledger.failed = stage
        self._transport.emit(ev.TurnFailed(turn.turn_id, self._clock(), stage, message, retryable))

    def _decide_spoken_over(self, turn: _Turn) -> bool:
        """For an utterance spoken over a reply: was it a real interruption? True = reply to it."""
        if turn.spoken_over is None:
            return True
        over = self._by_id.get(turn.spoken_over)
        if over is None or over.done or over.interrupted:  # already confirmed (long speech) or over
            kind = InterruptionKind.WORDS if turn.user_text else InterruptionKind.NO_WORDS
            turn.ledger.interruption = str(kind)
            return True
        said = over.reply.text if over.reply is not None else ""
        kind = classify_interruption(turn.user_text, self._cfg.barge_in.backchannels, said)
        turn.ledger.interruption = str(kind)
        if kind is InterruptionKind.WORDS:
            self._confirm_interruption(over, "barge-in")
            return True
        self._false_interruption(over, kind)
        return False

    # ------------------------------------------------------------ bookkeeping

    def _mark(self, turn: _Turn, mark: Mark, t_ns: int) -> None:
        for b in turn.ledger.mark(mark, t_ns):
            self._transport.emit(
                ev.BudgetExceeded(turn.turn_id, self._clock(), b.stage, b.duration_ms, b.budget_ms)
            )

    def _finish(self, turn: _Turn) -> TurnRecord:
        turn.done = True
        self._mark(turn, Mark.TURN_END, self._clock())
        reply = turn.reply
        played = min(self._transport.played_samples(turn.turn_id), reply.speaker.total) if reply else 0
        heard = reply.heard(played, turn.interrupted) if reply else ""
        if reply is not None:
            turn.ledger.llm_tokens = reply.llm_tokens
            turn.ledger.audio_synthesized_s = reply.audio_synthesized_s
        record = turn.ledger.finish(
            user_text=turn.user_text,
            assistant_text=reply.text.strip() if reply else "",
            heard_text=heard,
            interrupted=turn.interrupted,
            audio_heard_s=played / self._transport.output_rate_hz,
        )
        self.ledger.add(record)
        if turn.user_text and record.interruption in (None, str(InterruptionKind.WORDS)):
            self._remember(turn, heard)
        self._turns.reply_finished(turn.turn_id)
        self._replies.pop(turn.turn_id, None)
        if not self._replies:
            self._no_reply.set()
        self._by_id.pop(turn.turn_id, None)
        self._spawn(turn.transcriber.aclose(), f"close-asr-{turn.turn_id}")
        if self._user is None and not self._replies:
            self._idle.set()
        self._transport.emit(ev.TurnCompleted(turn.turn_id, self._clock(), record))
        return record

    def _remember(self, turn: _Turn, heard: str) -> None:
        """Add the finished turn to the history (see the module docstring) and keep the
        history within the token budget."""
        if turn.failed is not None and not heard:
            return  # nothing of the reply was said: as if the question was never asked
        self.history.append(ChatMessage("user", turn.user_text))
        if heard:
            cut = turn.interrupted or turn.failed is not None
            self.history.append(ChatMessage("assistant", heard + ("..." if cut else "")))
        system = ChatMessage("system", self._cfg.llm.system_prompt)
        self.history = fit_history(self.history, self._cfg.llm.history_max_tokens - message_tokens(system))
        self._history_version += 1

    def _prepare_phrases(self) -> None:
        """Synthesize the filler in the background, so it costs nothing when it is needed.
        (The apology is synthesized when first needed: failures are not the fast path.)"""
        self._phrases_prepared = True
        text = self._cfg.llm.filler_text
        if self._cfg.llm.filler_after_ms > 0 and text:
            self._spawn(self._prepare_phrase(text), "prepare-filler")

    async def _prepare_phrase(self, text: str) -> None:
        try:
            await self._phrases.get(text)
        except Exception:
            log.warning("cannot synthesize %r", text, exc_info=True)

    async def _real_sleep_until(self, t_ns: int) -> None:
        await asyncio.sleep(max(0.0, (t_ns - self._clock()) / 1e9))

    # ------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        """A user turn or a reply is in progress."""
        return not self._idle.is_set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_idle_reply(self) -> None:
        """Return once no reply is in progress."""
        await self._no_reply.wait()

    def unfinished_tasks(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._user is not None:
            await self._user.transcriber.aclose()
        while self._tasks:  # close-asr tasks spawned by replies finishing during the gather
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
