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

Fixed phrases -- the filler when the first clause is late, the tool filler, the
apology (:mod:`~voice_pipeline.conversation.phrases`) -- play through the reply's own
speaker, so barge-in treats them like its words; they stay out of its text.

:class:`ReplyOptions` say how one reply is given: spoken (the default) or as text only (no TTS: the
LLM's text is the reply, shown at once), and its token limit (a reply that reaches it stops there,
at its last whole clause; ``llm.max_tokens`` caps every reply -- with server-side tools, each of its
LLM requests). A reply that repeats itself stops (:mod:`~voice_pipeline.conversation.repetition`): a
spoken one before the repeat is said, a text-only one (shown as it streams) at the clause that shows
it. The transport is told each step: :class:`~voice_pipeline.events.ReplyStarted`, the text as it
streams, each clause before its audio (:class:`~voice_pipeline.events.ClauseSynthesized`), and
:class:`~voice_pipeline.events.ReplyGenerated` once everything is generated and sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from llm.base import ChatMessage, LLMDelta, ToolCall, ToolOffer
from tts.chunker import ClauseChunker
from voice_pipeline import events as ev
from voice_pipeline.audio import resample_int16
from voice_pipeline.conversation.clause_audio import ClauseAudio, ReplyDeps, synthesize_clause
from voice_pipeline.conversation.early_chunk import EarlyChunk
from voice_pipeline.conversation.heard import SpokenClause, heard_text
from voice_pipeline.conversation.phrases import QueuedPhrase
from voice_pipeline.conversation.repetition import RepetitionGuard
from voice_pipeline.conversation.speaker import ReplySpeaker
from voice_pipeline.conversation.speculation import PrefetchedStream
from voice_pipeline.conversation.steering import ReplyOptions, ReplyRequest
from voice_pipeline.errors import EngineError
from voice_pipeline.ledger.ledger import Mark
from voice_pipeline.ledger.records import FailedStage, Span
from voice_pipeline.tools.calls import CallAssembler
from voice_pipeline.tools.loop import ToolRound, another_round, exchange, next_offer, repeats
from voice_pipeline.tools.runner import RoundRunner, ToolBox

__all__ = ["PrefetchedStream", "Reply", "ReplyDeps", "ReplyOptions", "ReplyRequest", "ReplySpeaker"]

T = TypeVar("T")

