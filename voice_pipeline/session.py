"""One conversation: the asyncio graph that wires VAD -> ASR -> LLM -> TTS.

Decisions live elsewhere and are pure (``vad.endpointer``, ``voice_pipeline.turns``,
``asr.local_agreement``, ``tts.chunker``, ``voice_pipeline.ledger``); this module
owns the tasks, queues and clocks and carries the decisions out.

Ownership:

* The transport calls :meth:`Session.push_audio` for every input chunk; VAD and
  endpointing run inline there (tens of microseconds per frame), so input
  backpressure is the transport's own await.
* Each user turn owns a partial-transcript task; each assistant reply owns one
  task whose :class:`asyncio.TaskGroup` holds the LLM->clauses producer and the
  clauses->TTS->transport consumer, joined by a bounded queue. Barge-in is a
  direct ``cancel()`` of that task -- never a message racing the data -- which
  aborts the vLLM request (the stream's ``finally``), stops synthesis and tells
  the transport to flush.
* :meth:`Session.aclose` cancels and awaits every task it owns; it is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from asr.streaming import UtteranceTranscriber
from llm.base import ChatMessage
from tts.chunker import ClauseChunker
from vad.endpointer import EndOfTurn, Endpointer, PauseStarted, SpeechResumed, SpeechStarted
from voice_pipeline import events as ev
from voice_pipeline.audio import last_sound_end, resample_int16
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError, VoicePipelineError
from voice_pipeline.heard import SpokenClause, heard_text
from voice_pipeline.ledger import BudgetBreach, Mark, SessionLedger, TurnLedger, TurnRecord
from voice_pipeline.transport import Transport
from voice_pipeline.turns import BeginUserTurn, CancelReply, Command, StartReply, TurnTaker

log = logging.getLogger(__name__)

#: how much recent input is kept for pre-roll and sample->time lookups
_HISTORY_S = 4.0
#: how far before the VAD's end of speech to look for the acoustic end
_END_SEARCH_S = 0.3


@dataclass(slots=True)
class _Turn:
    """Mutable state of one turn, owned by the session."""

    turn_id: int
    ledger: TurnLedger
    transcriber: UtteranceTranscriber
    partial_task: asyncio.Task[None] | None = None
    reply_task: asyncio.Task[None] | None = None
    user_text: str = ""
    reply_text: str = ""
    clauses: list[SpokenClause] = field(default_factory=list)
    paused: bool = False  # the VAD hears a pause inside the user's turn
    interrupted: bool = False
    done: bool = False


class Session:
    def __init__(
        self,
        engines: Engines,
        cfg: Config,
        transport: Transport,
        *,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        self._engines = engines
        self._cfg = cfg
        self._transport = transport
        self._clock = clock
        self.rate_hz = cfg.audio.pipeline_rate_hz
        self._vad = engines.vad.stream()
        self._endpointer = Endpointer(cfg.vad, self.rate_hz, engines.vad.frame_samples)
        self._turns = TurnTaker()
        self.ledger = SessionLedger(cfg.budget)
        self.history: list[ChatMessage] = []
        self._by_id: dict[int, _Turn] = {}
        self._user: _Turn | None = None
        self._reply: _Turn | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # recent input: chunks with their end position and arrival time
        self._recent: deque[tuple[int, int, NDArray[np.float32]]] = deque()
        self._position = 0
        self._closed = False
        self._idle = asyncio.Event()  # no user turn and no reply in progress
        self._idle.set()
        self._no_reply = asyncio.Event()  # no reply in progress
        self._no_reply.set()

    # ------------------------------------------------------------ input side

    async def push_audio(self, samples: NDArray[np.float32], t_ns: int | None = None) -> None:
        """Feed mono float32 input at ``rate_hz``; ``t_ns`` = when its last sample was captured."""
        if self._closed:
            raise VoicePipelineError("session is closed")
        arrived = self._clock() if t_ns is None else t_ns
        self._position += len(samples)
        self._remember(samples, arrived)
        if self._user is not None:
            self._user.transcriber.append(samples)
        for prob in self._vad.push(samples):
            for action in self._endpointer.update(prob):
                match action:
                    case SpeechStarted():
                        self._run(self._turns.speech_started(), action)
                    case PauseStarted():
                        if self._user is not None:
                            self._user.paused = True
                            if self._cfg.asr.speculative_final:
                                self._user.transcriber.speculate()
                    case SpeechResumed():
                        if self._user is not None:
                            self._user.paused = False
                            self._user.transcriber.invalidate()
                    case EndOfTurn():
                        self._end_user_turn(action)
                        self._run(self._turns.end_of_turn(), action)

    def _remember(self, samples: NDArray[np.float32], t_ns: int) -> None:
        self._recent.append((self._position, t_ns, samples))
        keep = int(_HISTORY_S * self.rate_hz)
        while self._recent and self._recent[0][0] < self._position - keep:
            self._recent.popleft()

    def time_of_sample(self, sample: int) -> int:
        """Monotonic time at which input sample ``sample`` was captured (interpolated)."""
        previous: int | None = None
        for end, t_ns, _ in self._recent:
            if end >= sample:
                t = t_ns - round((end - sample) * 1e9 / self.rate_hz)
                # never before the previous chunk arrived (fast feeding has no real gaps)
                return t if previous is None else max(t, previous)
            previous = t_ns
        if self._recent:
            end, t_ns, _ = self._recent[-1]
            return t_ns - round((end - sample) * 1e9 / self.rate_hz)
        return self._clock()

    def _audio_since(self, sample: int) -> NDArray[np.float32]:
        parts = []
        for end, _, chunk in self._recent:
            start = end - len(chunk)
            if end <= sample:
                continue
            parts.append(chunk[max(0, sample - start) :])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    # ------------------------------------------------------------ commands

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
                    self._idle.clear()
                    self._no_reply.clear()
                    self._reply = turn
                    turn.reply_task = self._spawn(self._reply_turn(turn), f"reply-{tid}")
                    turn.reply_task.add_done_callback(functools.partial(self._reply_done, turn))

    def _begin_user_turn(self, turn_id: int, started: SpeechStarted) -> None:
        transcriber = UtteranceTranscriber(self._engines.asr, self._cfg.asr)
        turn = _Turn(turn_id, self.ledger.new_turn(turn_id), transcriber)
        self._by_id[turn_id] = turn
        self._user = turn
        self._idle.clear()
        self._mark(turn, Mark.SPEECH_START, self.time_of_sample(started.onset_sample))
        transcriber.start(self._audio_since(started.start_sample))
        self._transport.emit(ev.SpeechStarted(turn_id, self._clock()))
        if self._cfg.asr.partial_interval_ms > 0:
            turn.partial_task = self._spawn(self._partials(turn), f"partials-{turn_id}")

    def _end_user_turn(self, end: EndOfTurn) -> None:
        turn = self._user
        if turn is None:
            return
        self._user = None
        if turn.partial_task is not None:
            turn.partial_task.cancel()
        speech_end = self.time_of_sample(self._acoustic_end(end.speech_end_sample))
        self._mark(turn, Mark.SPEECH_END, speech_end)
        decided = self._clock()
        self._mark(turn, Mark.ENDPOINT, decided)
        self._transport.emit(ev.EndpointDetected(turn.turn_id, decided, speech_end))

    def _acoustic_end(self, vad_end: int) -> int:
        """The VAD's last voiced frame ends 40-100 ms after the sound does (model
        hangover); look at the level of the audio before it for the true end."""
        window = int(_END_SEARCH_S * self.rate_hz)
        start = max(0, vad_end - window)
        audio = self._audio_since(start)[: vad_end - start]
        end = last_sound_end(audio, self.rate_hz)
        return vad_end if end is None else min(vad_end, start + end)

    def _cancel_reply(self, turn_id: int, reason: str) -> None:
        turn = self._by_id.get(turn_id)
        if turn is None or turn.done or turn.reply_task is None:
            return
        turn.interrupted = True
        self._transport.clear(turn_id)
        self._transport.emit(ev.ReplyInterrupted(turn_id, self._clock(), reason))
        turn.reply_task.cancel()

    # ------------------------------------------------------------ tasks

    def _spawn(self, coro: object, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
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
            if turn.paused:
                continue  # the speculative final decode has the CPU
            partial = await turn.transcriber.partial()
            if partial is not None:
                self._transport.emit(
                    ev.TranscriptPartial(turn.turn_id, self._clock(), partial.committed, partial.tentative)
                )

    async def _reply_turn(self, turn: _Turn) -> None:
        try:
            final = await turn.transcriber.final()
            turn.ledger.asr_decode_ms = final.decode_ms
            turn.ledger.asr_speculative = final.speculative
            self._mark(turn, Mark.TRANSCRIPT_FINAL, self._clock())
            turn.user_text = final.text.strip()
            self._transport.emit(ev.TranscriptFinalized(turn.turn_id, self._clock(), turn.user_text))
            if not turn.user_text:
                return  # noise, a cough: no words, no reply
            messages = [
                ChatMessage("system", self._cfg.llm.system_prompt),
                *self.history,
                ChatMessage("user", turn.user_text),
            ]
            clauses: asyncio.Queue[str | None] = asyncio.Queue(maxsize=8)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._generate(turn, messages, clauses))
                tg.create_task(self._speak(turn, clauses))
            await self._transport.drain(turn.turn_id)
        except* EngineError as group:
            for exc in group.exceptions:
                assert isinstance(exc, EngineError)
                log.warning("turn %d failed: %s", turn.turn_id, exc)
                self._transport.emit(
                    ev.TurnFailed(turn.turn_id, self._clock(), "reply", str(exc), exc.retryable)
                )
        finally:
            self._finish(turn)

    async def _generate(
        self, turn: _Turn, messages: list[ChatMessage], out: asyncio.Queue[str | None]
    ) -> None:
        chunker = ClauseChunker(self._cfg.tts.min_clause_words)
        stream = self._engines.llm.stream(messages, f"turn-{id(self)}-{turn.turn_id}")
        async with contextlib.aclosing(stream):  # closing aborts the engine's request
            async for delta in stream:
                self._mark(turn, Mark.LLM_FIRST_TOKEN, self._clock())
                turn.ledger.llm_tokens += delta.num_tokens
                turn.reply_text += delta.text
                self._transport.emit(ev.AssistantTextStreamed(turn.turn_id, self._clock(), delta.text))
                for clause in chunker.push(delta.text):
                    self._mark(turn, Mark.FIRST_CLAUSE, self._clock())
                    await out.put(clause)
        self._mark(turn, Mark.LLM_DONE, self._clock())
        for clause in chunker.flush():
            self._mark(turn, Mark.FIRST_CLAUSE, self._clock())
            await out.put(clause)
        await out.put(None)

    async def _speak(self, turn: _Turn, clauses: asyncio.Queue[str | None]) -> None:
        tts = self._engines.tts
        out_rate = self._transport.output_rate_hz
        while (clause := await clauses.get()) is not None:
            pcm = await asyncio.to_thread(tts.synthesize, clause)
            if pcm.size == 0:
                continue
            self._mark(turn, Mark.TTS_FIRST_AUDIO, self._clock())
            pcm = resample_int16(pcm, tts.sample_rate_hz, out_rate)
            turn.ledger.audio_synthesized_s += len(pcm) / out_rate
            turn.clauses.append(SpokenClause(clause, len(pcm)))
            await self._transport.play(turn.turn_id, pcm)
            self._mark(turn, Mark.FIRST_AUDIO_SENT, self._clock())
        self._mark(turn, Mark.LAST_AUDIO_SENT, self._clock())

    # ------------------------------------------------------------ bookkeeping

    def _mark(self, turn: _Turn, mark: Mark, t_ns: int) -> None:
        for breach in turn.ledger.mark(mark, t_ns):
            self._emit_breach(turn.turn_id, breach)

    def _emit_breach(self, turn_id: int, b: BudgetBreach) -> None:
        self._transport.emit(ev.BudgetExceeded(turn_id, self._clock(), b.stage, b.duration_ms, b.budget_ms))

    def _finish(self, turn: _Turn) -> TurnRecord:
        turn.done = True
        self._mark(turn, Mark.TURN_END, self._clock())
        played = self._transport.played_samples(turn.turn_id)
        heard = (
            heard_text(turn.clauses, played) if turn.interrupted else " ".join(c.text for c in turn.clauses)
        )
        record = turn.ledger.finish(
            user_text=turn.user_text,
            assistant_text=turn.reply_text.strip(),
            heard_text=heard,
            interrupted=turn.interrupted,
            audio_heard_s=played / self._transport.output_rate_hz,
        )
        self.ledger.add(record)
        if turn.user_text:
            self.history.append(ChatMessage("user", turn.user_text))
            if heard:
                self.history.append(ChatMessage("assistant", heard + ("..." if turn.interrupted else "")))
        self._turns.reply_finished(turn.turn_id)
        if self._reply is turn:
            self._reply = None
            self._no_reply.set()
        self._by_id.pop(turn.turn_id, None)
        self._spawn(turn.transcriber.aclose(), f"close-asr-{turn.turn_id}")
        if self._user is None and self._reply is None:
            self._idle.set()
        self._transport.emit(ev.TurnCompleted(turn.turn_id, self._clock(), record))
        return record

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
