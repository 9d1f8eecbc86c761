"""Audio in and out for ``voice-pipeline talk``: sounddevice (PortAudio) or a file.

* :class:`Player` is the pure playout queue: reply audio in, samples out, the
  count played so far, and ``clear(turn_id)`` for barge-in. Thread-safe (the
  PortAudio callback pulls from it).
* :func:`open_microphone` / :func:`open_speaker` open the devices at their
  native rate; the session's wire rate is that rate clamped to 8-48 kHz and
  soxr converts between them where they differ.
* :class:`FileMicrophone` and :class:`ClockSpeaker` stand in for the devices
  (``--mic-file``): the interactive UI runs without any sound card.

``sounddevice`` is imported only when a device is opened or listed: it raises
``OSError`` at import when the PortAudio library (Debian: ``libportaudio2``) is
missing.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import soxr
from numpy.typing import NDArray

from voice_pipeline.audio import read_audio
from voice_pipeline.errors import VoicePipelineError

Float32 = NDArray[np.float32]
FRAME_MS = 20
MIN_RATE_HZ, MAX_RATE_HZ = 8000, 48000
NO_INPUT = "no input device found; use --input FILE.wav"
NO_OUTPUT = "no output device found; use --output FILE.wav"


class AudioDeviceError(VoicePipelineError):
    """No usable audio device (or PortAudio itself is missing)."""


def wire_rate(native_hz: int) -> int:
    return min(MAX_RATE_HZ, max(MIN_RATE_HZ, native_hz))


def _sounddevice() -> Any:
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: PortAudio library not found
        raise AudioDeviceError(f"{NO_INPUT} (sounddevice unavailable: {exc}; Debian: libportaudio2)") from exc
    return sounddevice


DeviceLister = Callable[[], list[dict[str, Any]]]


def query_devices() -> list[dict[str, Any]]:
    return [dict(d) for d in _sounddevice().query_devices()]


def pick_device(devices: list[dict[str, Any]], wanted: str | None, kind: str) -> tuple[int, int]:
    """(index, native rate) of the ``kind`` ("input"/"output") device: ``wanted`` is an index or
    a part of a name; ``None`` = the first device with channels of that kind."""
    key = f"max_{kind}_channels"
    usable = [(i, d) for i, d in enumerate(devices) if int(d.get(key, 0)) > 0]
    if wanted is not None:
        usable = [(i, d) for i, d in usable if wanted == str(i) or wanted.lower() in str(d["name"]).lower()]
    if not usable:
        missing = NO_INPUT if kind == "input" else NO_OUTPUT
        raise AudioDeviceError(missing if wanted is None else f"no {kind} device matches {wanted!r}")
    index, dev = usable[0]
    return index, int(dev.get("default_samplerate") or 48000)


def format_devices(devices: list[dict[str, Any]]) -> str:
    lines = []
    for i, d in enumerate(devices):
        lines.append(
            f"{i:3d}  {d['name']}  (in {d.get('max_input_channels', 0)}, "
            f"out {d.get('max_output_channels', 0)}, {float(d.get('default_samplerate', 0)):.0f} Hz)"
        )
    return "\n".join(lines) if lines else "no audio devices found"


class Player:
    """The playout queue: what is buffered, what has been played (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[int, Float32]] = deque()
        self.played = 0

    def add(self, turn_id: int, samples: Float32) -> None:
        with self._lock:
            self._queue.append((turn_id, samples))

    def clear(self, turn_id: int | None = None) -> int:
        """Drop the queued audio of ``turn_id`` (all if None); the count played at that moment."""
        with self._lock:
            self._queue = deque(x for x in self._queue if turn_id is not None and x[0] != turn_id)
            return self.played

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def pull(self, n: int) -> Float32:
        """The next ``n`` samples (silence-padded when the queue runs dry)."""
        out = np.zeros(n, dtype=np.float32)
        got = 0
        with self._lock:
            while got < n and self._queue:
                turn, chunk = self._queue[0]
                take = min(n - got, len(chunk))
                out[got : got + take] = chunk[:take]
                got += take
                if take == len(chunk):
                    self._queue.popleft()
                else:
                    self._queue[0] = (turn, chunk[take:])
            self.played += got
        return out


