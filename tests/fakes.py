"""Small fakes of the stage interfaces, a controllable clock, and a recording transport.

* :class:`FakeClock` -- monotonic nanoseconds that move only when a test says so;
  coroutines can sleep on it (:meth:`FakeClock.sleep_until`).
* :class:`FakeVAD` -- 512-sample frames at 16 kHz; probability 1.0 when the
  frame's RMS is over 0.05, else 0.0.
* :class:`FakeASR` -- returns ``text``; counts calls; optional blocking delay or gate.
* :class:`FakeLLM` -- streams ``reply`` word by word; records requests started,
  finished, aborted and failed; can hold a stream after N tokens or fail it; prefills
  (recorded, ``prefill_delay_s`` long, abortable) and reports the first delta's prompt
  tokens (one per word) and cached tokens (those of the longest prefilled prefix).
* :class:`FakeTTS` -- 22.05 kHz tone, 60 ms per character.
* :class:`FakeTurnModel` -- a fixed P(complete), or an error.
* :class:`RecordingTransport` -- a :class:`voice_pipeline.transport.Transport`
  that records everything and plays audio into a :class:`Playout` on the fake clock.
* :class:`Driver` -- pushes 20 ms chunks of synthetic input with explicit timestamps.
* :class:`EchoRoom` -- the listener's loudspeaker heard again by the microphone: what the
  transport played, delayed and attenuated, mixed into the driver's input.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from asr.base import MoreAudio, Transcription
from llm.base import (
    ChatMessage,
    HealthTracker,
    LLMDelta,
    LLMHealth,
    PrefillOutcome,
    PrefillResult,
    ToolOffer,
)
from tts.base import HeadFirst
from vad.base import ModelStopped, StopSignal
from voice_pipeline.conversation.session import Session
from voice_pipeline.engines import Engines
from voice_pipeline.errors import EngineError
from voice_pipeline.events import Event, TurnCompleted
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.playout import Playout
from voice_pipeline.tuning import Tuning

RATE = 16000
CHUNK_MS = 20
MS = 1_000_000

E = TypeVar("E")
T = TypeVar("T")


# ---------------------------------------------------------------- signals


def tone(
    seconds: float, rate_hz: int = RATE, amplitude: float = 0.3, hz: float = 440.0
) -> NDArray[np.float32]:
    """Stand-in for speech: a 440 Hz tone at amplitude 0.3."""
    t = np.arange(round(seconds * rate_hz)) / rate_hz
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def silence(seconds: float, rate_hz: int = RATE) -> NDArray[np.float32]:
    return np.zeros(round(seconds * rate_hz), dtype=np.float32)


# ---------------------------------------------------------------- clock


class FakeClock:
    """Monotonic nanoseconds under the test's control. Starts far from zero."""

    def __init__(self, start_ns: int = 1_000 * 1_000_000_000) -> None:
        self.now_ns = start_ns
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ns: int) -> None:
        assert ns >= 0
        self.now_ns += ns
        waiting = []
        for deadline, fut in self._sleepers:
            if fut.done():
                continue
            if deadline <= self.now_ns:
                fut.set_result(None)
            else:
                waiting.append((deadline, fut))
        self._sleepers = waiting

    def advance_ms(self, ms: float) -> None:
        self.advance(round(ms * MS))

    async def sleep_until(self, t_ns: int) -> None:
        if t_ns <= self.now_ns:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((t_ns, fut))
        await fut


# ---------------------------------------------------------------- VAD


def rms(x: NDArray[np.float32]) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


class FakeVADStream:
    def __init__(self, frame_samples: int) -> None:
        self.frame_samples = frame_samples
        self._buf = np.zeros(0, dtype=np.float32)

    def push(self, samples: NDArray[np.float32]) -> list[float]:
        buf = np.concatenate([self._buf, samples.astype(np.float32)])
        n = len(buf) // self.frame_samples
        frames = buf[: n * self.frame_samples].reshape(n, self.frame_samples)
        self._buf = buf[n * self.frame_samples :]
        return [1.0 if rms(f) > 0.05 else 0.0 for f in frames]

    def reset(self) -> None:
        self._buf = np.zeros(0, dtype=np.float32)


class FakeVAD:
    def __init__(self) -> None:
        self.sample_rate_hz = RATE
        self.frame_samples = 512
        self.closed = False

    def stream(self) -> FakeVADStream:
        return FakeVADStream(self.frame_samples)

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- ASR


