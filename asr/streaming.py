"""Per-session streaming on top of any :class:`asr.base.ASREngine`.

:class:`UtteranceTranscriber` is the thin asyncio adapter: it buffers the utterance, runs the
engine's blocking whole-utterance decodes in a worker thread, feeds
:class:`asr.local_agreement.LocalAgreement` for partials, and owns the speculative final decode.
Its decisions (is a partial due, is the speculation usable) are the pure :func:`partial_due` and
:func:`speculation_usable`.

Life of one utterance, as the session runtime drives it::

    start(pre_roll)          VAD: speech started
    append(frame) ...        every frame while the user speaks (and after)
    await partial()          as often as you like; decodes only when due (the engine's
                             transcribe_partial: it may skip a costly one)
    speculate()              VAD: the pause started -> final decode begins now
    invalidate()             VAD: speech resumed -> that decode is discarded
    speculate()              the next pause
    await final()            endpoint: reuse the speculation or decode now

Audio appended after :meth:`speculate` is silence (the pause) unless :meth:`invalidate` is
called, so a valid speculation covers all the speech; the engine may decode it too, when its
decode of the audio up to the pause is doubtful (``more`` of ``ASREngine.transcribe``), and a
discarded decode stops before the engine's costlier path (``DecodeUnwanted``).

Every decode hears the utterance with its long inner pauses shortened to
``asr.max_pause_ms`` (:mod:`asr.pauses`): a speaker who pauses mid-sentence is
transcribed as one sentence, not as fragments.

Sessions that share one engine share its :class:`asr.load.EngineLoad`: a partial starts
only when no session's decode is on the engine (``asr.partials_on_idle_engine``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from asr.base import ASREngine, DecodeUnwanted, MoreAudio, Transcription
from asr.load import EngineLoad
from asr.local_agreement import LocalAgreement
from asr.pauses import shorten_pauses
from voice_pipeline.errors import AudioInputError, ClosedError, EngineError

if TYPE_CHECKING:
    from voice_pipeline.config import ASRConfig


@dataclass(frozen=True, slots=True)
class PartialTranscript:
    #: words two consecutive decodes agreed on; never retracted within the utterance
    committed: str
    #: the rest of the latest decode; may still change
    tentative: str
    #: ``committed`` and ``tentative`` joined
    text: str
    #: seconds of audio the decode covered
    audio_s: float


@dataclass(frozen=True, slots=True)
class FinalTranscript:
    text: str
    words: tuple[str, ...]
    #: seconds of audio the decode covered
    audio_s: float
    #: engine time of the decode used
    decode_ms: float
    #: True when a valid speculative decode (started at the pause) was used
    speculative: bool
    #: how long :meth:`UtteranceTranscriber.final` waited for the transcript
    waited_ms: float
    #: when the engine started and finished the decode used (clock ns; the ledger's compute span)
    decode_start_ns: int = 0
    decode_end_ns: int = 0


# ---------------------------------------------------------------- decisions


def partial_due(
    buffered_samples: int,
    last_partial_samples: int,
    interval_samples: int,
    *,
    decoding: bool,
    paused: bool,
    engine_busy: bool = False,
) -> bool:
    """A partial decode is due when partials are enabled (``interval_samples > 0``), no decode
    of this utterance is running, no decode of another session is on a shared engine
    (``engine_busy``: a partial would queue ahead of their finals), the user is not pausing (no
    valid speculative final stands), and ``interval_samples`` arrived since the last partial."""
    if interval_samples <= 0 or decoding or paused or engine_busy:
        return False
    return buffered_samples - last_partial_samples >= interval_samples


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decode's result and when the engine worked on it (clock ns, stamped in its thread)."""

    result: Transcription
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class Speculation:
    """A final decode started at the pause. ``valid`` drops to False when speech resumes;
    ``awaited``: :meth:`UtteranceTranscriber.final` uses it (then it is wanted whatever comes)."""

    task: asyncio.Task[Decoded]
    utterance: int
    valid: bool = True
    awaited: bool = False


def speculation_usable(spec: Speculation | None, utterance: int) -> bool:
    """The speculative decode may stand in for the final one: it belongs to this utterance and
    no speech was heard since it started."""
    return spec is not None and spec.valid and spec.utterance == utterance


# ---------------------------------------------------------------- adapter


