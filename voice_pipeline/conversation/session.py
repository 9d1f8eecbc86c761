"""One conversation: the asyncio graph that wires VAD -> ASR -> LLM -> TTS.

Every decision is pure and lives elsewhere. Who has the floor, and what happens to
each turn and its reply, is :class:`voice_pipeline.turntaking.machine.TurnMachine` (it owns the
endpointer, the semantic end-of-turn policy and the barge-in tracker); what the LLM
sees is :class:`voice_pipeline.conversation.history.History`; the echo check, the ASR commit
policy, clause chunking and the ledger are pure too. This module routes input to
them, carries out the machine's commands (on :class:`voice_pipeline.conversation.turn.Turn`), and
owns the tasks, queues and clocks.

Ownership:

* The transport calls :meth:`Session.push_audio` for every input chunk; VAD, the
  echo check and the machine's frame step run inline there (well under a
  millisecond per frame), so input backpressure is the transport's own await.
* Every task is spawned here (:meth:`Session._spawn`) and has its turn as owner: the
  partial transcripts, the evidence of each pause and the LLM prefetch
  (:mod:`voice_pipeline.conversation.utterance`), and one reply task per turn running
  :meth:`voice_pipeline.conversation.reply.Reply.run` (one TaskGroup: LLM -> clauses -> TTS ->
  listener). Barge-in is a direct ``cancel()`` of that task -- never a message racing
  the data -- which aborts the vLLM request, stops synthesis and tells the transport
  to flush. So is a continuation, after which the same turn is heard on and answered
  anew (the cancelled reply's epoch is over: it records nothing more).
* :meth:`Session.aclose` cancels and awaits every task it owns; it is idempotent.

A client may steer more than the config (a realtime session), all typed and decided
by the machine: :meth:`Session.configure`, :meth:`Session.commit`, :meth:`Session.clear_input`,
:meth:`Session.respond` (a reply on demand) and :meth:`Session.cancel`. What the LLM
sees comes from the session's :class:`~voice_pipeline.conversation.history.Context`.

Failures: an exception from ASR, LLM or TTS during a turn ends that turn only:
``TurnFailed``, then ``dialogue.apology`` spoken like a reply (barge-in works on it), then
``TurnCompleted`` with ``record.failed`` set; what enters the history is
:mod:`voice_pipeline.conversation.history`'s rule. A failing turn model only loses its vote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llm.base import ChatMessage
from llm.prefill import PrefillPlanner, Prefix
from vad.end_of_turn import EndOfTurnPolicy
from voice_pipeline import events as ev
from voice_pipeline.audio import finite_audio, last_sound_end
from voice_pipeline.clock import ms_to_ns, now_ns
from voice_pipeline.config import BargeInConfig, Config, TurnConfig, VADConfig
from voice_pipeline.conversation.history import Context, History, admits, remember
from voice_pipeline.conversation.reply import Phrases, ReplyOptions, ReplyRequest
from voice_pipeline.conversation.turn import Turn, TurnContext
from voice_pipeline.conversation.warmer import PrefixWarmer
from voice_pipeline.engines import Engines
from voice_pipeline.errors import ClosedError
from voice_pipeline.inputbuf import InputHistory
from voice_pipeline.ledger.ledger import Mark, SessionLedger
from voice_pipeline.ledger.records import Span, TurnRecord
from voice_pipeline.tools.runner import ToolBox
from voice_pipeline.transport import Transport
from voice_pipeline.turntaking import messages as te
from voice_pipeline.turntaking.echo import EchoGate
from voice_pipeline.turntaking.machine import TurnMachine, end_of_turn_policy

log = logging.getLogger(__name__)

_HISTORY_S = 4.0  # recent input kept for pre-roll, sample->time lookups and the echo check
_END_SEARCH_S = 0.3  # how far before the VAD's end of speech to look for the acoustic end


class Session:
    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        transport: Transport,
        *,
        clock: Callable[[], int] = now_ns,
        sleep_until: Callable[[int], Awaitable[None]] | None = None,
        context: Context | None = None,
    ) -> None:
        """``sleep_until(t_ns)`` waits until ``clock()`` reaches ``t_ns`` (default: real time);
        ``context``: what the LLM is asked with (default: the session's own History)."""
        self._cfg = cfg
        self._transport = transport
        self._clock = clock
        self.rate_hz = cfg.audio.pipeline_rate_hz
        self._vad = engines.vad.stream()
        self._frame = engines.vad.frame_samples
        self._input = InputHistory(self.rate_hz, _HISTORY_S, clock)
        self._vad_end = 0  # end sample of the last VAD frame
        self._echo = EchoGate(cfg.barge_in, self.rate_hz, self._input, clock())
        self._phrases = Phrases(engines.tts, transport.output_rate_hz)
        self._phrases_prepared = False
        self._has_turn_model = engines.turn is not None
        self._machine = TurnMachine(
            cfg.vad,
            cfg.turn,
            cfg.barge_in,
            sample_rate_hz=self.rate_hz,
            frame_samples=self._frame,
            time_of=self._input.time_of,
            policy=self._policy(cfg),
            prefetch=cfg.dialogue.speculative_start and not cfg.dialogue.tools,  # README "Tools"
        )
        self._history = History(cfg.dialogue.system_prompt, cfg.dialogue.history_max_tokens)
        tools = None if context is not None else ToolBox.of(cfg.dialogue, self._spawn, self._history.resolve)
        self._ctx = TurnContext(
            engines,
            cfg,
            transport,
            clock,
            sleep_until or self._real_sleep_until,
            self._phrases,
            self._echo,
            self._input.time_of,
            self._spawn,
            on_evidence=lambda found: self._execute(self._machine.evidence(found)),
            on_audible=self._reply_audible,
            on_committed=self._warm,
            tools=tools,
        )
        self.ledger = SessionLedger(cfg.budget)
        tuning = engines.tuning
        block = tuning.kv_block_tokens if tuning is not None else cfg.llm.kv_block_tokens or 32
        planner = PrefillPlanner(block_tokens=block, tag=f"{id(self):x}")
        self._warmer = PrefixWarmer(engines.llm, planner, self._spawn, enabled=cfg.dialogue.prefill_ahead)
        self._context: Context = context or self._history
        self._reply_options = ReplyOptions()
        self._requests: dict[int, ReplyRequest] = {}  # asked for, until their turn begins
        self._turns: dict[int, Turn] = {}
        self._capture: Turn | None = None  # the turn whose utterance gets the input
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
        """The past turns the next request is sent with (see :mod:`voice_pipeline.conversation.history`)."""
        return self._history.messages

    @history.setter
    def history(self, messages: list[ChatMessage]) -> None:
        self._history.messages = list(messages)
        self._history.version += 1

    # ------------------------------------------------------------ input side

    async def push_audio(self, samples: NDArray[np.float32], t_ns: int | None = None) -> None:
        """Feed mono float32 input at ``rate_hz``; ``t_ns`` = when its last sample was captured."""
        if self._closed:
            raise ClosedError("the session")
        if not self._phrases_prepared:
            self._prepare_phrases()
        samples = finite_audio(samples)  # one NaN would corrupt the VAD's recurrent state
        self._input.append(samples, self._clock() if t_ns is None else t_ns)
        if self._capture is not None:
            self._capture.utterance.append(samples)
        for prob in self._vad.push(samples):
            self._vad_end += self._frame
            end = self._vad_end
            if prob >= self._cfg.vad.neg_threshold and self._echo.is_echo(end):
                prob = 0.0  # the assistant's own voice coming back
            self._execute(
                self._machine.frame(
                    prob,
                    frame_start_ns=self._input.time_of(end - self._frame),
                    now_ns=self._clock(),
                    is_echo=functools.partial(self._echo.speech_is_echo, mic_end=end),
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

    # ------------------------------------------------------------ what a client steers

    def configure(
        self,
        vad: VADConfig,
        turn: TurnConfig,
        barge_in: BargeInConfig,
        options: te.TurnOptions,
        reply: ReplyOptions,
    ) -> None:
        """New turn-taking settings for the frames and turns to come; ``reply``: how the
        automatic replies are given. Changing ``options.detection`` drops the user's turn
        in progress (see :meth:`TurnMachine.configure`)."""
        self._cfg = cfg = dataclasses.replace(self._cfg, vad=vad, turn=turn, barge_in=barge_in)
        self._ctx = dataclasses.replace(self._ctx, cfg=cfg)
        self._reply_options = reply
        position = self._input.position
        self._execute(self._machine.configure(vad, barge_in, self._policy(cfg), options, position=position))

    def commit(self) -> None:
        """The client committed its input: the user's turn in progress ends now."""
        self._execute(self._machine.commit(self._input.position))

    def clear_input(self) -> None:
        """The client cleared its input: the user's turn in progress is dropped."""
        self._execute(self._machine.drop(self._input.position))

    def respond(self, request: ReplyRequest) -> int:
        """Start a reply with no user speech; returns its turn's id."""
        cmds = self._machine.respond()
        turn_id = cmds[0].turn_id
        self._requests[turn_id] = request
        self._execute(cmds)
        return turn_id

    def cancel(self, turn_id: int) -> None:
        """The client cancelled the reply of ``turn_id`` (if it is still in progress)."""
        self._execute(self._machine.cancel(turn_id))

    def _policy(self, cfg: Config) -> EndOfTurnPolicy | None:
        return end_of_turn_policy(cfg.vad, cfg.turn, uses_model=self._has_turn_model)

    # ------------------------------------------------------------ carrying out commands

    def _execute(self, cmds: list[te.Command]) -> None:
        for cmd in cmds:
            match cmd:
                case te.BeginTurn(turn_id=tid, onset_sample=onset, start_sample=start, spoken_over=over):
                    turn = Turn(tid, self.ledger.new_turn(tid), self._ctx, spoken_over=over)
                    self._turns[tid] = turn
                    self._capture = turn
                    self._idle.clear()
                    turn.begin(self._input.time_of(onset), start, self._input.since(start))
                    self._warm()
                case te.BeginReply(turn_id=tid):
                    turn = Turn(tid, self.ledger.new_turn(tid), self._ctx, spoken_over=None)
                    self._turns[tid] = turn
                    turn.request = self._requests.pop(tid)
                    turn.user_text = turn.request.user_text
                    self._idle.clear()
                case te.DropTurn(turn_id=tid):
                    self._drop(self._turns.pop(tid))
                case te.ContinueTurn(turn_id=tid):
                    turn = self._turns[tid]
                    self._reply_over(tid)
                    self._capture = turn
                    self._idle.clear()
                    turn.continue_()
                case te.Speculate(turn_id=tid, speech_end_sample=end):
                    self._turns[tid].utterance.speculate(end)
                case te.StopSpeculating(turn_id=tid):
                    self._turns[tid].utterance.stop_speculating()
                case te.Prefetch(turn_id=tid) if self._reply_options.tools is None:  # it has no tools
                    self._warmer.llm_starting()
                    turn = self._turns[tid]
                    tag = f"{id(self)}-{tid}-{turn.epoch}"
                    request = functools.partial(self._context.request, turn_id=tid)
                    turn.utterance.prefetch(request, self._context.version, tag)
                case te.EndTurn(turn_id=tid, end=end):
                    speech_end = self._input.time_of(self._acoustic_end(end.speech_end_sample))
                    self._turns[tid].end(end, speech_end)
                case te.StartReply(turn_id=tid):
                    self._warmer.llm_starting()
                    self._start_reply(self._turns[tid])
                case te.PauseReply(turn_id=tid, onset_ns=onset):
                    self._turns[tid].pause_reply(onset)
                case te.ResumeReply(turn_id=tid, kind=kind):
                    self._turns[tid].resume_reply(kind)
                case te.CancelReply(turn_id=tid, reason=reason, barge_in=barge_in):
                    self._turns[tid].cancel_reply(reason, barge_in=barge_in)
                case te.Seal(turn_id=tid):
                    if self._capture is not None and self._capture.turn_id == tid:
                        self._capture = None
                case te.Answer() | te.Keep() | te.Dismiss():
                    pass  # read by the reply task that asked (see _answer)

    def _warm(self, committed: str = "") -> None:
        """Keep the next request's known start in the LLM's prefix cache (:mod:`.warmer`):
        the system prompt and history, and the committed words of the user's utterance."""
        idle = not self._replying and not any(t.utterance.prefetching for t in self._turns.values())
        self._warmer.warm(self._prefix(committed), idle=idle)

    def _prefix(self, committed: str = "") -> Prefix:
        """The known start of the next request: the context's prefix (system prompt and the
        past turns: the History, or a realtime session's conversation) + the committed words."""
        return Prefix(tuple(self._context.prefix()), committed.strip())

    def _acoustic_end(self, vad_end: int) -> int:
        """The VAD's last voiced frame ends 40-100 ms after the sound does (model
        hangover); look at the level of the audio before it for the true end."""
        start = max(0, vad_end - int(_END_SEARCH_S * self.rate_hz))
        end = last_sound_end(self._input.since(start)[: vad_end - start], self.rate_hz)
        return vad_end if end is None else min(vad_end, start + end)

    # ------------------------------------------------------------ the reply

    def _start_reply(self, turn: Turn) -> None:
        self._replying.add(turn.turn_id)
        self._no_reply.clear()
        epoch = turn.epoch
        turn.reply_task = self._spawn(self._reply_turn(turn, epoch), f"reply-{turn.turn_id}")
        turn.reply_task.add_done_callback(functools.partial(self._reply_done, turn, epoch))

    def _reply_over(self, turn_id: int) -> None:
        self._replying.discard(turn_id)
        if not self._replying:
            self._no_reply.set()

    async def _reply_turn(self, turn: Turn, epoch: int) -> None:
        try:
            try:
                await self._answer(turn)
            except* Exception as group:
                turn.fail(_first_leaf(group))
            if turn.failed is not None and self._cfg.dialogue.apology and self._spoken(turn):
                reply = turn.reply or turn.new_reply()
                turn.reply = reply
                await reply.say(self._cfg.dialogue.apology, Mark.APOLOGY_SENT)
        finally:
            if epoch == turn.epoch:  # else the user continued the turn: it is not over
                turn.utterance.drop_prefetch()
                self._finish(turn)

    def _spoken(self, turn: Turn) -> bool:
        """The turn's reply is spoken (not text only): an apology is too."""
        if turn.reply is not None:
            return turn.reply.options.speak
        return (turn.request.options if turn.request is not None else self._reply_options).speak

    def _reply_done(self, turn: Turn, epoch: int, _task: asyncio.Task[None]) -> None:
        if not turn.done and epoch == turn.epoch:  # cancelled before its first step
            self._finish(turn)

    async def _answer(self, turn: Turn) -> None:
        if turn.request is not None:  # asked for directly: no words to transcribe
            turn.reply = turn.new_reply()
            await turn.reply.run(list(turn.request.messages), options=turn.request.options)
            return
        final = await turn.final_transcript()
        turn.ledger.asr_decode_ms = final.decode_ms
        turn.ledger.asr_speculative = final.speculative
        turn.ledger.compute(Span.ASR_FINAL, final.decode_start_ns, final.decode_end_ns)
        turn.mark(Mark.TRANSCRIPT_FINAL, self._clock())
        turn.user_text = final.text.strip()
        self._transport.emit(ev.TranscriptFinalized(turn.turn_id, self._clock(), turn.user_text))
        over = self._turns.get(turn.spoken_over) if turn.spoken_over is not None else None
        said = over.reply.text if over is not None and over.reply is not None else ""
        transcribed = self._machine.transcribed(turn.turn_id, turn.user_text, said)
        self._execute(list(transcribed.commands))
        verdict = transcribed.verdict
        if isinstance(verdict, te.Answer | te.Dismiss) and verdict.interruption is not None:
            turn.ledger.interruption = verdict.interruption
        if not isinstance(verdict, te.Answer):
            return  # no words, a backchannel, echo or noise over a reply, or kept: no reply
        # what was heard of earlier replies cut by the user (or their unheard words) enters the history first
        ending = [t.reply_task for t in self._turns.values() if t.turn_id < turn.turn_id and t.winding_down]
        if ending:
            await asyncio.wait([task for task in ending if task is not None])
        prefetched = await turn.utterance.take_prefetch(turn.user_text, self._context.version)
        turn.ledger.llm_prefetched = prefetched is not None
        messages = self._context.request(turn.user_text, turn.turn_id)
        turn.reply = turn.new_reply()
        filler_at = None
        speech_end = turn.ledger.get(Mark.SPEECH_END)
        if self._cfg.dialogue.filler_after_ms > 0 and speech_end is not None:
            filler_at = speech_end + ms_to_ns(self._cfg.dialogue.filler_after_ms)
        await turn.reply.run(messages, prefetched, filler_at_ns=filler_at, options=self._reply_options)

    def _reply_audible(self, turn_id: int, epoch: int) -> None:
        turn = self._turns.get(turn_id)
        if turn is not None and epoch == turn.epoch:
            self._execute(self._machine.reply_audible(turn_id, self._clock()))

    def _finish(self, turn: Turn) -> TurnRecord:
        record, heard = turn.finish()
        self.ledger.add(record)
        asked, failed = turn.request is None or turn.request.remember, turn.failed is not None
        if admits(turn.user_text, asked=asked, interruption=record.interruption, failed=failed, heard=heard):
            cut, tools = turn.interrupted or failed, turn.tool_messages()
            remember(self._context, turn.user_text, heard, cut=cut, tools=tools)
        self._execute(self._machine.reply_finished(turn.turn_id))
        self._reply_over(turn.turn_id)
        if record.assistant_text and not turn.interrupted and turn.failed is None:
            self._warmer.served(self._prefix())  # the reply's own generation cached it
        self._warm()
        self._turns.pop(turn.turn_id, None)
        self._spawn(turn.utterance.aclose(), f"close-asr-{turn.turn_id}")
        self._maybe_idle()
        self._transport.emit(ev.TurnCompleted(turn.turn_id, self._clock(), record))
        return record

    def _drop(self, turn: Turn) -> None:
        """The user's turn was abandoned before it ended: nothing of it is kept."""
        turn.drop()
        if self._capture is turn:
            self._capture = None
        self._spawn(turn.utterance.aclose(), f"close-asr-{turn.turn_id}")
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        if self._machine.user is None and not self._replying:  # no user turn, no reply
            self._idle.set()

    # ------------------------------------------------------------ tasks

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
        text = self._cfg.dialogue.filler_text
        if self._cfg.dialogue.filler_after_ms > 0 and text:
            self._spawn(self._phrases.prepare(text), "prepare-filler")

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

    async def wait_evidence(self) -> None:
        """Return once the evidence of every pause being decided has come back (a driver
        that feeds input faster than real time waits here, so that the end-of-turn policy
        decides as if the models answered at once)."""
        for turn in list(self._turns.values()):
            await turn.utterance.evidence_settled()

    def unfinished_tasks(self) -> int:
        return len(self._tasks)

    def sizes(self) -> dict[str, int]:
        """How much the session holds (the soak benchmark watches these stay bounded)."""
        return {
            "input_chunks": self._input.chunks,
            "turns_open": len(self._turns),
            "replies": len(self._replying),
            "tasks": len(self._tasks),
            "echo_reference_chunks": len(self._echo.reference.chunks),
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
                await turn.utterance.aclose()
        while self._tasks:  # close-asr tasks spawned by replies finishing during the gather
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