class FakeASR:
    """Returns ``text`` (or raises ``error``) for any audio; counts calls. Thread-safe."""

    def __init__(self, text: str = "what is the answer", delay_s: float = 0.0) -> None:
        self.sample_rate_hz = RATE
        self.text = text
        self.delay_s = delay_s
        self.error: Exception | None = None
        self.calls = 0
        #: seconds of audio of every decode, in call order
        self.decoded_s: list[float] = []
        self.closed = False
        #: decodes block while this is clear (a test holds a decode "running")
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def transcribe(self, audio: NDArray[np.float32], *, more: MoreAudio | None = None) -> Transcription:
        with self._lock:
            self.calls += 1
            self.decoded_s.append(audio.size / RATE)
            text, error = self.text, self.error
        if self.delay_s:
            time.sleep(self.delay_s)
        self.gate.wait(timeout=10)
        if error is not None:
            raise error
        return Transcription(text, tuple(text.split()), audio.size / RATE, 1000 * self.delay_s)

    def transcribe_partial(self, audio: NDArray[np.float32]) -> Transcription | None:
        return self.transcribe(audio)

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- turn model


class FakeTurnModel:
    """P(complete) = ``p`` for any audio (or raises ``error``); records the audio lengths.
    With ``hold`` set, each call runs until ``hold`` is set or its stop signal stops it
    (``stopped`` counts those)."""

    def __init__(self, p: float = 0.9) -> None:
        self.sample_rate_hz = RATE
        self.p = p
        self.error: Exception | None = None
        self.audio_s: list[float] = []
        self.closed = False
        self.hold: threading.Event | None = None
        self.stopped = 0
        self._lock = threading.Lock()

    def p_complete(self, audio: NDArray[np.float32], *, stop: StopSignal | None = None) -> float:
        with self._lock:
            self.audio_s.append(audio.size / RATE)
            if self.error is not None:
                raise self.error
        if self.hold is not None:
            done = threading.Event()
            if stop is not None:
                stop.on_stop(done.set)
            while not (done.wait(0.005) or self.hold.is_set()):
                pass
            if stop is not None and stop.stopped:
                with self._lock:
                    self.stopped += 1
                raise ModelStopped("fake turn model stopped")
        return self.p

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- LLM


@dataclass(frozen=True, slots=True)
class LLMRequest:
    request_id: str
    messages: tuple[ChatMessage, ...]
    #: the tools the request offered (the fake answers with text all the same)
    tools: ToolOffer | None = None


