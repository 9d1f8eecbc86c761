"""One assistant reply: LLM -> clauses -> TTS -> the listener, pausable and cancellable.

:meth:`Reply.run` owns one :class:`asyncio.TaskGroup` with two tasks joined by a
bounded queue: the producer streams the LLM and cuts clauses
(:class:`tts.chunker.ClauseChunker`), the consumer synthesizes each clause and
hands its audio to the :class:`ReplySpeaker`. Cancelling the task that runs
:meth:`Reply.run` is the barge-in: the LLM stream is closed (vLLM aborts the
request), synthesis stops, and nothing more is sent.

The speaker keeps every sample of the reply, so a *pause* (the first stage of
a barge-in) can flush the listener's buffer at once and a *resume* (the
interruption was only a backchannel) re-sends from exactly where playback
stopped.

Fixed phrases -- the *filler* spoken when the reply's first clause is late, and
the *apology* spoken when a stage fails -- are one mechanism: :class:`Phrases`
synthesizes each text once per session (at the listener's rate) and the reply
plays it through its own speaker, so barge-in pauses, resumes and cancels them
exactly like the reply's own words. They are never part of the reply's text
(:attr:`Reply.text`, :attr:`Reply.clauses`), so they stay out of the history.

:class:`ReplyOptions` say how one reply is given: spoken (the default) or as text only
(no TTS: the LLM's text is the reply, shown at once), and its token limit (a reply
that reaches it stops there; ``llm.max_tokens`` caps every reply). The transport is
told each step: :class:`~voice_pipeline.events.ReplyStarted`, the text as it streams,
each clause before its audio (:class:`~voice_pipeline.events.ClauseSynthesized`), and
:class:`~voice_pipeline.events.ReplyGenerated` once everything is generated and sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llm.base import LLM, ChatMessage, LLMDelta, ToolCall
from tts.base import TTS
from tts.chunker import ClauseChunker
from voice_pipeline import events as ev
from voice_pipeline.audio import resample_int16
from voice_pipeline.config import Config, TTSConfig
from voice_pipeline.engines import Engines
from voice_pipeline.heard import SpokenClause, heard_text
from voice_pipeline.ledger import Mark
from voice_pipeline.records import FailedStage, Span
from voice_pipeline.speculation import HeldAudio, PrefetchedStream
from voice_pipeline.steering import ReplyOptions, ReplyRequest
from voice_pipeline.tools.calls import CallAssembler
from voice_pipeline.transport import Transport

log = logging.getLogger(__name__)

__all__ = ["Phrases", "PrefetchedStream", "Reply", "ReplyOptions", "ReplyRequest", "ReplySpeaker"]

MarkFn = Callable[[Mark, int], None]
#: records a model's compute span on the critical path: (name, start_ns, end_ns)
ComputeFn = Callable[[Span, int, int], None]
SleepUntil = Callable[[int], Awaitable[None]]


def clause_chunker(tts: TTSConfig) -> ClauseChunker:
    """How every reply cuts its text into chunks for TTS (and a speculative reply its first
    chunk, synthesized ahead: the same cut, so the reply finds it)."""
    return ClauseChunker(tts.min_clause_words, first_chunk_words=tts.first_chunk_words)


class Phrases:
    """Fixed phrases synthesized once and kept, at the listener's rate (one per session)."""

    def __init__(self, tts: TTS, output_rate_hz: int) -> None:
        self._tts = tts
        self._rate = output_rate_hz
        self._pcm: dict[str, NDArray[np.int16]] = {}

    def ready(self, text: str) -> bool:
        return text in self._pcm

    async def get(self, text: str) -> NDArray[np.int16]:
        """The phrase's audio; synthesized on first use (in a worker thread)."""
        pcm = self._pcm.get(text)
        if pcm is None:
            raw = await asyncio.to_thread(self._tts.synthesize, text)
            pcm = self._pcm[text] = resample_int16(raw, self._tts.sample_rate_hz, self._rate)
        return pcm

    async def prepare(self, text: str) -> None:
        """Synthesize ``text`` ahead of its first use; a failure is logged, not raised (the
        phrase is tried again when it is needed)."""
        try:
            await self.get(text)
        except Exception:
            log.warning("cannot synthesize %r", text, exc_info=True)


@dataclass(frozen=True, slots=True)
class _Phrase:
    """A fixed phrase queued for the speaker ahead of the reply's clauses."""

    text: str
    pcm: NDArray[np.int16]


