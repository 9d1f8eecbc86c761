"""Interactive ``voice-pipeline talk``: push-to-talk in a terminal.

Terminals report key presses but never key releases, so "hold SPACE" cannot be
detected reliably: SPACE or ENTER **toggles** recording (press to start
speaking, press again to stop). The client sends ``ptt.start``/``ptt.end``, so
the server ends the turn at once. Pressing the key while the assistant speaks
sends ``interrupt``, drops the queued reply audio and starts the next utterance.
Ctrl-C (or ``q``) sends ``stop`` and quits.

The terminal is put in cbreak mode (no echo, key by key) and always restored,
also on Ctrl-C and errors. The microphone is sent continuously, as the protocol
asks, but as silence while the key is not pressed: the server's own VAD never
takes a turn by itself. After a dropped connection the client reconnects with
exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from typing import TextIO

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from clients.audio_io import (
    ClockSpeaker,
    DeviceMicrophone,
    DeviceSpeaker,
    FileMicrophone,
    Microphone,
    Speaker,
    pick_device,
    query_devices,
)
from clients.talk_options import TalkError, TalkOptions
from clients.talkview import Line, Status, TurnView, level_meter
from voice_pipeline.connect import (
    ServerSessionError,
    SessionDroppedError,
    close_text_of,
    dropped,
    open_session,
)
from voice_pipeline.wire.client_messages import (
    Capabilities,
    ClientMessage,
    Interrupt,
    Playback,
    PttEnd,
    PttStart,
    Start,
    Stop,
    pcm16_frame,
)
from voice_pipeline.wire.server_messages import (
    AssistantText,
    AudioClear,
    Ready,
    ReplyInterrupted,
    ReplyResumed,
    ServerStream,
    TurnContinued,
    TurnLatency,
)

REPORT_S = 0.1
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
TOGGLE_KEYS = (" ", "\r", "\n")
QUIT_KEYS = ("q", "\x03")


def open_audio(opts: TalkOptions) -> tuple[Microphone, Speaker]:
    if opts.mic_file is not None:
        file_mic = FileMicrophone(opts.mic_file)
        return file_mic, ClockSpeaker(file_mic.rate_hz)
    devices = query_devices()
    in_dev, in_hz = pick_device(devices, opts.input_device, "input")
    out_dev, out_hz = pick_device(devices, opts.output_device, "output")
    mic = DeviceMicrophone(in_dev, in_hz)
    try:
        return mic, DeviceSpeaker(out_dev, out_hz)
    except BaseException:
        mic.close()
        raise


@contextlib.contextmanager
def cbreak(fd: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Screen:
    """Printed lines scroll up; one status line (meter + live text) is redrawn below them."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.meter = ""
        self.text = ""

    def line(self, text: str) -> None:
        self.out.write(f"\r\x1b[K{text}\r\n")
        self.text = ""
        self._draw()

    def status(self, text: str | None = None, meter: str | None = None) -> None:
        if text is not None:
            self.text = text
        if meter is not None:
            self.meter = meter
        self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 24)).columns
        shown = " ".join(s for s in (self.meter, self.text) if s)
        self.out.write("\r\x1b[K" + shown[: width - 1])
        self.out.flush()


class _Session:
    """One connection: microphone out, events and reply audio in, keys handled."""

    def __init__(
        self,
        ws: ClientConnection,
        ready: Ready,
        mic: Microphone,
        speaker: Speaker,
        screen: Screen,
        colour: bool,
    ) -> None:
        self.ws = ws
        self.mic = mic
        self.speaker = speaker
        self.screen = screen
        self.view = TurnView(ready.budgets_ms, colour=colour)
        self.recording = False
        self.replying: set[int] = set()

    async def send(self, msg: ClientMessage) -> None:
        await self.ws.send(msg.serialize())

    async def toggle(self) -> None:
        if self.recording:
            self.recording = False
            await self.send(PttEnd())
            self.screen.status("", meter="")
            return
        if self.replying or self.speaker.player.busy:
            await self.send(Interrupt())
            self.speaker.player.clear()
        self.mic.rewind()
        self.recording = True
        await self.send(PttStart())
        self.screen.status("recording (press again to stop)", meter="")

    async def microphone(self) -> None:
        while True:
            block = await self.mic.read()
            if self.recording:
                meter = (
                    "REC (end of the mic file)"
                    if self.mic.finished
                    else "REC " + level_meter(float(np.abs(block).max(initial=0.0)))
                )
                self.screen.status(meter=meter)
                await self.ws.send(pcm16_frame(block))
            else:
                await self.ws.send(pcm16_frame(np.zeros(len(block), dtype=np.float32)))

    async def reports(self) -> None:
        last = -1
        while True:
            await asyncio.sleep(REPORT_S)
            played = self.speaker.player.played
            if played != last:
                await self.send(Playback(played))
                last = played

    async def receive(self) -> None:
        stream = ServerStream()
        async for data in self.ws:
            if isinstance(data, bytes):
                if (audio := stream.binary(data)) is not None:
                    self.speaker.player.add(audio.turn_id, audio.pcm.astype(np.float32) / 32768.0)
                continue
            msg = stream.text(data)
            match msg:
                case AudioClear(turn_id=tid):
                    played = self.speaker.player.clear(tid)
                    await self.send(Playback(played, cleared=tid))
                case AssistantText(turn_id=tid) | ReplyResumed(turn_id=tid):
                    self.replying.add(tid)
                case ReplyInterrupted(turn_id=tid) | TurnLatency(turn_id=tid) | TurnContinued(turn_id=tid):
                    self.replying.discard(tid)
            for update in self.view.event(msg):
                if isinstance(update, Line):
                    self.screen.line(update.text)
                elif isinstance(update, Status):
                    self.screen.status(update.text)