def word_deltas(reply: str) -> list[str]:
    words = reply.split()
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class FakeLLM:
    """Streams ``reply`` one word per token, with ``await asyncio.sleep(token_delay_s)`` each.

    ``hold_after(n)`` makes new streams wait after ``n`` tokens until :meth:`release`;
    ``fail_after = n`` makes new streams raise ``error`` instead of token ``n``.
    Health: a retryable failure makes :meth:`health` not ok until a token is streamed
    (no backoff).
    """

    def __init__(
        self, reply: str = "Sure, the answer is forty two. Anything else?", token_delay_s: float = 0.0
    ) -> None:
        self.reply = reply
        self.token_delay_s = token_delay_s
        self.fail_after: int | None = None
        self.error: Exception = EngineError("the LLM stream broke", retryable=True)
        self.requests: list[LLMRequest] = []
        self.started: list[str] = []
        self.finished: list[str] = []
        self.aborted: list[str] = []
        self.failed: list[str] = []
        self.close_calls = 0
        self.prefill_delay_s = 0.0
        self.prefills: list[LLMRequest] = []
        self.prefill_results: list[PrefillResult] = []
        self._warm: list[tuple[ChatMessage, ...]] = []
        self._prefill_aborts: dict[str, asyncio.Event] = {}
        self.tracker = HealthTracker(0.5, 10.0)
        self._hold_after: int | None = None
        self._resume = asyncio.Event()
        self._active: set[str] = set()
        self._closed = False

    def hold_after(self, tokens: int) -> None:
        self._hold_after = tokens
        self._resume.clear()

    def release(self) -> None:
        self._hold_after = None
        self._resume.set()

    def stream(
        self, messages: Sequence[ChatMessage], request_id: str, tools: ToolOffer | None = None
    ) -> AsyncGenerator[LLMDelta, None]:
        self.requests.append(LLMRequest(request_id, tuple(messages), tools))
        prompt = sum(len(m.content.split()) for m in messages)
        cached = max(
            (sum(len(m.content.split()) for m in w) for w in self._warm if tuple(messages[: len(w)]) == w),
            default=0,
        )
        return self._stream(
            request_id, word_deltas(self.reply), self._hold_after, self.fail_after, prompt, cached
        )

    async def prefill(self, messages: Sequence[ChatMessage], request_id: str) -> PrefillResult:
        """Warms ``messages`` after ``prefill_delay_s`` unless aborted or cancelled first."""
        self.prefills.append(LLMRequest(request_id, tuple(messages)))
        aborted = self._prefill_aborts[request_id] = asyncio.Event()
        self._active.add(request_id)
        t0 = time.monotonic_ns()
        try:
            try:
                async with asyncio.timeout(self.prefill_delay_s):
                    await aborted.wait()
                outcome = PrefillOutcome.ABORTED
            except TimeoutError:
                outcome = PrefillOutcome.WARMED
                self._warm.append(tuple(messages))
            result = PrefillResult(
                request_id,
                outcome,
                sum(len(m.content.split()) for m in messages),
                0,
                (time.monotonic_ns() - t0) / 1e6,
            )
            self.prefill_results.append(result)
            return result
        finally:
            self._active.discard(request_id)
            del self._prefill_aborts[request_id]

    async def _stream(
        self,
        request_id: str,
        deltas: list[str],
        hold_after: int | None,
        fail_after: int | None,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> AsyncGenerator[LLMDelta, None]:
        self.started.append(request_id)
        self._active.add(request_id)
        outcome = self.aborted
        try:
            for i, text in enumerate(deltas):
                if hold_after is not None and i == hold_after:
                    await self._resume.wait()
                if fail_after is not None and i == fail_after:
                    outcome = self.failed
                    if isinstance(self.error, EngineError) and self.error.retryable:
                        self.tracker.failed(time.monotonic_ns(), str(self.error))
                    raise self.error
                await asyncio.sleep(self.token_delay_s)
                self.tracker.succeeded()
                if i == 0:
                    yield LLMDelta(text, 1, prompt_tokens, cached_tokens, 1000 * self.token_delay_s)
                else:
                    yield LLMDelta(text, 1)
            outcome = self.finished
        finally:
            # reached on completion, on an error, on aclose() and on cancellation
            self._active.discard(request_id)
            outcome.append(request_id)

    async def abort(self, request_id: str) -> None:
        if request_id in self._prefill_aborts:
            self._prefill_aborts[request_id].set()
        if request_id in self._active:
            self._active.discard(request_id)
            self.aborted.append(request_id)

    def unfinished_requests(self) -> int:
        return len(self._active)

    def health(self) -> LLMHealth:
        return self.tracker.health(time.monotonic_ns())

    async def aclose(self) -> None:
        self.close_calls += 1
        self._closed = True


# ---------------------------------------------------------------- TTS


class FakeTTS:
    """A 220 Hz tone, 60 ms per character of text, at 22.05 kHz."""

    ms_per_char = 60

    def __init__(self, delay_s: float = 0.0) -> None:
        self.sample_rate_hz = 22050
        self.voice = "tone"
        self.delay_s = delay_s
        self.error: Exception | None = None
        self.texts: list[str] = []
        self.closed = False
        self._lock = threading.Lock()

    def samples_for(self, text: str) -> int:
        return round(len(text) * self.ms_per_char * self.sample_rate_hz / 1000)

    def synthesize(self, text: str) -> NDArray[np.int16]:
        with self._lock:
            self.texts.append(text)
            error = self.error
        if self.delay_s:
            time.sleep(self.delay_s)
        if error is not None:
            raise error
        n = self.samples_for(text)
        t = np.arange(n) / self.sample_rate_hz
        pcm = (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        pcm[pcm == 0] = 1  # every sample audible: rendered output can be counted
        return pcm

    def close(self) -> None:
        self.closed = True


class HeadFirstTTS(FakeTTS):
    """A FakeTTS that also synthesizes head first (as PiperTTS, ``tts.head_first``): the
    first quarter of the tone now, the rest when ``rest()`` is called. ``calls`` says in
    which order: ("whole" | "head" | "rest", text), and ``rest_at`` when each rest began."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        self.clock = clock
        self.rest_at: list[int] = []
        #: set: a rest is decoded at once; cleared, ``rest()`` waits for it
        self.rest_gate = threading.Event()
        self.rest_gate.set()

    def synthesize(self, text: str) -> NDArray[np.int16]:
        self.calls.append(("whole", text))
        return super().synthesize(text)

    def synthesize_head(self, text: str) -> HeadFirst:
        self.calls.append(("head", text))
        pcm = super().synthesize(text)
        cut = len(pcm) // 4

        def rest() -> NDArray[np.int16]:
            self.calls.append(("rest", text))
            if self.clock is not None:
                self.rest_at.append(self.clock())
            self.rest_gate.wait(10.0)
            return pcm[cut:]

        return HeadFirst(pcm[:cut], rest, len(pcm) - cut)


# ---------------------------------------------------------------- transport


@dataclass(slots=True)
class RecordingTransport:
    """Records events, audio and clears; plays audio in real time on ``clock``."""

    clock: FakeClock
    output_rate_hz: int = 22050
    events: list[Event] = field(default_factory=list)
    audio: dict[int, list[NDArray[np.int16]]] = field(default_factory=dict)
    #: ("play" | "clear", turn_id, position) in call order
    log: list[tuple[str, int, int]] = field(default_factory=list)
    playout: Playout = field(init=False)
    origin_ns: int = field(init=False)

    def __post_init__(self) -> None:
        self.playout = Playout(self.output_rate_hz)
        self.origin_ns = self.clock()

    def position(self) -> int:
        """Output samples the listener's clock has advanced since the transport was made."""
        return (self.clock() - self.origin_ns) * self.output_rate_hz // 1_000_000_000

    def time_of(self, position: int) -> int:
        return self.origin_ns + math.ceil(position * 1_000_000_000 / self.output_rate_hz)

    # the Transport protocol

    def emit(self, event: Event) -> None:
        self.events.append(event)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        self.audio.setdefault(turn_id, []).append(pcm)
        self.log.append(("play", turn_id, self.position()))
        self.playout.send(turn_id, pcm, self.position())

    def clear(self, turn_id: int) -> None:
        self.log.append(("clear", turn_id, self.position()))
        self.playout.clear(turn_id, self.position())

    def played_samples(self, turn_id: int) -> int:
        return self.playout.played(turn_id, self.position())

    async def drain(self, turn_id: int) -> None:
        await self.clock.sleep_until(self.time_of(self.playout.end_of(turn_id)))

    # helpers for tests

    def of(self, kind: type[E], turn_id: int | None = None) -> list[E]:
        return [
            e
            for e in self.events
            if isinstance(e, kind) and (turn_id is None or getattr(e, "turn_id", None) == turn_id)
        ]

    def record(self, turn_id: int) -> TurnRecord | None:
        done = self.of(TurnCompleted, turn_id)
        return done[0].record if done else None

    def clears(self, turn_id: int) -> list[int]:
        return [pos for kind, tid, pos in self.log if kind == "clear" and tid == turn_id]

    def heard(self, turn_id: int) -> NDArray[np.int16]:
        """Every sample of ``turn_id`` the listener played (or will play), in playback order."""
        chunks = sorted((c for c in self.playout.chunks if c.turn_id == turn_id), key=lambda c: c.start)
        parts = [c.pcm if c.cut is None else c.pcm[: c.cut] for c in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


# ---------------------------------------------------------------- wiring


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts work submitted and not finished yet.

    Installed as the loop's default executor (the session runs ASR decodes and TTS
    syntheses there), so :meth:`Driver.settle` can wait for worker threads before it
    moves the fake clock on. It is an ordinary ThreadPoolExecutor to everyone else.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="test-engines")
        self._count_lock = threading.Lock()
        self.pending = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._count_lock:
            self.pending += 1
        fut = super().submit(fn, *args, **kwargs)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _fut: Future[Any]) -> None:
        with self._count_lock:
            self.pending -= 1