class ReplySpeaker:
    """Sends one reply's audio to the transport; pauses (flush) and resumes exactly."""

    def __init__(
        self,
        turn_id: int,
        transport: Transport,
        on_sent: Callable[[NDArray[np.int16]], None],
        on_cleared: Callable[[], None],
        *,
        on_started: Callable[[], None] | None = None,
        played_base: int = 0,
    ) -> None:
        """``on_started``: called when the first audio is added (the reply becomes audible);
        ``played_base``: samples of ``turn_id`` the listener played before this reply (a
        reply dropped when the user continued the turn), not counted as this reply's."""
        self.turn_id = turn_id
        self._transport = transport
        self._on_sent = on_sent
        self._on_cleared = on_cleared
        self._on_started = on_started
        self._played_base = played_base
        self._audio: list[NDArray[np.int16]] = []
        self.total = 0  # samples synthesized
        self.sent = 0  # samples handed to the transport (rewound to what was played on pause)
        self.paused = False
        self._pauses = 0  # pauses so far: a drain that saw one must wait for the re-sent rest
        self._running = asyncio.Event()  # set while not paused
        self._running.set()
        self._shown = False

    @property
    def started(self) -> bool:
        return self.total > 0 or self._shown

    def show(self) -> None:
        """A text-only reply's first text is out: it counts as started (nothing to play)."""
        if not self.started:
            self._shown = True
            if self._on_started is not None:
                self._on_started()

    async def add(self, pcm: NDArray[np.int16]) -> None:
        started = self.started
        self._audio.append(pcm)
        self.total += len(pcm)
        if not started and self.started and self._on_started is not None:
            self._on_started()
        await self._send_pending()

    def played(self) -> int:
        """Samples of this reply the listener has played."""
        return min(max(0, self._transport.played_samples(self.turn_id) - self._played_base), self.total)

    async def _send_pending(self) -> None:
        while not self.paused and self.sent < self.total:
            pcm = self._slice(self.sent, self.total)
            self.sent = self.total
            await self._transport.play(self.turn_id, pcm)
            self._on_sent(pcm)

    def _slice(self, start: int, end: int) -> NDArray[np.int16]:
        whole = np.concatenate(self._audio) if len(self._audio) > 1 else self._audio[0]
        self._audio = [whole]
        return whole[start:end]

    def pause(self) -> int:
        """Stop sending and flush the listener's buffer now; return samples played."""
        self.paused = True
        self._pauses += 1
        self._running.clear()
        self._transport.clear(self.turn_id)
        self._on_cleared()
        played = self.played()
        self.sent = played
        return played

    async def resume(self) -> None:
        self.paused = False
        self._running.set()
        await self._send_pending()

    async def drain(self) -> None:
        """Return once everything is sent and played (waiting through pauses)."""
        while True:
            await self._running.wait()
            await self._send_pending()
            pauses = self._pauses
            await self._transport.drain(self.turn_id)
            if pauses == self._pauses and not self.paused and self.sent >= self.total:
                return


@dataclass(frozen=True, slots=True)
class ReplyDeps:
    """What every reply of a session runs on, and the three settings it reads -- nothing
    else of the :class:`~voice_pipeline.config.Config` or the engines."""

    llm: LLM
    tts: TTS
    transport: Transport
    clock: Callable[[], int]
    sleep_until: SleepUntil
    phrases: Phrases
    max_tokens: int  # llm.max_tokens
    tts_cfg: TTSConfig  # how the reply is cut into chunks
    filler_text: str  # dialogue.filler_text

    @classmethod
    def of(
        cls, engines: Engines, cfg: Config, transport: Transport, clock: Callable[[], int],
        sleep_until: SleepUntil, phrases: Phrases,
    ) -> ReplyDeps:  # fmt: skip
        return cls(
            engines.llm, engines.tts, transport, clock, sleep_until, phrases,
            cfg.llm.max_tokens, cfg.tts, cfg.dialogue.filler_text,
        )  # fmt: skip