async def _run_session(session: _Session, keys: asyncio.Queue[str]) -> bool:
    """Run until the user quits (True) or the connection drops (:class:`SessionDroppedError`)."""

    async def key_loop() -> None:
        while True:
            key = await keys.get()
            if key in QUIT_KEYS:
                return
            if key in TOGGLE_KEYS:
                await session.toggle()

    tasks = [
        asyncio.create_task(session.microphone(), name="talk-mic"),
        asyncio.create_task(session.reports(), name="talk-reports"),
        asyncio.create_task(session.receive(), name="talk-receive"),
        asyncio.create_task(key_loop(), name="talk-keys"),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        exc = task.exception()
        if isinstance(exc, ConnectionClosed):
            raise dropped(exc) from exc
        if exc is not None:
            raise exc
    if tasks[3] in done:  # the user quit
        with contextlib.suppress(ConnectionClosed):
            await session.send(Stop())
            await session.ws.wait_closed()
        return True
    raise SessionDroppedError(close_text_of(session.ws), session.ws.close_code)


async def run_interactive(opts: TalkOptions, out: TextIO, err: TextIO) -> int:
    mic, speaker = open_audio(opts)  # "no input device found; use --input FILE.wav"
    try:
        if not sys.stdin.isatty():
            raise TalkError("talk needs a terminal for the keys; use --input FILE.wav without one")
        return await _interactive(opts, mic, speaker, out)
    finally:
        mic.close()
        speaker.close()


async def _interactive(opts: TalkOptions, mic: Microphone, speaker: Speaker, out: TextIO) -> int:
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    keys: asyncio.Queue[str] = asyncio.Queue()
    screen = Screen(out)
    colour = out.isatty()

    def on_key() -> None:
        for ch in os.read(fd, 64).decode(errors="replace"):
            keys.put_nowait(ch)

    with cbreak(fd):
        loop.add_reader(fd, on_key)
        loop.add_signal_handler(signal.SIGINT, keys.put_nowait, "\x03")
        try:
            attempt = 0
            while True:
                start = Start(mic.rate_hz, speaker.rate_hz, Capabilities(playback_reports=True))
                try:
                    ws, ready = await open_session(opts.url, start, opts.token)
                except ServerSessionError as exc:
                    if attempt == 0 or not exc.retryable:
                        raise
                    delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                    screen.line(f"{exc}; retrying in {delay:g} s")
                    attempt += 1
                    if await _quit_within(keys, delay):
                        return 0
                    continue
                attempt = 0
                screen.line(
                    f"connected to {opts.url}: press SPACE or ENTER to talk, again to stop; Ctrl-C quits"
                )
                session = _Session(ws, ready, mic, speaker, screen, colour)
                try:
                    if await _run_session(session, keys):
                        screen.line("bye")
                        return 0
                except SessionDroppedError as exc:
                    speaker.player.clear()
                    attempt = 1
                    screen.line(f"connection lost ({exc}); reconnecting")
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_reader(fd)
            out.write("\r\n")
            out.flush()


async def _quit_within(keys: asyncio.Queue[str], delay_s: float) -> bool:
    """Wait ``delay_s``; True if the user asked to quit meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay_s):
            while True:
                if await keys.get() in QUIT_KEYS:
                    return True
    return False
