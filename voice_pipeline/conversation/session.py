"""One conversation: the asyncio graph that wires VAD -> ASR -> LLM -> TTS.

Every decision is pure and lives elsewhere. Who has the floor, and what happens to
each turn and its reply, is :class:`voice_pipeline.turntaking.machine.TurnMachine` (it owns the
endpointer, the semantic end-of-turn policy and the barge-in tracker); what the LLM
sees is :class:`voice_pipeline.conversation.history.History`; the echo check, the ASR commit
policy, clause chunking and the ledger are pure too. This module routes input to
them, carries out the machine's commands (on :class:`voice_pipeline.conversation.turn.Turn`,
kept in :class:`~voice_pipeline.conversation.open_turns.OpenTurns` until it is over), and
owns the tasks, queues and clocks.

Ownership:

* The transport calls :meth:`Session.push_audio` for every input chunk; the
  :class:`~voice_pipeline.conversation.listening.Listener` (VAD, the echo check) and the
  machine's frame step run inline there (well under a millisecond per frame), so input
  backpressure is the transport's own await.
* Every task is spawned through the session's :class:`~voice_pipeline.conversation.tasks.SessionTasks`
  and has its turn as owner: the partial transcripts, the evidence of each pause and the LLM
  prefetch (:mod:`voice_pipeline.conversation.utterance`), and one reply task per turn running
  :meth:`voice_pipeline.conversation.reply.Reply.run` (one TaskGroup: LLM -> clauses -> TTS ->
  listener). Barge-in is a direct ``cancel()`` of that task -- never a message racing the
  data -- which aborts the vLLM request, stops synthesis and tells the transport to flush. So
  is a continuation: the same turn is heard on and answered anew (the cancelled reply's epoch
  is over: it records nothing more).
* :meth:`Session.aclose` cancels and awaits every task it owns; it is idempotent.

A client may steer more than the config (a realtime session), all typed and decided
by the machine: :meth:`Session.configure`, :meth:`Session.commit`, :meth:`Session.clear_input`,
:meth:`Session.respond` (a reply on demand) and :meth:`Session.cancel`. What the LLM
sees comes from the session's :class:`~voice_pipeline.conversation.history.Context`.

Failures: an exception from ASR, LLM or TTS ends that turn only: ``TurnFailed``, then ``dialogue.apology``
spoken like a reply (barge-in works on it), then ``TurnCompleted`` with ``record.failed`` set; what enters
the history is :mod:`voice_pipeline.conversation.history`'s rule. A failing turn model only loses its vote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable

import numpy as np
from numpy.typing import NDArray

from llm.base import ChatMessage
from llm.prefill import PrefillPlanner
from vad.end_of_turn import EndOfTurnPolicy
from voice_pipeline import events as ev
from voice_pipeline.clock import now_ns
from voice_pipeline.clock import sleep_until as clock_sleep_until
from voice_pipeline.config import BargeInConfig, Config, TurnConfig, VADConfig
from voice_pipeline.conversation import wiring
from voice_pipeline.conversation.history import Context, History
from voice_pipeline.conversation.listening import Listener
from voice_pipeline.conversation.open_turns import OpenTurns
from voice_pipeline.conversation.phrases import Phrases
from voice_pipeline.conversation.reply import ReplyOptions, ReplyRequest
from voice_pipeline.conversation.tasks import SessionTasks
from voice_pipeline.conversation.turn import Turn
from voice_pipeline.conversation.turn_context import TurnContext
from voice_pipeline.conversation.warmer import PrefixWarmer
from voice_pipeline.engines import Engines
from voice_pipeline.errors import ClosedError
from voice_pipeline.ledger.aggregate import SessionLedger
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.tools.runner import ToolBox
from voice_pipeline.transport import Transport
from voice_pipeline.turntaking import messages as te
from voice_pipeline.turntaking.ending import end_of_turn_policy
from voice_pipeline.turntaking.machine import TurnMachine


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
        self._cfg, self._transport, self._clock = cfg, transport, clock
        self.rate_hz = cfg.audio.pipeline_rate_hz
        self._tasks = SessionTasks()
        spawn = self._tasks.spawn
        self._listener = Listener(engines.vad, cfg.barge_in, self.rate_hz, clock)
        self._input, self._echo = self._listener.input, self._listener.echo
        self._phrases = Phrases(engines.tts, transport.output_rate_hz)
        self._phrases_prepared = False
        self._has_turn_model = engines.turn is not None
        self._machine = TurnMachine(
            cfg.vad,
            cfg.turn,
            cfg.barge_in,
            sample_rate_hz=self.rate_hz,
            frame_samples=engines.vad.frame_samples,
            time_of=self._input.time_of,
            policy=self._policy(cfg),
            prefetch=cfg.dialogue.speculative_start and not cfg.dialogue.tools,  # README "Tools"
        )
        self._turns = OpenTurns(self._machine)
        self._history = History(cfg.dialogue.system_prompt, cfg.dialogue.history_max_tokens)
        self._context: Context = context or self._history
        tools = None if context is not None else ToolBox.of(cfg.dialogue, spawn, self._history.resolve)
        sleep = sleep_until or functools.partial(clock_sleep_until, clock=clock)
        self._ctx = TurnContext(
            wiring.utterance_engines(engines),
            wiring.turn_settings(cfg, engines),
            wiring.reply_deps(engines, cfg, transport, clock, sleep, self._phrases, tools),
            transport,
            clock,
            sleep,
            self._echo,
            self._input.time_of,
            spawn,
            on_evidence=lambda found: self._execute(self._machine.evidence(found)),
            on_audible=self._reply_audible,
            on_committed=self._warm,
        )
        self.ledger = SessionLedger(cfg.budget)
        planner = PrefillPlanner(block_tokens=wiring.kv_block_tokens(engines, cfg), tag=f"{id(self):x}")
        warm = cfg.dialogue.prefill_ahead
        self._warmer = PrefixWarmer(engines.llm, planner, spawn, self._context.prefix, enabled=warm)
        self._reply_options = ReplyOptions()
        self._requests: dict[int, ReplyRequest] = {}  # asked for, until their turn begins
        self._closed = False

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
        samples = self._listener.record(samples, self._clock() if t_ns is None else t_ns)
        capture = self._turns.capture
        if capture is not None:
            capture.utterance.append(samples)
        for f in self._listener.frames(samples, self._cfg.vad.neg_threshold):
            now = self._clock()
            self._execute(
                self._machine.frame(f.prob, frame_start_ns=f.start_ns, now_ns=now, is_echo=f.is_echo)
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
        """New turn-taking settings for the frames and turns to come; ``reply``: how automatic replies
        are given. Changing ``options.detection`` drops the user's turn in progress (the machine's rule)."""
        self._cfg = cfg = dataclasses.replace(self._cfg, vad=vad, turn=turn, barge_in=barge_in)
        hold = cfg.dialogue.speculative_audio and reply.speak  # a text-only reply holds no audio either
        settings = self._ctx.settings.configured(vad, turn, hold_first_chunk=hold)
        self._ctx = dataclasses.replace(self._ctx, settings=settings)
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
        self._requests[turn_id := cmds[0].turn_id] = request
        self._execute(cmds)
        return turn_id

    def cancel(self, turn_id: int) -> None:
        """The client cancelled the reply of ``turn_id`` (if it is still in progress)."""
        self._execute(self._machine.cancel(turn_id))

    def _policy(self, cfg: Config) -> EndOfTurnPolicy | None:
        return end_of_turn_policy(cfg.vad, cfg.turn, uses_model=self._has_turn_model)

    # ------------------------------------------------------------ carrying out commands

    def _execute(self, cmds: list[te.Command]) -> None:
        turns = self._turns
        for cmd in cmds:
            match cmd:
                case te.BeginTurn(turn_id=tid, onset_sample=onset, start_sample=start):
                    turn = self._new_turn(tid)
                    turn.begin(self._input.time_of(onset), start, self._input.since(start))
                    self._warm()
                case te.BeginReply(turn_id=tid):
                    self._new_turn(tid).ask(self._requests.pop(tid))
                case te.DropTurn(turn_id=tid):
                    self._drop(turns[tid])
                case te.ContinueTurn(turn_id=tid):
                    turns[tid].continue_()
                case te.Speculate(turn_id=tid, speech_end_sample=end):
                    turns[tid].utterance.speculate(end)
                case te.StopSpeculating(turn_id=tid):
                    turns[tid].utterance.stop_speculating()
                case te.Prefetch(turn_id=tid) if self._reply_options.tools is None:  # it has no tools
                    self._warmer.llm_starting()
                    turns[tid].prefetch(self._context, str(id(self)))
                case te.EndTurn(turn_id=tid, end=end):
                    speech_end = self._input.time_of(self._listener.acoustic_end(end.speech_end_sample))
                    turns[tid].end(end, speech_end)
                case te.StartReply(turn_id=tid):
                    self._warmer.llm_starting()
                    self._start_reply(turns[tid])
                case te.PauseReply(turn_id=tid, onset_ns=onset):
                    turns[tid].pause_reply(onset)
                case te.HoldReply(turn_id=tid, held=held, until_ns=until):
                    turns[tid].hold_reply(held)
                    if until is not None:  # the input may stop: no frame would end the hold then
                        self._tasks.spawn(self._tick_at(until), f"hold-{tid}")
                case te.ResumeReply(turn_id=tid, kind=kind):
                    turns[tid].resume_reply(kind)
                case te.CancelReply(turn_id=tid, reason=reason, barge_in=barge_in):
                    turns[tid].cancel_reply(reason, barge_in=barge_in)
                case te.Answer() | te.Keep() | te.Dismiss() | te.Seal():
                    pass  # a verdict is read by the reply task that asked (see _answer); a
                    # sealed turn's utterance gets no more input (OpenTurns.capture asks the machine)
        turns.settle()

    async def _tick_at(self, t_ns: int) -> None:  # the machine is told the time came, input or not
        await self._ctx.sleep_until(t_ns)
        self._execute(self._machine.tick(self._clock()))

    def _new_turn(self, turn_id: int) -> Turn:
        phase = functools.partial(self._machine.phase, turn_id)  # the turn's state: the machine's
        turn = Turn(turn_id, self.ledger.new_turn(turn_id), self._ctx, phase=phase)
        self._turns.add(turn)
        return turn

    def _warm(self, committed: str = "") -> None:
        """Keep the next request's start (system prompt, history, committed words) in the prefix cache."""
        self._warmer.warm(committed, idle=self._turns.llm_idle)

    # ------------------------------------------------------------ the reply

    def _start_reply(self, turn: Turn) -> None:
        epoch = turn.epoch
        turn.reply_task = self._tasks.spawn(self._reply_turn(turn, epoch), f"reply-{turn.turn_id}")
        turn.reply_task.add_done_callback(functools.partial(self._reply_done, turn, epoch))

    async def _reply_turn(self, turn: Turn, epoch: int) -> None:
        try:
            try:
                await self._answer(turn)
            except* Exception as group:
                turn.fail(group)
            if turn.failed is not None and self._cfg.dialogue.apology and turn.spoken(self._reply_options):
                await turn.apologize(self._cfg.dialogue.apology)
        finally:
            if epoch == turn.epoch:  # else the user continued the turn: it is not over
                turn.utterance.drop_prefetch()
                self._finish(turn)

    def _reply_done(self, turn: Turn, epoch: int, _task: asyncio.Task[None]) -> None:
        if not turn.done and epoch == turn.epoch:  # cancelled before its first step
            self._finish(turn)

    async def _answer(self, turn: Turn) -> None:
        if turn.request is not None:  # asked for directly (words it reads may be to come)
            return await turn.answer_request(turn.request)
        turn.transcribed(await turn.final_transcript())
        transcribed = self._machine.transcribed(turn.turn_id, turn.user_text, self._turns.said_over(turn))
        self._execute(list(transcribed.commands))
        verdict = transcribed.verdict
        if isinstance(verdict, te.Answer | te.Dismiss) and verdict.interruption is not None:
            turn.ledger.interruption = verdict.interruption
        if isinstance(verdict, te.Dismiss) and not (verdict.interruption or turn.user_text):  # heard nothing
            while self._machine.capturing == turn.turn_id:  # until sealed: a new turn, or the gap's end
                await self._tick_at(self._clock() + self._cfg.audio.frame_ms * 1_000_000)
        # what was heard of earlier replies cut by the user (or their unheard words) enters the history first
        ending = self._turns.winding_down_before(turn.turn_id)
        if ending:
            await asyncio.wait(ending)
        if not isinstance(verdict, te.Answer):
            return  # no words, a backchannel, echo or noise over a reply, "Stop!", or kept: no reply
        await turn.answer(self._context, self._reply_options)

    def _reply_audible(self, turn_id: int, epoch: int) -> None:
        turn = self._turns.get(turn_id)
        if turn is not None and epoch == turn.epoch:
            self._execute(self._machine.reply_audible(turn_id, self._clock()))

    def _finish(self, turn: Turn) -> TurnRecord:
        record = turn.finish(self._context)
        self.ledger.add(record)
        self._execute(self._machine.reply_finished(turn.turn_id, self._clock()))  # the machine forgets it
        if record.assistant_text and not record.interrupted and turn.failed is None:
            self._warmer.served()  # the reply's own generation cached it
        self._warm()
        self._turns.remove(turn.turn_id)
        self._tasks.spawn(turn.utterance.aclose(), f"close-asr-{turn.turn_id}")
        self._transport.emit(ev.TurnCompleted(turn.turn_id, self._clock(), record))
        return record

    def _drop(self, turn: Turn) -> None:
        """The user's turn was abandoned before it ended: nothing of it is kept."""
        self._turns.remove(turn.turn_id)
        turn.drop()
        self._tasks.spawn(turn.utterance.aclose(), f"close-asr-{turn.turn_id}")

    def _prepare_phrases(self) -> None:
        """Synthesize the filler ahead, so it costs nothing when needed (the apology: when first needed)."""
        self._phrases_prepared = True
        text = self._cfg.dialogue.filler_text
        if self._cfg.dialogue.filler_after_ms > 0 and text:
            self._tasks.spawn(self._phrases.prepare(text), "prepare-filler")

    # ------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        """A user turn or a reply is in progress."""
        return self._turns.busy

    async def wait_idle(self) -> None:
        await self._turns.wait_idle()

    async def wait_idle_reply(self) -> None:
        """Return once no reply is in progress."""
        await self._turns.wait_no_reply()

    async def wait_evidence(self) -> None:
        """Return once the evidence of every pause being decided is back (a driver feeding input
        faster than real time waits here: the end-of-turn policy decides as if the models were instant)."""
        for turn in self._turns:
            await turn.utterance.evidence_settled()

    def unfinished_tasks(self) -> int:
        return len(self._tasks)

    def sizes(self) -> dict[str, int]:
        """How much the session holds (the soak benchmark watches these stay bounded)."""
        return {
            "input_chunks": self._input.chunks,
            "turns_open": len(self._turns),
            "replies": self._turns.replies,
            "tasks": len(self._tasks),
            "echo_reference_chunks": len(self._echo.reference.chunks),
            "history_messages": len(self._history.messages),
        }

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._tasks.cancel_all()
        for turn in self._turns:
            if not turn.done:
                await turn.utterance.aclose()
        await self._tasks.drain()  # close-asr tasks spawned by replies finishing meanwhile