class Reply:
    """State and tasks of one assistant reply (owned by the session's turn): ``mark`` and
    ``compute`` record on the turn's ledger (for this reply's epoch only)."""

    def __init__(
        self, turn_id: int, deps: ReplyDeps, speaker: ReplySpeaker, mark: MarkFn, compute: ComputeFn
    ) -> None:
        self.turn_id = turn_id
        self._deps = deps
        self._transport = deps.transport
        self._clock = deps.clock
        self._mark = mark
        self._compute = compute
        self.speaker = speaker
        self._phrases = deps.phrases
        self._sleep_until = deps.sleep_until
        self.text = ""
        self.clauses: list[SpokenClause] = []  # the reply's own words, as spoken
        self.llm_tokens = 0
        self.options = ReplyOptions()
        #: the LLM was stopped at the reply's token limit
        self.token_limit = False
        #: the LLM request's delta that says how the prompt was served (prompt and cached
        #: tokens, prefill ms); the session copies it into the ledger (TurnLedger.llm_request)
        self.llm_first: LLMDelta | None = None
        self.audio_synthesized_s = 0.0
        self.request_id = f"reply-{id(self)}-{turn_id}"
        #: "llm" or "tts" once a stage of this reply has raised
        self.failed_stage: FailedStage | None = None
        #: samples of the filler, which plays before the first clause
        self.filler_samples = 0
        self._clause_queued = False
        self._filler_task: asyncio.Task[None] | None = None
        self._llm_error: Exception | None = None
        self._prefetched: PrefetchedStream | None = None
        #: the function calls the LLM made in this reply (complete once it is generated)
        self.tool_calls: tuple[ToolCall, ...] = ()

    def heard(self, played: int, interrupted: bool) -> str:
        """The reply's own words the listener heard (the filler and apology excluded; all
        the text streamed, for a text-only reply)."""
        if not self.options.speak:
            return self.text.strip()
        if not interrupted:
            return " ".join(c.text for c in self.clauses)
        return heard_text(self.clauses, max(0, played - self.filler_samples))

    async def run(
        self,
        messages: list[ChatMessage],
        prefetched: PrefetchedStream | None = None,
        *,
        filler_at_ns: int | None = None,
        options: ReplyOptions | None = None,
    ) -> None:
        """Speak the reply; with ``filler_at_ns``, the filler first if no clause is ready by then.

        An LLM failure is raised once the clauses it completed have been spoken; a TTS
        failure at once (the LLM request is aborted)."""
        self.options = options = options or self.options
        self._prefetched = prefetched
        clauses: asyncio.Queue[str | _Phrase | None] = asyncio.Queue(maxsize=8)
        self._transport.emit(ev.ReplyStarted(self.turn_id, self._clock()))
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._generate(messages, clauses, prefetched))
                if options.speak:
                    tg.create_task(self._speak(clauses))
                if options.speak and filler_at_ns is not None and self._deps.filler_text:
                    self._filler_task = tg.create_task(self._filler(filler_at_ns, clauses))
            if self._llm_error is not None:
                raise self._llm_error  # after its complete clauses were spoken
            self._transport.emit(
                ev.ReplyGenerated(
                    self.turn_id,
                    self._clock(),
                    self.llm_tokens,
                    self.token_limit,
                    None if self.llm_first is None else self.llm_first.prompt_tokens,
                    None if self.llm_first is None else self.llm_first.cached_tokens,
                )
            )
            await self.speaker.drain()
        except asyncio.CancelledError:
            # the TaskGroup has closed the LLM stream (the request is aborted, if it was still
            # running) and stopped synthesis: from here on neither does any more work
            now = self._clock()
            self._mark(Mark.LLM_ABORTED, now)
            self._mark(Mark.TTS_STOPPED, now)
            raise

    async def say(self, text: str, mark: Mark) -> bool:
        """Speak a fixed phrase after whatever was said, and wait until it is played.
        False if it could not be synthesized (the failure is logged, not raised)."""
        try:
            pcm = await self._phrases.get(text)
        except Exception:
            log.warning("turn %d: cannot synthesize %r", self.turn_id, text, exc_info=True)
            return False
        if pcm.size:
            self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), "", len(pcm)))
            await self.speaker.add(pcm)
            self._mark(mark, self._clock())
            await self.speaker.drain()
        return True

    def _first_clause_queued(self) -> None:
        if not self._clause_queued:
            self._clause_queued = True
            if self._filler_task is not None and not self._filler_task.done():
                self._filler_task.cancel()  # not needed any more (if not queued already)

    async def _filler(self, at_ns: int, out: asyncio.Queue[str | _Phrase | None]) -> None:
        await self._sleep_until(at_ns)
        if self._clause_queued:
            return
        text = self._deps.filler_text
        try:
            pcm = await self._phrases.get(text)
        except Exception:
            log.warning("turn %d: cannot synthesize the filler", self.turn_id, exc_info=True)
            return
        if not self._clause_queued:  # the queue is empty: the filler goes first
            out.put_nowait(_Phrase(text, pcm))

    async def _generate(
        self,
        messages: list[ChatMessage],
        out: asyncio.Queue[str | _Phrase | None],
        prefetched: PrefetchedStream | None,
    ) -> None:
        chunker = clause_chunker(self._deps.tts_cfg)
        cap = self._deps.max_tokens
        limit = cap if self.options.max_tokens is None else min(cap, self.options.max_tokens)
        speak = self.options.speak
        if prefetched is not None:
            stream = prefetched.stream()  # its owner aborts the request
            llm_start = prefetched.started_ns or self._clock()
        elif self.options.tools is not None:
            stream = self._deps.llm.stream(messages, self.request_id, self.options.tools)
            llm_start = self._clock()
        else:
            stream = self._deps.llm.stream(messages, self.request_id)
            llm_start = self._clock()
        calls = CallAssembler()
        try:
            async with contextlib.aclosing(stream):  # closing aborts the engine's request
                async for delta in stream:
                    if delta.prompt_tokens is not None:
                        self.llm_first = delta  # the latest says most (see LLMDelta)
                    if not (delta.text or delta.num_tokens or delta.tool_calls):
                        continue  # figures only
                    self._mark(Mark.LLM_FIRST_TOKEN, self._clock())
                    self.llm_tokens += delta.num_tokens
                    if self.llm_tokens >= limit:
                        self.token_limit = True  # stops here: closing the stream aborts the request
                    for p in map(calls.push, delta.tool_calls):
                        self._transport.emit(
                            ev.ToolCallStreamed(
                                self.turn_id, self._clock(), p.index, p.call_id, p.name, p.arguments_delta
                            )
                        )
                    if delta.text:
                        self.text += delta.text
                        self._transport.emit(
                            ev.AssistantTextStreamed(self.turn_id, self._clock(), delta.text)
                        )
                        if not speak:
                            self.speaker.show()
                    for clause in chunker.push(delta.text) if speak else ():
                        self._compute(Span.LLM, llm_start, self._clock())  # the first one counts
                        self._mark(Mark.FIRST_CLAUSE, self._clock())
                        self._first_clause_queued()
                        await out.put(clause)
                    if self.token_limit:
                        break
        except Exception as exc:
            # the clauses already queued are still spoken; run() raises this afterwards
            self.failed_stage = self.failed_stage or FailedStage.LLM
            self._llm_error = exc
            self._first_clause_queued()  # no filler after a failure (the apology follows)
            await out.put(None)
            return
        self._mark(Mark.LLM_DONE, self._clock())
        self.tool_calls = calls.calls()
        for index, call in enumerate(self.tool_calls):
            self._transport.emit(
                ev.ToolCallDone(self.turn_id, self._clock(), index, call.call_id, call.name, call.arguments)
            )
        for clause in chunker.flush() if speak else ():
            self._compute(Span.LLM, llm_start, self._clock())
            self._mark(Mark.FIRST_CLAUSE, self._clock())
            self._first_clause_queued()
            await out.put(clause)
        self._first_clause_queued()  # an empty reply: no filler any more either
        await out.put(None)

    async def _held(self, clause: str) -> HeldAudio | None:
        """The held audio of the first clause, if this reply was released from a speculative
        one that synthesized exactly this clause ahead."""
        prefetched = self._prefetched
        if prefetched is None or self.clauses:
            return None
        held = await prefetched.held_audio(clause)
        return held if held is not None and held.sample_rate_hz == self._deps.tts.sample_rate_hz else None

    def _synthesize(self, text: str) -> tuple[NDArray[np.int16], int, int]:
        """Piper on one clause, in a worker thread, stamped there (its compute span)."""
        start = self._clock()
        pcm = self._deps.tts.synthesize(text)
        return pcm, start, self._clock()

    async def _speak(self, clauses: asyncio.Queue[str | _Phrase | None]) -> None:
        tts = self._deps.tts
        out_rate = self._transport.output_rate_hz
        while (clause := await clauses.get()) is not None:
            if isinstance(clause, _Phrase):
                self.filler_samples += len(clause.pcm)
                self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), "", len(clause.pcm)))
                await self.speaker.add(clause.pcm)
                self._mark(Mark.FILLER_SENT, self._clock())
                continue
            held = await self._held(clause)
            if held is not None:  # a speculative reply's first chunk, synthesized before the endpoint
                pcm, synth_start, synth_end = held.pcm, held.start_ns, held.end_ns
                self._mark(Mark.AUDIO_HELD, synth_end)
            else:
                try:
                    pcm, synth_start, synth_end = await asyncio.to_thread(self._synthesize, clause)
                except Exception:
                    self.failed_stage = self.failed_stage or FailedStage.TTS
                    raise
            if pcm.size == 0:
                continue
            self._compute(Span.TTS, synth_start, synth_end)  # the first clause's counts
            self._mark(Mark.TTS_FIRST_AUDIO, self._clock())
            pcm = resample_int16(pcm, tts.sample_rate_hz, out_rate)
            self.audio_synthesized_s += len(pcm) / out_rate
            self.clauses.append(SpokenClause(clause, len(pcm)))
            self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), clause, len(pcm)))
            await self.speaker.add(pcm)
            if not self.speaker.paused:
                self._mark(Mark.FIRST_AUDIO_SENT, self._clock())
        self._mark(Mark.LAST_AUDIO_SENT, self._clock())