_executors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CountingExecutor] = (
    weakref.WeakKeyDictionary()
)


def counting_executor() -> CountingExecutor:
    """The running loop's default executor, made a :class:`CountingExecutor` once per loop."""
    loop = asyncio.get_running_loop()
    executor = _executors.get(loop)
    if executor is None:
        executor = _executors[loop] = CountingExecutor()
        loop.set_default_executor(executor)
    return executor


@dataclass(slots=True)
class Fakes:
    vad: FakeVAD = field(default_factory=FakeVAD)
    asr: FakeASR = field(default_factory=FakeASR)
    llm: FakeLLM = field(default_factory=FakeLLM)
    tts: FakeTTS = field(default_factory=FakeTTS)
    #: None = no turn model (the end-of-turn policy uses the words alone)
    turn: FakeTurnModel | None = None
    #: the settings chosen for a machine (None: as built by hand)
    tuning: Tuning | None = None

    def engines(self) -> Engines:
        return Engines(
            vad=self.vad, asr=self.asr, llm=self.llm, tts=self.tts, turn=self.turn, tuning=self.tuning
        )


@dataclass(slots=True)
class EchoRoom:
    """A loudspeaker next to the microphone: the transport's playout comes back into the
    input ``delay_ms`` later at ``gain_db``. The transport must play at the input rate."""

    transport: RecordingTransport
    delay_ms: float = 100.0
    gain_db: float = -6.0

    def echo(self, start: int, end: int, origin_ns: int) -> NDArray[np.float32]:
        """Echo for input samples [start, end), input sample 0 captured at ``origin_ns``."""
        assert self.transport.output_rate_hz == RATE
        offset = (origin_ns - self.transport.origin_ns) * RATE // 1_000_000_000
        delay = round(self.delay_ms * RATE / 1000)
        played = self.transport.playout.window(start + offset - delay, end + offset - delay)
        return (played.astype(np.float32) * np.float32(10 ** (self.gain_db / 20) / 32768)).astype(np.float32)