MarkFn = Callable[[Mark, int], None]
#: records a model's compute span on the critical path: (name, start_ns, end_ns)
ComputeFn = Callable[[Span, int, int], None]
#: what the reply's generating side hands its speaking side: a clause to synthesize, a
#: fixed phrase to play, or None (the end)
ClauseQueue = asyncio.Queue[str | QueuedPhrase | None]


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
        self.repeats = RepetitionGuard(deps.repeat_stop_words)  # stopped: it began to repeat itself
        #: the LLM request's delta that says how the prompt was served (prompt and cached
        #: tokens, prefill ms); the session copies it into the ledger (TurnLedger.llm_request)
        self.llm_first: LLMDelta | None = None
        self.audio_synthesized_s = 0.0
        self._clauses_cut = 0  # the reply's own clauses cut from the LLM's text so far
        self.request_id = f"reply-{id(self)}-{turn_id}"
        self.failed_stage: FailedStage | None = None  # "llm" or "tts" once a stage has raised
        self.filler_samples = 0  # samples of the filler, which plays before the first clause
        self._clause_queued = False
        self._filler_task: asyncio.Task[None] | None = None
        self._llm_error: Exception | None = None
        self._prefetched: PrefetchedStream | None = None
        self._early: EarlyChunk[ClauseAudio] | None = None  # the first clause, on a guess
        #: the function calls the LLM made in this reply (complete once it is generated)
        self.tool_calls: tuple[ToolCall, ...] = ()
        #: the rounds of server-side calls run (voice_pipeline/tools/loop.py)
        self.tool_rounds: list[ToolRound] = []

    def heard(self, played: int, interrupted: bool) -> str:
        """The reply's own words the listener heard (the filler and apology excluded; all
        the text streamed, for a text-only reply)."""
        if not self.options.speak:
            return self.text.strip()
        if not interrupted:
            return " ".join(c.text for c in self.clauses if c.text)
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
        clauses: ClauseQueue = asyncio.Queue(maxsize=8)
        self._transport.emit(ev.ReplyStarted(self.turn_id, self._clock()))
        try:
            async with asyncio.TaskGroup() as tg:
                if options.speak and (prefetched is None or prefetched.held_task is None):
                    self._early = EarlyChunk(tg.create_task, self._synthesize_guess)
                tg.create_task(self._generate(messages, clauses, prefetched))
                if options.speak:
                    tg.create_task(self._speak(clauses))
                if options.speak and filler_at_ns is not None and self._deps.filler_text:
                    self._filler_task = tg.create_task(self._filler(filler_at_ns, clauses))
            if self._early is not None and (lost := self._early.lost()):  # a wrong guess: wasted
                self.audio_synthesized_s += len(lost.pcm) / self._deps.tts.sample_rate_hz
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
                    self.repeats.stopped,
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
        if (pcm := await self._phrases.try_get(text)) is None:
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

    async def _filler(self, at_ns: int, out: ClauseQueue) -> None:
        await self._sleep_until(at_ns)
        if self._clause_queued:
            return
        pcm = await self._phrases.try_get(text := self._deps.filler_text)
        if pcm is not None and not self._clause_queued:  # the queue is empty: the filler goes first
            out.put_nowait(QueuedPhrase(text, pcm))

    async def _generate(
        self, messages: list[ChatMessage], out: ClauseQueue, prefetched: PrefetchedStream | None
    ) -> None:
        """The LLM's text, cut into clauses for ``out``: one request, or with server-side
        tools (``ReplyDeps.tools``, when the reply's options offer none of their own) the
        rounds of the tool loop."""
        box = self._deps.tools if self.options.tools is None else None
        try:
            if box is None:
                await self._round(list(messages), self.options.tools, out, prefetched, 0)
            else:
                await self._tool_rounds(box, list(messages), out, prefetched)
        except Exception as exc:
            # the clauses already queued are still spoken; run() raises this afterwards
            self.failed_stage = self.failed_stage or FailedStage.LLM
            self._llm_error = exc
            self._first_clause_queued()  # no filler after a failure (the apology follows)
            await out.put(None)
            return
        self._mark(Mark.LLM_DONE, self._clock())
        self._first_clause_queued()  # an empty reply: no filler any more either
        await out.put(None)

    async def _tool_rounds(
        self, box: ToolBox, messages: list[ChatMessage], out: ClauseQueue, prefetched: PrefetchedStream | None
    ) -> None:
        """Each round that calls the tools runs them and asks again with their results, as
        long as :func:`~voice_pipeline.tools.loop.another_round` says so."""
        offer = box.offer()
        for n in range(box.max_rounds + 1):
            calls, text = await self._round(messages, offer, out, prefetched if n == 0 else None, n)
            if not another_round(offer, calls, token_limit=self.token_limit or self.repeats.stopped):
                return
            repeated = repeats(calls, self.tool_rounds)
            messages += await self._run_tools(box, rnd := box.new_round(calls, text), out)
            if (why := rnd.failed()) is not None:  # the apology, not a made-up answer
                self.failed_stage = FailedStage.TOOL
                raise EngineError(f"tool call failed: {why}", retryable=True)
            offer = next_offer(offer, n + 1, box.max_rounds, repeated=repeated)

    async def _round(
        self, messages: list[ChatMessage], offer: ToolOffer | None, out: ClauseQueue,
        prefetched: PrefetchedStream | None, n: int,
    ) -> tuple[tuple[ToolCall, ...], str]:  # fmt: skip
        """One LLM request streamed into clauses; its calls and its text (round ``n``)."""
        chunker = ClauseChunker.of(self._deps.tts_cfg)
        cap = self._deps.max_tokens
        limit = cap if self.options.max_tokens is None else min(cap, self.options.max_tokens)
        speak, text, span = self.options.speak, "", Span.LLM if n == 0 else Span.LLM_ANSWER
        tokens = 0  # the limit is each request's: the calls' tokens do not starve the answer
        if prefetched is not None:
            stream = prefetched.stream()  # its owner aborts the request
            llm_start = prefetched.started_ns
        else:
            rid = self.request_id if n == 0 else f"{self.request_id}-{n}"
            stream = (
                self._deps.llm.stream(messages, rid, offer) if offer else self._deps.llm.stream(messages, rid)
            )
            llm_start = self._clock()
        calls = CallAssembler()
        async with contextlib.aclosing(stream):  # closing aborts the engine's request
            async for delta in stream:
                if delta.prompt_tokens is not None and n == 0:
                    self.llm_first = delta  # the latest says most (see LLMDelta)
                if not (delta.text or delta.num_tokens or delta.tool_calls):
                    continue  # figures only
                self._mark(Mark.LLM_FIRST_TOKEN, self._clock())
                self.llm_tokens += delta.num_tokens
                tokens += delta.num_tokens
                if tokens >= limit:
                    self.token_limit = True  # stops here: closing the stream aborts the request
                for p in map(calls.push, delta.tool_calls):
                    self._transport.emit(
                        ev.ToolCallStreamed(
                            self.turn_id, self._clock(), p.index, p.call_id, p.name, p.arguments_delta
                        )
                    )
                if delta.text:
                    text += delta.text
                    self.text += delta.text
                    self._transport.emit(ev.AssistantTextStreamed(self.turn_id, self._clock(), delta.text))
                    if not speak:
                        self.speaker.show()
                for clause in chunker.push(delta.text):  # text only: for the repetition guard
                    await self._clause(clause, span, llm_start, out)
                if self._early is not None and not self._clauses_cut:
                    self._early.offer(chunker)
                if self.token_limit or self.repeats.stopped:
                    break
        made = calls.calls()
        self.tool_calls += made
        for index, call in enumerate(made):
            self._transport.emit(
                ev.ToolCallDone(self.turn_id, self._clock(), index, call.call_id, call.name, call.arguments)
            )
        if made:
            self._compute(span, llm_start, self._clock())  # the round that wrote the calls
        whole = self.token_limit and self._clauses_cut > 0  # a cut reply ends at its last whole clause
        for clause in chunker.flush(unfinished=not whole) if speak else ():
            await self._clause(clause, span, llm_start, out)
        return made, text

    async def _clause(self, text: str, span: Span, llm_start: int, out: ClauseQueue) -> None:
        if (clause := self.repeats.admit(text)) is None or not self.options.speak:
            return  # (text only: shown as it streamed, so only the rest of a loop is saved)
        self._clauses_cut += 1
        self._compute(span, llm_start, self._clock())  # the first one counts
        self._mark(Mark.FIRST_CLAUSE, self._clock())
        self._first_clause_queued()
        await out.put(clause)

    async def _run_tools(self, box: ToolBox, rnd: ToolRound, out: ClauseQueue) -> list[ChatMessage]:
        """Run a round's calls beside the reply (the tool filler if they are slow)."""
        self.tool_rounds.append(rnd)
        start = self._clock()
        self._mark(Mark.TOOL_START, start)

        async def slow() -> None:
            text = box.filler_text
            if self.options.speak and text and (pcm := await self._phrases.try_get(text)) is not None:
                self._first_clause_queued()  # not the reply's filler as well
                await out.put(QueuedPhrase(text, pcm, inline=True))

        await RoundRunner(box, rnd, self.turn_id, self._transport.emit, self._clock).run(slow)
        self._mark(Mark.TOOL_DONE, self._clock())
        self._compute(Span.TOOL, start, self._clock())
        return rnd.messages()

    def tool_messages(self) -> list[ChatMessage]:
        """The calls run and their results, as they stand (what enters the history)."""
        return exchange(self.tool_rounds)

    async def _held(self, clause: str) -> ClauseAudio | None:
        """The held audio of the first clause, if this reply was released from a speculative
        one that synthesized exactly this clause ahead."""
        prefetched = self._prefetched
        if prefetched is None or self.clauses:
            return None
        held = await prefetched.held_audio(clause)
        if held is None or held.sample_rate_hz != self._deps.tts.sample_rate_hz:
            return None
        self._mark(Mark.AUDIO_HELD, held.end_ns)
        return ClauseAudio(held.pcm, held.start_ns, held.end_ns, held.rest, held.rest_samples)

    def _synthesize(self, text: str, *, first: bool) -> ClauseAudio:
        """Piper on one clause, in a worker thread (the reply's first head first)."""
        head_first = first and self._deps.tts_cfg.head_first
        return synthesize_clause(self._deps.tts, text, self._clock, head_first=head_first)

    async def _synthesize_guess(self, text: str) -> ClauseAudio | None:
        """The first clause on a guess (:class:`EarlyChunk`); None on failure (synthesized again)."""
        with contextlib.suppress(Exception):
            return await asyncio.to_thread(self._synthesize, text, first=True)
        return None

    async def _speak(self, clauses: ClauseQueue) -> None:
        while (clause := await clauses.get()) is not None:
            if isinstance(clause, QueuedPhrase):
                if clause.inline:
                    self.clauses.append(SpokenClause("", len(clause.pcm)))
                else:
                    self.filler_samples += len(clause.pcm)
                self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), "", len(clause.pcm)))
                await self.speaker.add(clause.pcm)
                self._mark(Mark.FILLER_SENT, self._clock())
                continue
            # a speculative reply's first chunk synthesized before the endpoint, or one started
            # on the chunker's guess, or synthesized now
            audio = await self._held(clause)
            if audio is None and self._early is not None:
                audio = await self._early.take(clause)
            if audio is None:
                audio = await self._tts(asyncio.to_thread(self._synthesize, clause, first=not self.clauses))
            if audio.pcm.size:
                self._compute(Span.TTS, audio.start_ns, audio.end_ns)  # the first clause's counts
                self._mark(Mark.TTS_FIRST_AUDIO, self._clock())
                await self._send(clause, audio)
        self._mark(Mark.LAST_AUDIO_SENT, self._clock())

    async def let_go(self) -> None:
        """Send the audio held for a voice that was not the user going on (:meth:`ReplySpeaker.hold`)."""
        await self.speaker.resume()
        if self.speaker.sent:
            self._mark(Mark.FIRST_AUDIO_SENT, self._clock())

    async def _tts(self, synthesis: Awaitable[T]) -> T:
        """``synthesis``'s result; if it raises, the reply failed in TTS."""
        try:
            return await synthesis
        except Exception:
            self.failed_stage = self.failed_stage or FailedStage.TTS
            raise

    async def _send(self, clause: str, audio: ClauseAudio) -> None:
        """A clause's audio to the speaker; head first, the rest once decoded (the head plays)."""
        rate, out_rate = self._deps.tts.sample_rate_hz, self._transport.output_rate_hz
        pcm = resample_int16(audio.pcm, rate, out_rate)
        self.audio_synthesized_s += len(pcm) / out_rate
        self.clauses.append(SpokenClause(clause, len(pcm) + round(audio.rest_samples * out_rate / rate)))
        self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), clause, len(pcm)))
        await self.speaker.add(pcm)
        if not self.speaker.holding:
            self._mark(Mark.FIRST_AUDIO_SENT, self._clock())
        if audio.rest is not None:
            rest = resample_int16(await self._tts(asyncio.to_thread(audio.rest)), rate, out_rate)
            self.audio_synthesized_s += len(rest) / out_rate
            self.clauses[-1] = SpokenClause(clause, len(pcm) + len(rest))
            self._transport.emit(ev.ClauseSynthesized(self.turn_id, self._clock(), "", len(rest)))
            await self.speaker.add(rest)