class Microphone(Protocol):
    rate_hz: int

    @property
    def finished(self) -> bool:
        """A file-backed microphone has said all of its file (a device: never)."""

    async def read(self) -> Float32: ...
    def rewind(self) -> None: ...
    def close(self) -> None: ...


class Speaker(Protocol):
    rate_hz: int
    player: Player

    def close(self) -> None: ...


class _Converter:
    def __init__(self, from_hz: int, to_hz: int) -> None:
        self._stream = soxr.ResampleStream(from_hz, to_hz, 1, dtype="float32") if from_hz != to_hz else None

    def __call__(self, samples: Float32) -> Float32:
        if self._stream is None:
            return samples
        return np.asarray(self._stream.resample_chunk(samples), dtype=np.float32)


class DeviceMicrophone:
    """A PortAudio input stream at the device's native rate, delivered at the wire rate."""

    def __init__(self, device: int, native_hz: int) -> None:
        sd = _sounddevice()
        self.rate_hz = wire_rate(native_hz)
        self._convert = _Converter(native_hz, self.rate_hz)
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Float32] = asyncio.Queue(maxsize=100)

        def callback(indata: Any, frames: int, time: Any, status: Any) -> None:
            block = np.ascontiguousarray(indata[:, 0], dtype=np.float32).copy()
            self._loop.call_soon_threadsafe(self._put, block)

        self._stream = sd.InputStream(
            device=device,
            samplerate=native_hz,
            channels=1,
            dtype="float32",
            blocksize=native_hz * FRAME_MS // 1000,
            callback=callback,
        )
        self._stream.start()

    def _put(self, block: Float32) -> None:
        if not self._queue.full():  # a stalled sender drops microphone blocks, never blocks PortAudio
            self._queue.put_nowait(block)

    async def read(self) -> Float32:
        return self._convert(await self._queue.get())

    @property
    def finished(self) -> bool:
        return False

    def rewind(self) -> None:
        pass

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()


class DeviceSpeaker:
    """A PortAudio output stream playing a :class:`Player` at the device's native rate."""

    def __init__(self, device: int, native_hz: int) -> None:
        sd = _sounddevice()
        self.rate_hz = wire_rate(native_hz)
        self.player = Player()
        convert = _Converter(self.rate_hz, native_hz)
        pending: list[Float32] = [np.zeros(0, dtype=np.float32)]
        ratio = self.rate_hz / native_hz

        def callback(outdata: Any, frames: int, time: Any, status: Any) -> None:
            buf = pending[0]
            while len(buf) < frames:
                buf = np.concatenate([buf, convert(self.player.pull(max(1, round(frames * ratio))))])
            outdata[:, 0] = buf[:frames]
            pending[0] = buf[frames:]

        self._stream = sd.OutputStream(
            device=device, samplerate=native_hz, channels=1, dtype="float32", callback=callback
        )
        self._stream.start()

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()


class FileMicrophone:
    """A microphone that says a file's audio each time recording starts, else silence."""

    def __init__(self, path: Path) -> None:
        audio, rate = read_audio(path)
        self.rate_hz = wire_rate(rate)
        self._audio = _Converter(rate, self.rate_hz)(audio)
        self._pos = len(self._audio)
        self._frame = self.rate_hz * FRAME_MS // 1000
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._n = 0

    async def read(self) -> Float32:
        self._n += 1
        await asyncio.sleep(max(0.0, self._t0 + self._n * FRAME_MS / 1000 - self._loop.time()))
        chunk = self._audio[self._pos : self._pos + self._frame]
        self._pos += self._frame
        if len(chunk) < self._frame:
            chunk = np.concatenate([chunk, np.zeros(self._frame - len(chunk), dtype=np.float32)])
        return chunk

    @property
    def finished(self) -> bool:
        return self._pos >= len(self._audio)

    def rewind(self) -> None:
        self._pos = 0

    def close(self) -> None:
        pass


class ClockSpeaker:
    """A speaker without a sound card: plays its :class:`Player` in real time, into nothing."""

    def __init__(self, rate_hz: int) -> None:
        self.rate_hz = rate_hz
        self.player = Player()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="clock-speaker")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        t0, n = loop.time(), 0
        frame = self.rate_hz * FRAME_MS // 1000
        while True:
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
            self.player.pull(frame)

    def close(self) -> None:
        self._task.cancel()