class Driver:
    """Feeds a session 20 ms chunks stamped with the fake clock, letting the loop run between.

    Feeding does not advance the real clock: 30 s of input can take 50 ms on a fast CPU. What
    runs on asyncio's clock (a tool's timeout, its filler's delay) must be waited for as such
    (``polling.until`` on the event it ends with), not by feeding more."""

    def __init__(self, session: Session, clock: FakeClock, fakes: Fakes) -> None:
        self.session = session
        self.clock = clock
        self.fakes = fakes
        self.executor = counting_executor()
        self.samples_fed = 0
        self.chunk = RATE * CHUNK_MS // 1000
        #: how long (real time) :meth:`settle` waits for worker threads at most
        self.thread_wait_s = 0.25
        #: when input sample 0 was captured: chunks are stamped ``origin + samples fed``
        self.origin_ns = clock()
        #: when set, every chunk pushed carries the echo of what the listener played
        self.room: EchoRoom | None = None

    async def settle(self) -> None:
        """Let runnable tasks run, and worker-thread decodes/syntheses come back."""
        deadline = time.monotonic() + self.thread_wait_s
        while True:
            for _ in range(4):
                await asyncio.sleep(0)
            if self.executor.pending == 0 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.0002)
        for _ in range(4):
            await asyncio.sleep(0)

    async def feed(self, audio: NDArray[np.float32]) -> None:
        for i in range(0, len(audio), self.chunk):
            await self.push(audio[i : i + self.chunk])

    async def push(self, chunk: NDArray[np.float32]) -> None:
        self.clock.advance(round(len(chunk) * 1e9 / RATE))
        start, self.samples_fed = self.samples_fed, self.samples_fed + len(chunk)
        if self.room is not None:
            chunk = (chunk + self.room.echo(start, self.samples_fed, self.origin_ns)).astype(np.float32)
        await self.session.push_audio(chunk, self.clock())  # t_ns: capture time of its last sample
        await self.settle()

    async def speak(self, seconds: float) -> None:
        await self.feed(tone(seconds))

    async def quiet(self, seconds: float) -> None:
        await self.feed(silence(seconds))

    async def quiet_until(self, predicate: Callable[[], bool], max_s: float = 30.0) -> float:
        """Feed silence until ``predicate()``; returns the seconds fed."""
        fed = 0.0
        await self.settle()
        while not predicate():
            if fed >= max_s:
                raise AssertionError(f"condition not met after {max_s} s of input")
            await self.push(silence(CHUNK_MS / 1000))
            fed += CHUNK_MS / 1000
        return fed

    async def speak_until(self, predicate: Callable[[], bool], max_s: float = 5.0) -> None:
        fed = 0.0
        while not predicate():
            if fed >= max_s:
                raise AssertionError(f"condition not met after {max_s} s of speech")
            await self.push(tone(CHUNK_MS / 1000))
            fed += CHUNK_MS / 1000

    def t_of_sample(self, sample: int) -> int:
        """The fake-clock time at which input sample ``sample`` was captured."""
        return self.origin_ns + round(sample * 1e9 / RATE)
