"""The user's side of one turn at runtime: transcription, the evidence of each pause, the LLM prefetch.

A thin asyncio adapter; it decides nothing. The session creates one per user turn
(:class:`voice_pipeline.turntaking.machine.BeginTurn`) and drives it from the machine's commands:

* ``append`` -- every input chunk while the turn may still go on (the machine's
  ``Seal`` stops it), so a continued turn has all its audio, pauses included;
* ``speculate(speech_end)`` -- a pause began: the speculative final ASR decode and the
  turn model run in worker threads -- the model once the words are in (``turn.model_start:
  words``, ``auto`` on AVX-512), its verdict used only when the words are neutral; or at
  once, beside the decode, used the same way (``early``: ``auto`` on AVX2 while the machine
  has room); or at once and used whatever the words (``pause``); each reports what it found
  (``on_evidence``: the words' :class:`~vad.end_of_turn.Cue`, or P(complete), or that the
  model failed or was not needed), tagged with the pause, and when (``evidence_at``);
* ``stop_speculating()`` -- speech resumed: the decode is void, the tasks (their threads
  too) and any prefetch are dropped;
* ``prefetch(request)`` -- the speculative reply (:mod:`voice_pipeline.conversation.speculation`):
  start the LLM on the speculative transcript while the pause runs and, with
  ``dialogue.speculative_audio``, synthesize its first chunk and hold it -- if the
  machine has room (the engines' :class:`~voice_pipeline.engines.SpeculationBudget`);
  ``take_prefetch(text, version)`` releases it if it was asked with exactly the final
  words and the same history, else drops it (request aborted, synthesis cancelled,
  nothing sent). :attr:`Utterance.speculation` counts what was prepared, held, released
  and dropped.

Partial transcripts are polled every ``asr.partial_interval_ms`` while the user speaks
and reported with ``on_partial``. Every task is spawned through the session (its owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asr.base import ASREngine
from asr.load import EngineLoad
from asr.streaming import PartialTranscript, UtteranceTranscriber
from llm.base import LLM, ChatMessage
from tts.base import TTS
from tts.chunker import ClauseChunker
from vad.base import StopSignal, TurnModel
from vad.end_of_turn import Cue, EndOfTurnPolicy, transcript_cue
from voice_pipeline.config import ASRConfig, TurnConfig
from voice_pipeline.conversation.clause_audio import synthesize_clause
from voice_pipeline.conversation.early_chunk import EarlyChunk
from voice_pipeline.conversation.speculation import (
    HeldAudio,
    PrefetchedStream,
    PrefetchSettings,
    SpeculationAccount,
)
from voice_pipeline.engines import SpeculationBudget
from voice_pipeline.turntaking.messages import EvidenceFound

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]
#: the turn model's answer: P(complete) and when it ran (clock ns), or None (it failed)
_Verdict = tuple[float, int, int] | None


@dataclass(slots=True)
class EvidenceTiming:
    """When the evidence of the last pause came back, in ms after its speech end: the words
    (speculative transcript), the sound (turn model), and the turn model's own compute."""

    words_after_ms: float | None = None
    sound_after_ms: float | None = None
    sound_compute_ms: float | None = None


@dataclass(frozen=True, slots=True)
class UtteranceEngines:
    """The engines an utterance runs on (built once, shared by every session)."""

    asr: ASREngine
    #: the speculative reply's request and its held first chunk
    llm: LLM
    tts: TTS
    #: the places for speculative requests, shared by every session of the process
    speculation: SpeculationBudget
    #: the audio turn-completion model (None: the end-of-turn policy uses the words alone)
    turn: TurnModel | None = None
    #: when the turn model runs, as chosen for this CPU (``Tuning.turn_model_start``; None: not tuned)
    turn_model_start: str | None = None
    #: the decodes on ``asr`` now, over every session (None: this utterance's alone)
    asr_load: EngineLoad | None = None


