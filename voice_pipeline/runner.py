"""``voice-pipeline run``: stream a WAV file through the pipeline like a live microphone.

The input is fed in ``audio.frame_ms`` chunks, in real time by default (each
chunk is pushed at the moment its last sample would have been captured), or
as fast as the pipeline takes it with ``fast=True`` (feeding then pauses while a
reply is produced, and while the evidence of a pause -- its speculative
transcript, the turn model -- is computed, so the output timeline is compressed:
use real time to check latencies on it). Fast mode cannot continue a turn: the
input waits for each reply, so speech after an end of turn is always a new turn.

The output is what a listener would have heard, on the input's timeline, at
the reply audio's rate: each reply chunk starts playing at the later of the
moment it left the pipeline and the end of the chunk before it, and a flush
(barge-in) silences it from that moment (:class:`voice_pipeline.playout.Playout`).
Mixing input and output gives the conversation, and the output's timeline is an
independent check of the ledger's figures.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr
from numpy.typing import NDArray

from llm.base import ChatMessage
from voice_pipeline import events as ev
from voice_pipeline.audio import finite_audio, read_audio, resample, write_audio
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.edge import SessionScope
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.playout import Playout

#: silence fed after the input ends, at most, while waiting for the last reply
MAX_TAIL_S = 60.0


class MediaClock:
    """Maps monotonic time to a position on the input's timeline (seconds)."""

    def __init__(self, realtime: bool, rate_hz: int, t0_ns: int) -> None:
        self.realtime = realtime
        self.rate_hz = rate_hz
        self.t0_ns = t0_ns
        self._times: list[int] = [t0_ns]
        self._fed: list[int] = [0]

    def fed(self, t_ns: int, samples_fed: int) -> None:
        if self.realtime:
            return  # real time needs no history (and an hour of it would be 180k entries)
        self._times.append(t_ns)
        self._fed.append(samples_fed)

    def seconds(self, t_ns: int) -> float:
        if self.realtime:
            return max(0.0, (t_ns - self.t0_ns) / 1e9)
        i = bisect.bisect_right(self._times, t_ns) - 1
        return self._fed[max(i, 0)] / self.rate_hz


class FileTransport:
    """A simulated listener: plays reply audio into a :class:`Playout` on the media clock."""

    def __init__(self, output_rate_hz: int, clock: MediaClock, on_event: Callable[[ev.Event], None]) -> None:
        self.output_rate_hz = output_rate_hz
        self.playout = Playout(output_rate_hz)
        self._clock = clock
        self._on_event = on_event

    def _pos(self) -> int:
        return round(self._clock.seconds(now_ns()) * self.output_rate_hz)

    def emit(self, event: ev.Event) -> None:
        self._on_event(event)

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        self.playout.send(turn_id, pcm, self._pos())

    def clear(self, turn_id: int) -> None:
        self.playout.clear(turn_id, self._pos())

    def played_samples(self, turn_id: int) -> int:
        return self.playout.played(turn_id, self._pos())

    async def drain(self, turn_id: int) -> None:
        if not self._clock.realtime:
            return  # the fast timeline is virtual: playback takes no wall time
        left = (self.playout.end_of(turn_id) - self._pos()) / self.output_rate_hz
        if left > 0:
            await asyncio.sleep(left)


@dataclass(frozen=True, slots=True)
class EchoPath:
    """A simulated acoustic echo: the listener's audio, attenuated and delayed."""

    gain_db: float = -6.0
    delay_ms: float = 120.0


class _Room:
    """Mixes the playout back into the input at the echo path's gain and delay."""

    def __init__(self, path: EchoPath, playout: Playout, out_rate: int, in_rate: int) -> None:
        self._gain = float(10 ** (path.gain_db / 20))
        self._delay = round(path.delay_ms * in_rate / 1000)
        self._playout = playout
        self._ratio = out_rate / in_rate
        self._stream = soxr.ResampleStream(out_rate, in_rate, 1, dtype="float32", quality="HQ")
        self._out_pos = 0
        self._pending = np.zeros(0, dtype=np.float32)

    def echo(self, start: int, end: int) -> NDArray[np.float32]:
        """Echo for input samples [start, end): what played ``delay`` samples earlier."""
        want_end = round((end - self._delay) * self._ratio)
        if want_end > self._out_pos:
            span = self._playout.window(self._out_pos, want_end).astype(np.float32) / 32768.0
            self._out_pos = want_end
            self._pending = np.concatenate([self._pending, self._stream.resample_chunk(span)])
        n = end - start
        got, self._pending = self._pending[:n], self._pending[n:]
        if len(got) < n:
            got = np.concatenate([np.zeros(n - len(got), dtype=np.float32), got])
        return (got * self._gain).astype(np.float32)


