"""``voice-pipeline talk``: the command-line push-to-talk client (docs/protocol.md).

Two modes:

* **headless** (``--input FILE.wav``): the file is sent as one push-to-talk
  utterance (``ptt.start``, the audio paced in real time, ``ptt.end``), the
  reply is awaited until its ``turn.latency``, ``--output`` saves the reply
  audio and ``--json`` prints every server event as a JSON line.
* **interactive** (a terminal, :mod:`clients.talk_tty`): microphone and
  loudspeaker through sounddevice, SPACE or ENTER toggles recording.

Options and the talk client's own errors: :mod:`clients.talk_options`; the connection's
(unreachable, refused, dropped): :mod:`voice_pipeline.connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from clients.audio_io import FRAME_MS, wire_rate
from clients.talk_options import ServerFailedError, TalkOptions, add_arguments, options
from clients.talkview import Line, Status, TurnView
from voice_pipeline.audio import read_audio, resample, write_audio
from voice_pipeline.cancellation import cancel_and_wait
from voice_pipeline.connect import SessionDroppedError, close_text, close_text_of, open_session
from voice_pipeline.wire.client_messages import Capabilities, PttEnd, PttStart, Start, Stop, pcm16_frame
from voice_pipeline.wire.server_messages import (
    ErrorReported,
    ServerMessage,
    ServerStream,
    TurnFailed,
    TurnLatency,
)

# ------------------------------------------------------------ headless


@dataclass
class HeadlessResult:
    events: list[ServerMessage]
    audio: list[NDArray[np.int16]]
    latency: TurnLatency | None = None


async def _send_file(ws: ClientConnection, audio: NDArray[np.float32], rate_hz: int) -> None:
    """ptt.start, the file in real time, ptt.end, then silence like a live microphone."""
    loop = asyncio.get_running_loop()
    frame = rate_hz * FRAME_MS // 1000
    silence = np.zeros(frame, dtype=np.float32)
    await ws.send(PttStart().serialize())
    t0, n = loop.time(), 0
    with contextlib.suppress(ConnectionClosed):
        for i in range(0, len(audio), frame):
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
            await ws.send(pcm16_frame(audio[i : i + frame]))
        await ws.send(PttEnd().serialize())
        while True:
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
            await ws.send(pcm16_frame(silence))


async def _receive_turn(
    ws: ClientConnection, result: HeadlessResult, on_event: Callable[[ServerMessage], None]
) -> None:
    """Collect events and reply audio until the turn's ``turn.latency``."""
    stream = ServerStream()
    async for data in ws:
        if isinstance(data, bytes):
            if (audio := stream.binary(data)) is not None:
                result.audio.append(audio.pcm)
            continue
        msg = stream.text(data)
        result.events.append(msg)
        on_event(msg)
        match msg:
            case ErrorReported(code=code, message=message):
                raise ServerFailedError(f"server error {code}: {message}")
            case TurnFailed(stage=stage, message=message):
                raise ServerFailedError(f"the turn failed in {stage}: {message}")
            case TurnLatency():
                result.latency = msg
                return
    raise SessionDroppedError(f"the server closed the session: {close_text_of(ws)}", ws.close_code)


async def run_headless(opts: TalkOptions, out: TextIO, err: TextIO) -> int:
    assert opts.input is not None
    audio, file_rate = read_audio(opts.input)
    rate = wire_rate(file_rate)
    audio = resample(audio, file_rate, rate)
    ws, ready = await open_session(opts.url, Start(rate, rate, Capabilities()), opts.token)
    view = TurnView(ready.budgets_ms, colour=False)
    result = HeadlessResult(events=[ready], audio=[])
    if opts.json:
        print(json.dumps(ready.to_json()), file=out, flush=True)

    def on_event(msg: ServerMessage) -> None:
        if opts.json:
            print(json.dumps(msg.to_json()), file=out, flush=True)
            return
        for update in view.event(msg):
            if isinstance(update, Line):
                print(update.text, file=out, flush=True)

    sender = asyncio.create_task(_send_file(ws, audio, rate), name="talk-send-file")
    try:
        async with asyncio.timeout(len(audio) / rate + opts.timeout_s):
            await _receive_turn(ws, result, on_event)
    except TimeoutError as exc:
        raise ServerFailedError(f"no reply within {opts.timeout_s:g} s of the end of the input") from exc
    except ConnectionClosed as exc:
        raise SessionDroppedError(f"the server closed the session: {close_text(exc)}") from exc
    finally:
        await cancel_and_wait(sender)
        with contextlib.suppress(ConnectionClosed):
            await ws.send(Stop().serialize())
        await ws.close()
    if opts.output is not None:
        pcm = np.concatenate(result.audio) if result.audio else np.zeros(0, dtype=np.int16)
        write_audio(opts.output, pcm, ready.output_rate_hz)
        print(f"wrote {opts.output} ({len(pcm) / ready.output_rate_hz:.1f} s)", file=err)
    return 0


# ------------------------------------------------------------ entry point


def talk(opts: TalkOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``voice-pipeline talk``; raises a :class:`~voice_pipeline.errors.VoicePipelineError`."""
    out = out or sys.stdout
    err = err or sys.stderr
    if opts.list_devices:
        from clients.audio_io import format_devices, query_devices

        print(format_devices(query_devices()), file=out)
        return 0
    if opts.input is not None:
        return asyncio.run(run_headless(opts, out, err))
    from clients.talk_tty import run_interactive

    return asyncio.run(run_interactive(opts, out, err))


__all__ = ["Status", "TalkOptions", "add_arguments", "options", "talk"]