class UtteranceTranscriber:
    """Streaming transcription of one session's utterances, one at a time.

    ``executor`` runs the blocking decodes (``None``: the loop's default executor). ``clock``
    returns monotonic nanoseconds (for ``waited_ms``); ``stamp`` is the clock the decodes'
    compute spans are stamped with, in the decoding thread (the session's clock). ``load`` is
    the engine's load shared by every session on it (None: this one alone)."""

    def __init__(
        self,
        engine: ASREngine,
        cfg: ASRConfig,
        *,
        executor: Executor | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        stamp: Callable[[], int] = time.monotonic_ns,
        load: EngineLoad | None = None,
    ) -> None:
        self._engine = engine
        self._load = load if load is not None else EngineLoad()
        self._stamp = stamp
        self._cfg = cfg
        self._executor = executor
        self._clock = clock
        self._interval_samples = round(cfg.partial_interval_ms * engine.sample_rate_hz / 1000)
        self._chunks: list[NDArray[np.float32]] = []
        self._samples = 0
        self._utterance = 0
        self._agreement = LocalAgreement()
        self._last_partial_samples = 0
        self._last_partial: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._partial_running = False
        self._speculation: Speculation | None = None
        self._tasks: set[asyncio.Task[Decoded]] = set()
        self._closed = False

    # ------------------------------------------------------------ audio in

    def start(self, audio: NDArray[np.float32]) -> None:
        """Begin a new utterance with ``audio`` (the VAD's pre-roll). Forgets the last one."""
        self._check_open()
        self.invalidate()
        self._utterance += 1
        self._chunks.clear()
        self._samples = 0
        self._agreement.reset()
        self._last_partial_samples = 0
        self._last_partial = None
        self._partial_running = False
        self.append(audio)

    def append(self, audio: NDArray[np.float32]) -> None:
        """Add mono float32 audio at the engine's rate to the current utterance (copied)."""
        self._check_open()
        chunk = np.array(audio, dtype=np.float32, copy=True)
        if chunk.ndim != 1:
            raise AudioInputError(f"ASR expects mono 1-D audio, got shape {chunk.shape}")
        if chunk.size:
            self._chunks.append(chunk)
            self._samples += chunk.size

    @property
    def buffered_s(self) -> float:
        """Seconds of audio in the current utterance."""
        return self._samples / self._engine.sample_rate_hz

    @property
    def partial_due(self) -> bool:
        """Whether :meth:`partial` would decode now."""
        return partial_due(
            self._samples,
            self._last_partial_samples,
            self._interval_samples,
            decoding=self._decoding(),
            paused=speculation_usable(self._speculation, self._utterance),
            engine_busy=self._cfg.partials_on_idle_engine and self._load.busy,
        )

    # ------------------------------------------------------------ partials

    async def partial(self) -> PartialTranscript | None:
        """Decode the utterance so far and advance the commit policy.

        None when no partial is due (see :func:`partial_due`: ``partial_interval_ms`` of new
        audio is needed, 0 disables partials; none while a decode runs or a valid speculation
        stands), or when the decode changed nothing. Call it as often as convenient."""
        self._check_open()
        if not self.partial_due:
            return None
        utterance, samples = self._utterance, self._samples
        audio = self._snapshot()
        self._last_partial_samples = samples
        self._partial_running = True
        try:
            result = await self._preview(audio)
        finally:
            if utterance == self._utterance:
                self._partial_running = False
        if utterance != self._utterance or self._closed or result is None:
            return None  # a new utterance started meanwhile, or the engine skipped this one
        self._agreement.update(result.words)
        committed, tentative = self._agreement.committed, self._agreement.tentative
        if self._last_partial == (committed, tentative):
            return None
        self._last_partial = (committed, tentative)
        return PartialTranscript(
            committed=" ".join(committed),
            tentative=" ".join(tentative),
            text=" ".join(committed + tentative),
            audio_s=result.audio_s,
        )

    # ------------------------------------------------------------ finals

    def speculate(self) -> None:
        """Start the final decode of the audio so far (the VAD heard the pause start); no-op
        when ``speculative_final`` is off or a valid speculation is already running or done."""
        self._check_open()
        if not self._cfg.speculative_final or speculation_usable(self._speculation, self._utterance):
            return
        box: list[Speculation] = []  # the closure's view of the speculation it belongs to
        task = self._spawn(self._decode(self._snapshot(), more=self._so_far(self._utterance, box)))
        self._speculation = Speculation(task, self._utterance)
        box.append(self._speculation)

    def invalidate(self) -> None:
        """Speech resumed: the speculation will not be used. Its thread stops at the engine's
        next question (``more``: before its turn, after the encoder, before the full window)."""
        if self._speculation is not None:
            self._speculation.valid = False

    async def speculative(self) -> FinalTranscript | None:
        """The speculative decode of the current pause, once done; None if there is none or it
        became void (speech resumed). Never decodes itself."""
        self._check_open()
        spec = self._speculation
        if not speculation_usable(spec, self._utterance):
            return None
        assert spec is not None
        t0 = self._clock()
        try:
            decoded = await self._await_speculation(spec)
        except DecodeUnwanted:
            return None  # speech resumed while it decoded
        if not speculation_usable(spec, self._utterance):
            return None
        return self._final(decoded, speculative=True, t0=t0)

    def audio(self) -> NDArray[np.float32]:
        """The current utterance's audio so far (not a copy: do not modify it)."""
        return self._snapshot()

    async def final(self) -> FinalTranscript:
        """The transcript of the whole utterance: the speculative decode if still valid
        (awaited), otherwise a decode of everything buffered, now."""
        self._check_open()
        t0 = self._clock()
        spec = self._speculation
        if speculation_usable(spec, self._utterance):
            assert spec is not None
            spec.awaited = True  # before any await: a later invalidate() cannot stop it now
            decoded = await self._await_speculation(spec)
            speculative = True
        else:
            decoded = await self._decode(self._snapshot())
            speculative = False
        return self._final(decoded, speculative=speculative, t0=t0)

    def _final(self, decoded: Decoded, *, speculative: bool, t0: int) -> FinalTranscript:
        result = decoded.result
        return FinalTranscript(
            text=result.text,
            words=result.words,
            audio_s=result.audio_s,
            decode_ms=result.decode_ms,
            speculative=speculative,
            waited_ms=(self._clock() - t0) / 1e6,
            decode_start_ns=decoded.start_ns,
            decode_end_ns=decoded.end_ns,
        )

    # ------------------------------------------------------------ lifetime

    async def aclose(self) -> None:
        """Cancel the decode tasks this transcriber owns. Idempotent. Threads already inside the
        engine finish on their own; their results are dropped."""
        if self._closed:
            return
        self._closed = True
        self._speculation = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # never raises the tasks' errors; our cancellation propagates

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("UtteranceTranscriber")

    async def _await_speculation(self, spec: Speculation) -> Decoded:
        # shielded: if final() is cancelled the speculation stays usable (aclose ends it)
        try:
            return await asyncio.shield(spec.task)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # final() itself was cancelled
            # only the speculation was: aclose() ran while final() waited
            raise EngineError("UtteranceTranscriber closed during final()") from None

    def _decoding(self) -> bool:
        # owned tasks: the speculation, and discarded ones whose thread still runs
        return self._partial_running or any(not task.done() for task in self._tasks)

    def _snapshot(self) -> NDArray[np.float32]:
        if len(self._chunks) > 1:
            self._chunks[:] = [np.concatenate(self._chunks)]
        if not self._chunks:
            return np.zeros(0, dtype=np.float32)
        return self._chunks[0]

    def _shortened(self, audio: NDArray[np.float32]) -> NDArray[np.float32]:
        return shorten_pauses(audio, self._engine.sample_rate_hz, self._cfg.max_pause_ms / 1000)

    def _so_far(self, utterance: int, box: list[Speculation]) -> MoreAudio:
        """Utterance ``utterance`` so far, None once another began (the engine's thread asks);
        raises :class:`DecodeUnwanted` once the speculation in ``box`` is void and not awaited."""

        def audio() -> NDArray[np.float32] | None:
            if box and not box[0].valid and not box[0].awaited:
                raise DecodeUnwanted(f"utterance {utterance}: speech resumed")
            chunks = list(self._chunks)  # one atomic copy; the loop only appends or replaces
            if self._utterance != utterance or not chunks:  # start() counts before it clears
                return None
            return self._shortened(np.concatenate(chunks))

        return audio

    async def _decode(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Decoded:
        def run() -> Decoded:
            start = self._stamp()
            result = self._engine.transcribe(self._shortened(audio), more=more)
            return Decoded(result, start, self._stamp())

        return await self._load.run(self._executor, run)

    async def _preview(self, audio: NDArray[np.float32]) -> Transcription | None:
        preview = self._engine.transcribe_partial
        return await self._load.run(self._executor, lambda: preview(self._shortened(audio)))

    def _spawn(self, coro: Coroutine[Any, Any, Decoded]) -> asyncio.Task[Decoded]:
        task = asyncio.get_running_loop().create_task(coro, name="asr-speculative-final")
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Decoded]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # a dropped speculation's error is not "never retrieved"