@dataclass(frozen=True, slots=True)
class RunResult:
    records: tuple[TurnRecord, ...]
    turns: list[dict[str, object]]  # JSON-ready, marks on the input timeline (ms)
    summary: dict[str, dict[str, float]]
    output: NDArray[np.int16]
    output_rate_hz: int
    input_s: float
    history: tuple[ChatMessage, ...] = ()


async def run_file(
    engines: Engines,
    cfg: Config,
    input_path: Path,
    *,
    realtime: bool = True,
    on_event: Callable[[ev.Event], None] = lambda e: None,
) -> RunResult:
    """Stream ``input_path`` through a fresh session and return what happened."""
    raw, in_rate = read_audio(input_path)
    return await run_audio(engines, cfg, raw, in_rate, realtime=realtime, on_event=on_event)


async def run_audio(
    engines: Engines,
    cfg: Config,
    raw: NDArray[np.float32],
    in_rate: int,
    *,
    realtime: bool = True,
    on_event: Callable[[ev.Event], None] = lambda e: None,
    echo: EchoPath | None = None,
) -> RunResult:
    """Stream ``raw`` through a fresh session. ``echo`` simulates a loudspeaker next to the
    microphone: what the listener plays comes back into the input (real time only)."""
    rate = cfg.audio.pipeline_rate_hz
    audio = resample(finite_audio(raw), in_rate, rate)  # never a NaN into the resampler and VAD
    out_rate = cfg.audio.output_rate_hz or engines.tts.sample_rate_hz
    frame = rate * cfg.audio.frame_ms // 1000
    t0 = now_ns()
    clock = MediaClock(realtime, rate, t0)
    completed: list[TurnRecord] = []  # every turn (the session's ledger keeps only the latest)

    def observe(event: ev.Event) -> None:
        if isinstance(event, ev.TurnCompleted):
            completed.append(event.record)
        on_event(event)

    transport = FileTransport(out_rate, clock, observe)
    scope = SessionScope(engines, cfg)
    session = scope.open(transport)
    tail = np.zeros(frame, dtype=np.float32)
    room = _Room(echo, transport.playout, out_rate, rate) if echo is not None and realtime else None
    fed = 0
    max_fed = len(audio) + int(MAX_TAIL_S * rate)
    try:
        while fed < max_fed:
            chunk = audio[fed : fed + frame] if fed < len(audio) else tail
            if len(chunk) < frame:
                chunk = np.concatenate([chunk, tail[: frame - len(chunk)]])
            fed += frame
            if realtime:
                due = t0 + round(fed * 1e9 / rate)
                delay = (due - now_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                t_ns = due
            else:
                t_ns = now_ns()
            clock.fed(t_ns, fed)
            if room is not None:
                chunk = chunk + room.echo(fed - frame, fed)
            await session.push_audio(chunk, t_ns)
            if not realtime:
                await session.wait_evidence()  # the models' answers take no media time either
                await session.wait_idle_reply()
            if fed >= len(audio) and not session.busy:
                break
        await session.wait_idle()
    finally:
        await scope.aclose()
    records = tuple(completed)
    turns = [r.as_dict(timeline={k: clock.seconds(v) * 1000 for k, v in r.marks_ns.items()}) for r in records]
    out_len = round(len(audio) / rate * out_rate)
    return RunResult(
        records,
        turns,
        session.ledger.summary(),
        transport.playout.render(out_len),
        out_rate,
        len(audio) / rate,
        tuple(session.history),
    )


def write_report(path: Path, result: RunResult, input_path: Path | None) -> None:
    doc = {
        "schema": "voice-pipeline.run/1",
        "input": str(input_path) if input_path else None,
        "input_s": round(result.input_s, 3),
        "output_rate_hz": result.output_rate_hz,
        "turns": result.turns,
        "summary": result.summary,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def write_output(path: Path, result: RunResult) -> None:
    write_audio(path, result.output, result.output_rate_hz)