class Utterance:
    def __init__(
        self,
        turn_id: int,
        engines: UtteranceEngines,
        asr: ASRConfig,
        turn: TurnConfig,
        prefetch: PrefetchSettings,
        *,
        clock: Callable[[], int],
        sleep_until: Callable[[int], Awaitable[None]],
        time_of: Callable[[int], int],
        spawn: Spawn,
        on_evidence: Callable[[EvidenceFound], None],
        on_partial: Callable[[PartialTranscript], None],
    ) -> None:
        self.turn_id = turn_id
        self._engines = engines
        self._asr = asr
        self._turn = turn
        self._prefetch_settings = prefetch
        self._clock = clock
        self._sleep_until = sleep_until
        self._time_of = time_of
        self._spawn = spawn
        self._on_evidence = on_evidence
        self._on_partial = on_partial
        self.transcriber = UtteranceTranscriber(engines.asr, asr, stamp=clock, load=engines.asr_load)
        self.paused = False  # the VAD hears a pause inside the utterance
        #: when the words / the sound of the last pause came back, and the turn model's time
        self.evidence_at = EvidenceTiming()
        self._partials: asyncio.Task[None] | None = None
        self._evidence: list[asyncio.Task[Any]] = []
        self._prefetch: asyncio.Task[None] | None = None
        self._prefetched: PrefetchedStream | None = None
        self._prefetch_ready = asyncio.Event()
        self._budgeted = False  # the running prefetch holds a place in the speculation budget
        self.speculation = SpeculationAccount()

    # ------------------------------------------------------------ audio

    def start(self, audio: NDArray[np.float32]) -> None:
        self.transcriber.start(audio)
        self.listen()

    def append(self, samples: NDArray[np.float32]) -> None:
        self.transcriber.append(samples)

    def listen(self) -> None:
        """The user speaks (again): partial transcripts from now on."""
        self.stop_partials()
        if self._asr.partial_interval_ms > 0:
            self._partials = self._spawn(self._poll_partials(), f"partials-{self.turn_id}")

    def stop_partials(self) -> None:
        if self._partials is not None:
            self._partials.cancel()
            self._partials = None

    async def _poll_partials(self) -> None:
        interval_ns = self._asr.partial_interval_ms * 1_000_000
        while True:
            await self._sleep_until(self._clock() + interval_ns)
            if self.paused:
                continue  # the speculative final decode has the CPU
            partial = await self.transcriber.partial()
            if partial is not None:
                self._on_partial(partial)

    # ------------------------------------------------------------ the evidence of a pause

    def speculate(self, speech_end: int) -> None:
        """A pause began after input sample ``speech_end``."""
        self.paused = True
        self.evidence_at = EvidenceTiming()
        self.drop_evidence()
        if self._asr.speculative_final:
            self.transcriber.speculate()
        engines = self._engines
        model = engines.turn is not None and self._turn.semantic
        audio = self.transcriber.audio()  # what the turn model hears: the utterance up to the pause
        load = engines.asr_load  # other work on Whisper or the LLM: no room for an early start
        busy = (load is not None and load.busy) or engines.llm.unfinished_requests() > 0
        chosen, room = engines.turn_model_start, engines.speculation.has_room and not busy
        start = EndOfTurnPolicy.model_start(self._turn.model_start, chosen, room) if model else None
        then: NDArray[np.float32] | asyncio.Task[_Verdict] | None = None
        if start == "words":
            then = audio
        elif start == "early":  # computed now, beside the decode; used as with "words"
            then = asyncio.ensure_future(self._verdict(audio))
        words = self._spawn(self._words(speech_end, then), f"words-{self.turn_id}")
        self._evidence = [words, then] if isinstance(then, asyncio.Task) else [words]  # dropped together
        if start == "pause":
            self._evidence.append(self._spawn(self._sound(speech_end, audio), f"turn-model-{self.turn_id}"))

    def stop_speculating(self) -> None:
        self.paused = False
        self.transcriber.invalidate()
        self.drop_prefetch()
        self.drop_evidence()

    async def evidence_settled(self) -> None:
        """Return once the evidence of the current pause (if any) has come back."""
        if pending := [t for t in self._evidence if not t.done()]:
            await asyncio.wait(pending)

    def drop_evidence(self) -> None:
        for task in self._evidence:
            task.cancel()
        self._evidence = []

    def _after(self, sample: int) -> float:
        return (self._clock() - self._time_of(sample)) / 1e6

    async def _words(
        self, speech_end: int, then: NDArray[np.float32] | asyncio.Task[_Verdict] | None
    ) -> None:
        """The words of the pause; then (``then``: the audio, or the model already running on
        it) the turn model's verdict, only if the words are neutral: unfinished words wait the
        longest anyway, and a question mark ends the turn after the short wait (continuation
        catches a speaker who goes on). On 2 cores the model's 130 ms beside the LLM prefetch
        cost complete questions ~100 ms."""
        try:
            spec = await self.transcriber.speculative() if self._asr.speculative_final else None
            cue = Cue.NEUTRAL if spec is None else transcript_cue(spec.text)
            self.evidence_at.words_after_ms = self._after(speech_end)
            self._on_evidence(EvidenceFound(self.turn_id, speech_end, cue=cue))
            if then is None:
                return
            if cue is not Cue.NEUTRAL:
                self._on_evidence(EvidenceFound(self.turn_id, speech_end, no_sound=True))
            elif isinstance(then, asyncio.Task):
                self._report(speech_end, await then)
            else:
                await self._sound(speech_end, then)
        finally:
            if isinstance(then, asyncio.Task):
                then.cancel()  # not needed (or done): its thread's answer is dropped

    async def _sound(self, speech_end: int, audio: NDArray[np.float32]) -> None:
        self._report(speech_end, await self._verdict(audio))

    async def _verdict(self, audio: NDArray[np.float32]) -> _Verdict:
        """The turn model on ``audio`` in a thread: (P(complete), start, end), None if it failed
        (logged). Cancelled, the thread stops too: a void verdict run to the end took a core
        from the next pause's decode (a 2-core AVX2 EPYC: 300-400 ms)."""
        model = self._engines.turn
        assert model is not None
        stop = StopSignal()

        def run() -> tuple[float, int, int]:
            start = self._clock()
            return model.p_complete(audio, stop=stop), start, self._clock()

        try:
            return await asyncio.to_thread(run)
        except asyncio.CancelledError:
            stop.stop()
            raise
        except Exception:
            log.warning("turn %d: the turn model failed; deciding without it", self.turn_id, exc_info=True)
            return None

    def _report(self, speech_end: int, verdict: _Verdict) -> None:
        if verdict is None:
            self._on_evidence(EvidenceFound(self.turn_id, speech_end, no_sound=True))
            return
        p, start, end = verdict
        self.evidence_at.sound_after_ms = self._after(speech_end)
        self.evidence_at.sound_compute_ms = (end - start) / 1e6
        self._on_evidence(EvidenceFound(self.turn_id, speech_end, p_complete=p))

    # ------------------------------------------------------------ LLM prefetch

    def prefetch(self, request: Callable[[str], list[ChatMessage]], history_version: int, tag: str) -> None:
        """Start the speculative reply (``request(text)``: its messages) if there is room."""
        self.drop_prefetch()
        if not self._engines.speculation.try_acquire():
            self.speculation.skipped += 1
            return
        self._budgeted = True
        self._prefetch_ready = asyncio.Event()
        self._prefetch = self._spawn(
            self._run_prefetch(request, history_version, tag, self._prefetch_ready),
            f"prefetch-{self.turn_id}",
        )

    @property
    def prefetching(self) -> bool:  # an LLM request on the speculative transcript is running
        return self._prefetch is not None and not self._prefetch.done()

    def drop_prefetch(self) -> None:
        """Drop the speculative reply not released (if any): abort its request (which ends a
        synthesis still waiting for its text); what it cost is counted as wasted -- a chunk
        already inside the TTS engine finishes in its thread, is counted, and is never sent."""
        buffer = self._prefetched
        if self._prefetch is not None:
            self._prefetch.cancel()  # closes the stream: the request is aborted
        if buffer is not None:
            buffer.dropped = True
            self.speculation.drop(buffer.tokens, buffer.held.seconds if buffer.held else 0.0)
        self._prefetch, self._prefetched = None, None
        self._release_budget()

    def _release_budget(self) -> None:
        if self._budgeted:
            self._budgeted = False
            self._engines.speculation.release()

    async def _run_prefetch(
        self, request: Callable[[str], list[ChatMessage]], version: int, tag: str, ready: asyncio.Event
    ) -> None:
        try:
            spec = await self.transcriber.speculative()
            text = "" if spec is None else spec.text.strip()
            if not text:
                return
            buffer = PrefetchedStream(text, history_version=version, started_ns=self._clock())
            self._prefetched = buffer
            self.speculation.prepared += 1
            if self._prefetch_settings.hold_first_chunk:
                buffer.held_task = self._spawn(self._hold_first_chunk(buffer), f"held-audio-{self.turn_id}")
            ready.set()
            await buffer.fill(self._engines.llm, request(text), f"prefetch-{tag}")
        finally:
            ready.set()
            if self._prefetched is None:  # never started, or released: the budget is free again
                self._release_budget()

    async def _hold_first_chunk(self, buffer: PrefetchedStream) -> None:
        """Synthesize the speculative reply's first chunk (cut as the reply will cut it) and
        hold it in ``buffer``; nothing is sent. A failure only loses the head start.

        A chunk is only cut once the next token shows what follows it; its synthesis starts a
        token earlier, on the chunker's guess (:meth:`ClauseChunker.tentative`). A wrong guess
        (``It costs 3.`` + ``5``) is wasted audio; the real chunk is then synthesized."""
        chunker = ClauseChunker.of(self._prefetch_settings.tts)
        first: str | None = None
        held: HeldAudio | None = None
        async with asyncio.TaskGroup() as tg:  # waits for a guess that lost, never sends it
            early: EarlyChunk[HeldAudio] = EarlyChunk(tg.create_task, self._synthesize_ahead)
            stream = buffer.stream()
            try:
                async with contextlib.aclosing(stream):
                    async for delta in stream:
                        if (first := next(iter(chunker.push(delta.text)), None)) is not None:
                            break
                        early.offer(chunker)
                    else:
                        first = next(iter(chunker.flush()), None)
            except Exception:
                first = None  # the request failed: the reply will say so
            if first is not None:
                held = await early.take(first) or await self._synthesize_ahead(first)
        if (lost := early.lost()) is not None:
            self.speculation.wasted_audio_s += lost.seconds
        if held is None or not held.pcm.size:
            return
        self.speculation.held += 1
        if buffer.dropped:  # dropped while it was being synthesized: thrown away
            self.speculation.wasted_audio_s += held.seconds
        else:
            buffer.held = held

    async def _synthesize_ahead(self, text: str) -> HeldAudio | None:
        """``text`` synthesized in a worker thread, stamped with when it ran; None on failure."""
        tts, head_first = self._engines.tts, self._prefetch_settings.tts.head_first

        def run() -> HeldAudio:
            a = synthesize_clause(tts, text, self._clock, head_first=head_first)
            return HeldAudio(text, a.pcm, tts.sample_rate_hz, a.start_ns, a.end_ns, a.rest, a.rest_samples)

        try:
            return await asyncio.to_thread(run)
        except Exception:
            log.warning("turn %d: cannot synthesize the speculative first chunk", self.turn_id, exc_info=True)
            return None

    async def take_prefetch(self, user_text: str, history_version: int) -> PrefetchedStream | None:
        """The speculative reply if it was asked with exactly these words and history
        (released: the reply reads its stream and its held audio), else None (dropped)."""
        if self._prefetch is None:
            return None
        await self._prefetch_ready.wait()
        buffer = self._prefetched
        if buffer is None or buffer.user_text != user_text or buffer.history_version != history_version:
            self.drop_prefetch()
            return None
        self.speculation.released += 1
        self._prefetched = None  # the reply's now: not dropped with the utterance
        self._release_budget()
        return buffer

    # ------------------------------------------------------------ lifetime

    def drop(self) -> None:
        """The turn goes on anew or is over: everything of the current attempt stops."""
        self.stop_partials()
        self.drop_evidence()
        self.drop_prefetch()

    async def aclose(self) -> None:
        self.drop()
        await self.transcriber.aclose()
