"""One conversation: the asyncio graph that wires VAD -> ASR -> LLM -> TTS.

Every decision is pure and lives elsewhere: who has the floor and what happens to
each turn and its reply is :class:`voice_pipeline.turnstate.TurnMachine` (which owns
the endpointer, the end-of-turn policy and the barge-in tracker); the conversation
history is :class:`voice_pipeline.history.History`; also pure are the echo check
(``voice_pipeline.echo``), the ASR commit policy, clause chunking and the ledger.
This module routes input to them, carries out the machine's commands, and owns the
tasks, queues and clocks.

Ownership:

* The transport calls :meth:`Session.push_audio` for every input chunk; VAD, the
  echo check and the machine's frame step run inline there (well under a
  millisecond per frame), so input backpressure is the transport's own await.
* Each user turn owns a partial-transcript task and, at each pause, the evidence
  tasks (the speculative transcript's words, the turn model's P(complete)) and
  maybe an LLM prefetch; each reply owns one task running
  :meth:`voice_pipeline.reply.Reply.run` (one TaskGroup: LLM -> clauses -> TTS ->
  listener). Barge-in is a direct ``cancel()`` of that task -- never a message racing
  the data -- which aborts the vLLM request, stops synthesis and tells the
  transport to flush. So is a continuation, after which the same turn is heard on
  and answered anew (the cancelled reply's epoch is over: it records nothing more).
* :meth:`Session.aclose` cancels and awaits every task it owns; it is idempotent.

Failures: an exception from ASR, LLM or TTS during a turn (an :class:`EngineError`,
or any other ``Exception`` from an engine) ends that turn only: ``TurnFailed``
(stage ``asr``/``llm``/``tts``), then ``llm.apology`` spoken like a reply (barge-in
works on it), then ``TurnCompleted`` with ``record.failed`` set. What enters the
history is :mod:`voice_pipeline.history`'s rule. A failing turn model only loses
its vote: the policy goes on with the words and the silence.
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
from vad.end_of_turn import Cue, EndOfTurnPolicy, Rule, transcript_cue
from vad.endpointer import EndOfTurn
from voice_pipeline import events as ev
from voice_pipeline import turnstate as ts
from voice_pipeline.audio import finite_audio, last_sound_end, resample_int16, to_float32
from voice_pipeline.clock import ms_to_ns, now_ns
from voice_pipeline.config import Config
from voice_pipeline.echo import echo_residual_db
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError, VoicePipelineError
from voice_pipeline.history import History
from voice_pipeline.inputbuf import InputHistory
from voice_pipeline.ledger import EndOfTurnRecord, Mark, SessionLedger, TurnLedger, TurnRecord
from voice_pipeline.playout import Playout
from voice_pipeline.reply import Phrases, PrefetchedStream, Reply, ReplySpeaker
from voice_pipeline.transport import Transport

log = logging.getLogger(__name__)

_HISTORY_S = 4.0  # recent input kept for pre-roll, sample->time lookups and the echo check
_END_SEARCH_S = 0.3  # how far before the VAD's end of speech to look for the acoustic end
_ECHO_WINDOW_S = 0.128  # microphone window compared with what was played
_REFERENCE_KEEP_S = 10.0
#: policy waits that are the user's, not the pipeline's: they extend the turn's budgets
_DELIBERATE = (Rule.UNSURE, Rule.INCOMPLETE)


@dataclass(slots=True)
class _Turn:
    """Runtime state of one turn (the user's utterance and the reply to it)."""

    turn_id: int
    ledger: TurnLedger
    transcriber: UtteranceTranscriber
    spoken_over: int | None = None  # the reply this utterance was spoken over
    epoch: int = 0  # +1 at each continuation: a reply of an older epoch records nothing
    partial_task: asyncio.Task[None] | None = None
    evidence_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    evidence_at: dict[str, float] = field(default_factory=dict)  # words/sound/sound_compute ms
    reply_task: asyncio.Task[None] | None = None
    reply: Reply | None = None
    user_text: str = ""
    user_paused: bool = False  # the VAD hears a pause inside the user's utterance
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
        self._input = InputHistory(self.rate_hz, _HISTORY_S, clock)
        t = cfg.turn
        policy = (
            EndOfTurnPolicy(
                cfg.vad.end_silence_ms,
                t.unsure_silence_ms,
                t.incomplete_silence_ms,
                t.complete_threshold,
                uses_model=engines.turn is not None,
            )
            if t.semantic
            else None
        )
        self._machine = ts.TurnMachine(
            cfg.vad,
            t,
            cfg.barge_in,
            sample_rate_hz=self.rate_hz,
            frame_samples=self._frame,
            time_of=self._input.time_of,
            policy=policy,
            prefetch=cfg.llm.speculative_start,
        )
        self.ledger = SessionLedger(cfg.budget)
        self._history = History(cfg.llm.system_prompt, cfg.llm.history_max_tokens)
        self._vad_end = 0  # end sample of the last VAD frame
        # what the listener is playing, on a timeline of pipeline-rate samples since t0
        self._t0 = clock()
        self._reference = Playout(self.rate_hz)
        self._turns: dict[int, _Turn] = {}
        self._capture: _Turn | None = None  # the turn whose transcriber gets the input
        self._replying: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._idle = asyncio.Event()  # no user turn and no reply in progress
        self._idle.set()
        self._no_reply = asyncio.Event()
        self._no_reply.set()

    # ------------------------------------------------------------ the conversation

    @property
    def history(self) -> list[ChatMessage]:
        """The past turns the next request is sent with (see :mod:`voice_pipeline.history`)."""
        return self._history.messages

    @history.setter
    def history(self, messages: list[ChatMessage]) -> None:
        self._history.messages = list(messages)
        self._history.version += 1

    # ------------------------------------------------------------ input side

    async def push_audio(self, samples: NDArray[np.float32], t_ns: int | None = None) -> None:
        """Feed mono float32 input at ``rate_hz``; ``t_ns`` = when its last sample was captured."""
        if self._closed:
            raise VoicePipelineError("session is closed")
        if not self._phrases_prepared:
            self._prepare_phrases()
        samples = finite_audio(samples)  # one NaN would corrupt the VAD's recurrent state
        self._input.append(samples, self._clock() if t_ns is None else t_ns)
        if self._capture is not None:
            self._capture.transcriber.append(samples)
        for prob in self._vad.push(samples):
            self._vad_end += self._frame
            if prob >= self._cfg.vad.neg_threshold and self._is_echo():
                prob = 0.0  # the assistant's own voice coming back
            self._execute(
                self._machine.frame(
                    prob,
                    frame_start_ns=self._input.time_of(self._vad_end - self._frame),
                    now_ns=self._clock(),
                    is_echo=self._long_echo,
                )
            )

    def time_of_sample(self, sample: int) -> int:
        return self._input.time_of(sample)

    def interrupt(self) -> None:
        """Explicit interrupt (push-to-talk pressed while the assistant speaks)."""
        self._execute(self._machine.interrupt(self._clock()))

    def ptt_start(self) -> None:
        """Push-to-talk pressed: interrupt the assistant and start the user's turn now."""
        self._execute(self._machine.ptt_pressed(self._input.position, self._clock()))

    def ptt_end(self) -> None:
        """Push-to-talk released: the user's turn ends now (no end-of-speech silence)."""
        self._execute(self._machine.ptt_released(self._input.position))

    # ------------------------------------------------------------ carrying out commands

    def _execute(self, cmds: list[ts.Command]) -> None:
        for cmd in cmds:
            match cmd:
                case ts.BeginTurn():
                    self._begin_turn(cmd)
                case ts.ContinueTurn(turn_id=tid):
                    self._continue_turn(self._turns[tid])
                case ts.Speculate(turn_id=tid, speech_end_sample=end):
                    self._speculate(self._turns[tid], end)
                case ts.StopSpeculating(turn_id=tid):
                    self._stop_speculating(self._turns[tid])
                case ts.Prefetch(turn_id=tid):
                    self._start_prefetch(self._turns[tid])
                case ts.EndTurn(turn_id=tid, end=end):
                    self._end_turn(self._turns[tid], end)
                case ts.StartReply(turn_id=tid):
                    self._start_reply(self._turns[tid])
                case ts.PauseReply(turn_id=tid, onset_ns=onset):
                    self._pause_reply(self._turns[tid], onset)
                case ts.ResumeReply(turn_id=tid, kind=kind):
                    turn = self._turns[tid]
                    turn.ledger.false_interruptions += 1
                    self._transport.emit(ev.ReplyResumed(tid, self._clock(), str(kind)))
                    if turn.reply is not None:
                        self._spawn(turn.reply.speaker.resume(), f"resume-{tid}")
                case ts.CancelReply(turn_id=tid, reason=reason, barge_in=barge_in):
                    self._cancel_reply(self._turns[tid], reason, barge_in=barge_in)
                case ts.Seal(turn_id=tid):
                    if self._capture is not None and self._capture.turn_id == tid:
                        self._capture = None
                case ts.Answer() | ts.Dismiss():
                    pass  # read by the reply task that asked (see _answer)

    def _begin_turn(self, cmd: ts.BeginTurn) -> None:
        transcriber = UtteranceTranscriber(self._engines.asr, self._cfg.asr, stamp=self._clock)
        turn = _Turn(cmd.turn_id, self.ledger.new_turn(cmd.turn_id), transcriber, spoken_over=cmd.spoken_over)
        self._turns[turn.turn_id] = turn
        self._capture = turn
        self._idle.clear()
        self._mark(turn, Mark.SPEECH_START, self.time_of_sample(cmd.onset_sample))
        transcriber.start(self._input.since(cmd.start_sample))
        self._transport.emit(ev.SpeechStarted(turn.turn_id, self._clock()))
        self._start_partials(turn)

    def _continue_turn(self, turn: _Turn) -> None:
        """The user went on before hearing the reply: same turn, the reply dropped."""
        reply, task = turn.reply, turn.reply_task
        turn.epoch += 1  # from here on the old reply records nothing
        turn.reply, turn.reply_task = None, None
        self._replying.discard(turn.turn_id)
        if not self._replying:
            self._no_reply.set()
        if task is not None and not task.done():
            task.cancel()  # aborts the LLM request, stops synthesis
        if reply is not None and reply.speaker.sent:
            self._transport.clear(turn.turn_id)
            self._reference_cleared(turn.turn_id)
        self._drop_prefetch(turn)
        self._drop_evidence(turn)
        turn.transcriber.invalidate()
        turn.user_text, turn.failed, turn.user_paused = "", None, False
        tokens = reply.llm_tokens if reply is not None else 0
        turn.ledger.continued(tokens, reply.audio_synthesized_s if reply is not None else 0.0)
        self._capture = turn
        self._idle.clear()
        self._transport.emit(ev.TurnContinued(turn.turn_id, self._clock()))
        self._start_partials(turn)

    def _end_turn(self, turn: _Turn, end: EndOfTurn) -> None:
        if turn.partial_task is not None:
            turn.partial_task.cancel()
        if end.rule in (Rule.PUSH_TO_TALK, Rule.MAX_TURN):
            turn.transcriber.speculate()  # the final decode starts now
        speech_end = self.time_of_sample(self._acoustic_end(end.speech_end_sample))
        self._mark(turn, Mark.SPEECH_END, speech_end)
        decided = self._clock()
        extra_ms = end.wait_ms - self._cfg.vad.end_silence_ms
        if end.rule in _DELIBERATE and extra_ms > 0:
            turn.ledger.allow(extra_ms, "endpointing", "voice_to_voice")
        self._mark(turn, Mark.ENDPOINT, decided)
        # the wait the turn-taking policy requires: VAD hangover + the silence the rule asked for
        required = self.time_of_sample(end.speech_end_sample) + ms_to_ns(end.wait_ms)
        turn.ledger.compute("endpoint_wait", speech_end, min(required, decided))
        at = turn.evidence_at
        turn.ledger.end_of_turn = EndOfTurnRecord(
            rule=str(end.rule),
            silence_ms=(end.decided_sample - end.speech_end_sample) * 1000 / self.rate_hz,
            wait_ms=end.wait_ms,
            p_complete=end.evidence.p_complete,
            cue=None if end.evidence.cue is None else str(end.evidence.cue),
            words_after_ms=at.get("words"),
            sound_after_ms=at.get("sound"),
            sound_compute_ms=at.get("sound_compute"),
        )
        self._drop_evidence(turn)
        self._transport.emit(ev.EndpointDetected(turn.turn_id, decided, speech_end))

    def _acoustic_end(self, vad_end: int) -> int:
        """The VAD's last voiced frame ends 40-100 ms after the sound does (model
        hangover); look at the level of the audio before it for the true end."""
        start = max(0, vad_end - int(_END_SEARCH_S * self.rate_hz))
        end = last_sound_end(self._input.since(start)[: vad_end - start], self.rate_hz)
        return vad_end if end is None else min(vad_end, start + end)

    def _start_reply(self, turn: _Turn) -> None:
        self._replying.add(turn.turn_id)
        self._no_reply.clear()
        epoch = turn.epoch
        turn.reply_task = self._spawn(self._reply_turn(turn, epoch), f"reply-{turn.turn_id}")
        turn.reply_task.add_done_callback(functools.partial(self._reply_done, turn, epoch))

    # ------------------------------------------------------------ the evidence of a pause

    def _speculate(self, turn: _Turn, speech_end: int) -> None:
        """A pause began: the speculative final decode and the turn model, in parallel."""
        turn.user_paused = True
        turn.evidence_at = {}
        self._drop_evidence(turn)
        if self._cfg.asr.speculative_final:
            turn.transcriber.speculate()
        tasks = [self._spawn(self._words(turn, speech_end), f"words-{turn.turn_id}")]
        if self._engines.turn is not None and self._cfg.turn.semantic:
            tasks.append(self._spawn(self._sound(turn, speech_end), f"turn-model-{turn.turn_id}"))
        turn.evidence_tasks = tasks

    def _stop_speculating(self, turn: _Turn) -> None:
        turn.user_paused = False
        turn.transcriber.invalidate()
        self._drop_prefetch(turn)
        self._drop_evidence(turn)

    def _drop_evidence(self, turn: _Turn) -> None:
        for task in turn.evidence_tasks:
            task.cancel()
        turn.evidence_tasks = []

    async def _words(self, turn: _Turn, speech_end: int) -> None:
        spec = await turn.transcriber.speculative() if self._cfg.asr.speculative_final else None
        cue = Cue.NEUTRAL if spec is None else transcript_cue(spec.text)
        turn.evidence_at["words"] = self._since_vad_end(speech_end)
        self._execute(self._machine.evidence(turn.turn_id, speech_end, cue=cue))

    async def _sound(self, turn: _Turn, speech_end: int) -> None:
        model = self._engines.turn
        assert model is not None
        audio = turn.transcriber.audio()

        def run() -> tuple[float, int, int]:
            start = self._clock()
            return model.p_complete(audio), start, self._clock()

        try:
            p, start, end = await asyncio.to_thread(run)
        except Exception:
            log.warning("turn %d: the turn model failed; deciding without it", turn.turn_id, exc_info=True)
            self._execute(self._machine.evidence(turn.turn_id, speech_end, sound_failed=True))
            return
        turn.evidence_at["sound"] = self._since_vad_end(speech_end)
        turn.evidence_at["sound_compute"] = (end - start) / 1e6
        self._execute(self._machine.evidence(turn.turn_id, speech_end, p_complete=p))

    def _since_vad_end(self, sample: int) -> float:
        return (self._clock() - self.time_of_sample(sample)) / 1e6

    # ------------------------------------------------------------ LLM prefetch

    def _start_prefetch(self, turn: _Turn) -> None:
        """Start the LLM on the speculative transcript while the end-of-turn silence runs."""
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
            spec = await turn.transcriber.speculative()
            text = "" if spec is None else spec.text.strip()
            if not text:
                return
            buffer = PrefetchedStream(text, history_version=self._history.version, started_ns=self._clock())
            turn.prefetched = buffer
            ready.set()
            request_id = f"prefetch-{id(self)}-{turn.turn_id}-{turn.epoch}"
            await buffer.fill(self._engines.llm, self._history.request(text), request_id)
        finally:
            ready.set()

    async def _take_prefetch(self, turn: _Turn) -> PrefetchedStream | None:
        """The prefetched reply if it was asked with exactly this turn's words and history."""
        if turn.prefetch_task is None:
            return None
        await turn.prefetch_ready.wait()
        buffer = turn.prefetched
        stale = buffer is not None and buffer.history_version != self._history.version
        if buffer is None or buffer.user_text != turn.user_text or stale:
            self._drop_prefetch(turn)
            return None
        return buffer

    # ------------------------------------------------------------ the reply

    async def _reply_turn(self, turn: _Turn, epoch: int) -> None:
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
            if epoch == turn.epoch:  # else the user continued the turn: it is not over
                self._drop_prefetch(turn)
                self._finish(turn)

    def _reply_done(self, turn: _Turn, epoch: int, _task: asyncio.Task[None]) -> None:
        if not turn.done and epoch == turn.epoch:  # cancelled before its first step
            self._finish(turn)

    async def _answer(self, turn: _Turn) -> None:
        final = await turn.transcriber.final()
        turn.ledger.asr_decode_ms = final.decode_ms
        turn.ledger.asr_speculative = final.speculative
        turn.ledger.compute("asr_final", final.decode_start_ns, final.decode_end_ns)
        self._mark(turn, Mark.TRANSCRIPT_FINAL, self._clock())
        turn.user_text = final.text.strip()
        self._transport.emit(ev.TranscriptFinalized(turn.turn_id, self._clock(), turn.user_text))
        over = self._turns.get(turn.spoken_over) if turn.spoken_over is not None else None
        said = over.reply.text if over is not None and over.reply is not None else ""
        cmds = self._machine.transcribed(turn.turn_id, turn.user_text, said)
        self._execute(cmds)
        verdict = next((c for c in cmds if isinstance(c, ts.Answer | ts.Dismiss)), None)
        if verdict is not None and verdict.interruption is not None:
            turn.ledger.interruption = str(verdict.interruption)
        if not isinstance(verdict, ts.Answer):
            return  # no words, or a backchannel, echo or noise over a reply: no reply
        if over is not None and over.reply_task is not None and not over.reply_task.done():
            await asyncio.wait([over.reply_task])  # its heard text enters the history first
        prefetched = await self._take_prefetch(turn)
        turn.ledger.llm_prefetched = prefetched is not None
        messages = self._history.request(turn.user_text)
        turn.reply = self._new_reply(turn)
        filler_at = None
        speech_end = turn.ledger.get(Mark.SPEECH_END)
        if self._cfg.llm.filler_after_ms > 0 and speech_end is not None:
            filler_at = speech_end + ms_to_ns(self._cfg.llm.filler_after_ms)
        await turn.reply.run(messages, prefetched, filler_at_ns=filler_at)

    def _new_reply(self, turn: _Turn) -> Reply:
        epoch = turn.epoch
        speaker = ReplySpeaker(
            turn.turn_id,
            self._transport,
            functools.partial(self._reference_sent, turn.turn_id),
            functools.partial(self._reference_cleared, turn.turn_id),
            on_started=functools.partial(self._reply_audible, turn, epoch),
            played_base=self._transport.played_samples(turn.turn_id),
        )
        return Reply(
            turn.turn_id,
            self._engines,
            self._cfg,
            self._transport,
            self._clock,
            functools.partial(self._mark_epoch, turn, epoch),
            speaker,
            functools.partial(self._compute_epoch, turn, epoch),
            self._phrases,
            self._sleep_until,
        )

    def _reply_audible(self, turn: _Turn, epoch: int) -> None:
        if epoch == turn.epoch:
            self._execute(self._machine.reply_audible(turn.turn_id, self._clock()))

    def _pause_reply(self, turn: _Turn, onset_ns: int) -> None:
        if turn.reply is None:
            return
        self._mark(turn, Mark.BARGE_IN_ONSET, onset_ns)
        turn.reply.speaker.pause()
        self._mark(turn, Mark.FLUSH_SENT, self._clock())
        self._transport.emit(ev.ReplyPaused(turn.turn_id, self._clock()))

    def _cancel_reply(self, turn: _Turn, reason: ts.CancelReason, *, barge_in: bool) -> None:
        if barge_in:
            self._mark(turn, Mark.BARGE_IN_CONFIRMED, self._clock())
        if reason.value.startswith("stopped by"):  # a false interruption, not resumed
            turn.ledger.false_interruptions += 1
        if turn.done or turn.interrupted or turn.reply_task is None:
            return
        turn.interrupted = True
        self._transport.clear(turn.turn_id)
        self._reference_cleared(turn.turn_id)
        self._transport.emit(ev.ReplyInterrupted(turn.turn_id, self._clock(), str(reason)))
        turn.reply_task.cancel()

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

    def _finish(self, turn: _Turn) -> TurnRecord:
        turn.done = True
        self._mark(turn, Mark.TURN_END, self._clock())
        reply = turn.reply
        played = reply.speaker.played() if reply else 0
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
        if turn.user_text and record.interruption in (None, "words"):
            if turn.failed is None or heard:  # a failed turn of which nothing was heard: never asked
                self._history.remember(turn.user_text, heard, cut=turn.interrupted or turn.failed is not None)
        self._execute(self._machine.reply_finished(turn.turn_id))
        self._replying.discard(turn.turn_id)
        if not self._replying:
            self._no_reply.set()
        self._turns.pop(turn.turn_id, None)
        self._drop_evidence(turn)
        self._spawn(turn.transcriber.aclose(), f"close-asr-{turn.turn_id}")
        if self._machine.user is None and not self._replying:
            self._idle.set()
        self._transport.emit(ev.TurnCompleted(turn.turn_id, self._clock(), record))
        return record

    # ------------------------------------------------------------ partials

    def _start_partials(self, turn: _Turn) -> None:
        if self._cfg.asr.partial_interval_ms > 0:
            turn.partial_task = self._spawn(self._partials(turn), f"partials-{turn.turn_id}")

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

    # ------------------------------------------------------------ bookkeeping

    def _mark(self, turn: _Turn, mark: Mark, t_ns: int) -> None:
        for b in turn.ledger.mark(mark, t_ns):
            self._transport.emit(
                ev.BudgetExceeded(turn.turn_id, self._clock(), b.stage, b.duration_ms, b.budget_ms)
            )

    def _mark_epoch(self, turn: _Turn, epoch: int, mark: Mark, t_ns: int) -> None:
        if epoch == turn.epoch:
            self._mark(turn, mark, t_ns)

    def _compute_epoch(self, turn: _Turn, epoch: int, name: str, start_ns: int, end_ns: int) -> None:
        if epoch == turn.epoch:
            turn.ledger.compute(name, start_ns, end_ns)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

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

    def sizes(self) -> dict[str, int]:
        """How much the session holds (the soak benchmark watches these stay bounded)."""
        return {
            "input_chunks": len(self._input._chunks),
            "turns_open": len(self._turns),
            "replies": len(self._replying),
            "tasks": len(self._tasks),
            "echo_reference_chunks": len(self._reference.chunks),
            "history_messages": len(self._history.messages),
        }

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for turn in list(self._turns.values()):
            if not turn.done:
                await turn.transcriber.aclose()
        while self._tasks:  # close-asr tasks spawned by replies finishing during the gather
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
