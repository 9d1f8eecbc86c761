"""``voice-pipeline talk``: the command-line push-to-talk client (docs/protocol.md).

Two modes:

* **headless** (``--input FILE.wav``): the file is sent as one push-to-talk
  utterance (``ptt.start``, the audio paced in real time, ``ptt.end``), the
  reply is awaited until its ``turn.latency``, ``--output`` saves the reply
  audio and ``--json`` prints every server event as a JSON line.
* **interactive** (a terminal, :mod:`clients.talk_tty`): microphone and
  loudspeaker through sounddevice, SPACE or ENTER toggles recording.

Errors (all :class:`TalkError`, a :class:`~voice_pipeline.errors.VoicePipelineError`)::

    TalkError
    ├── ServerUnreachableError   nothing answered at the URL (the URL is in the message)
    ├── ServerRefusedError       the server closed the connection (code and reason shown)
    └── ServerFailedError        an ``error`` or ``turn.failed`` event, or no reply in time
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from clients.audio_io import FRAME_MS, wire_rate
from clients.talkview import Line, Status, TurnView
from voice_pipeline.audio import read_audio, resample, to_int16, write_audio
from voice_pipeline.errors import VoicePipelineError
from voice_pipeline.tasks import cancel_and_wait

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
TOKEN_ENV = "VOICE_PIPELINE_TOKEN"
Msg = dict[str, Any]


class TalkError(VoicePipelineError):
    """The talk client could not do its job."""


class ServerUnreachableError(TalkError):
    pass


class ServerRefusedError(TalkError):
    pass


class ServerFailedError(TalkError):
    pass


@dataclass(frozen=True, slots=True)
class TalkOptions:
    url: str = DEFAULT_URL
    input: Path | None = None
    output: Path | None = None
    json: bool = False
    input_device: str | None = None
    output_device: str | None = None
    list_devices: bool = False
    mic_file: Path | None = None
    timeout_s: float = 120.0
    #: sent as ``Authorization: Bearer <token>`` (the server's ``--token``)
    token: str | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url", default=DEFAULT_URL, help="the server's WebSocket URL (default: %(default)s; wss:// for TLS)"
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"the server's token, sent as 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV})",
    )
    p.add_argument("--input", "-i", type=Path, metavar="FILE.wav", help="headless: say FILE as one utterance")
    p.add_argument("--output", "-o", type=Path, metavar="FILE.wav", help="headless: save the reply audio")
    p.add_argument("--json", action="store_true", help="headless: print the events as JSON lines")
    p.add_argument("--input-device", metavar="DEV", help="microphone: index or part of its name")
    p.add_argument("--output-device", metavar="DEV", help="loudspeaker: index or part of its name")
    p.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    p.add_argument("--mic-file", type=Path, metavar="FILE.wav", help=argparse.SUPPRESS)  # tests
    p.add_argument(
        "--timeout", type=float, default=120.0, metavar="S", help="headless: wait at most S for the reply"
    )


def options(args: argparse.Namespace) -> TalkOptions:
    return TalkOptions(
        url=args.url,
        input=args.input,
        output=args.output,
        json=args.json,
        input_device=args.input_device,
        output_device=args.output_device,
        list_devices=args.list_devices,
        mic_file=args.mic_file,
        timeout_s=args.timeout,
        token=args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None,
    )


# ------------------------------------------------------------ connection


async def open_session(
    url: str, sample_rate: int, output_rate: int, *, reports: bool, token: str | None = None
) -> tuple[ClientConnection, Msg]:
    """Connect and start a session; the connection and the ``ready`` event."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        ws = await connect(url, compression=None, max_size=None, open_timeout=10, additional_headers=headers)
    except InvalidURI as exc:
        raise TalkError(f"not a WebSocket URL: {url}") from exc
    except InvalidStatus as exc:
        status = exc.response.status_code
        hint = {401: " (wrong or missing --token)", 429: " (too many new sessions; try again later)"}
        raise ServerRefusedError(
            f"server at {url} refused the connection: HTTP {status}{hint.get(status, '')}"
        ) from exc
    except InvalidHandshake as exc:
        raise ServerRefusedError(f"server at {url} refused the connection: {exc}") from exc
    except (OSError, TimeoutError) as exc:
        raise ServerUnreachableError(f"server not reachable at {url}: {exc}") from exc
    start = {
        "type": "start",
        "version": 1,
        "sample_rate": sample_rate,
        "format": "pcm16",
        "output_sample_rate": output_rate,
        "capabilities": {"playback_reports": reports, "echo_cancellation": False},
    }
    try:
        await ws.send(json.dumps(start))
        while True:
            data = await ws.recv()
            if isinstance(data, str):
                msg = json.loads(data)
                if msg.get("type") == "ready":
                    return ws, msg
                if msg.get("type") == "error":
                    await ws.close()
                    raise ServerFailedError(f"server refused the session: {msg['code']}: {msg['message']}")
    except ConnectionClosed as exc:
        raise ServerRefusedError(f"server at {url} refused the session: {close_text(exc)}") from exc


def close_text(exc: ConnectionClosed) -> str:
    if exc.rcvd is None:
        return "connection lost without a close frame"
    return f"closed with {exc.rcvd.code}: {exc.rcvd.reason or '(no reason)'}"


def pcm_frame(samples: NDArray[np.float32]) -> bytes:
    return to_int16(samples).astype("<i2").tobytes()


# ------------------------------------------------------------ headless


@dataclass
class HeadlessResult:
    events: list[Msg]
    audio: list[NDArray[np.int16]]
    latency: Msg | None = None


async def _send_file(ws: ClientConnection, audio: NDArray[np.float32], rate_hz: int) -> None:
    """ptt.start, the file in real time, ptt.end, then silence like a live microphone."""
    loop = asyncio.get_running_loop()
    frame = rate_hz * FRAME_MS // 1000
    silence = np.zeros(frame, dtype=np.float32)
    await ws.send(json.dumps({"type": "ptt.start"}))
    t0, n = loop.time(), 0
    with contextlib.suppress(ConnectionClosed):
        for i in range(0, len(audio), frame):
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
            await ws.send(pcm_frame(audio[i : i + frame]))
        await ws.send(json.dumps({"type": "ptt.end"}))
        while True:
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - loop.time()))
            await ws.send(pcm_frame(silence))


async def _receive_turn(
    ws: ClientConnection, result: HeadlessResult, on_event: Callable[[Msg], None]
) -> None:
    """Collect events and reply audio until the turn's ``turn.latency``."""
    header: Msg | None = None
    async for data in ws:
        if isinstance(data, bytes):
            if header is not None:
                result.audio.append(np.frombuffer(data, dtype="<i2").astype(np.int16))
            header = None
            continue
        msg = json.loads(data)
        result.events.append(msg)
        on_event(msg)
        match msg.get("type"):
            case "assistant.audio":
                header = msg
            case "error":
                raise ServerFailedError(f"server error {msg['code']}: {msg['message']}")
            case "turn.failed":
                raise ServerFailedError(f"the turn failed in {msg['stage']}: {msg['message']}")
            case "turn.latency":
                result.latency = msg
                return
    raise ServerRefusedError(f"the server closed the session: {ws.close_code} {ws.close_reason or ''}")


async def run_headless(opts: TalkOptions, out: TextIO, err: TextIO) -> int:
    assert opts.input is not None
    audio, file_rate = read_audio(opts.input)
    rate = wire_rate(file_rate)
    audio = resample(audio, file_rate, rate)
    ws, ready = await open_session(opts.url, rate, rate, reports=False, token=opts.token)
    view = TurnView(ready.get("budgets", {}), colour=False)
    result = HeadlessResult(events=[ready], audio=[])
    if opts.json:
        print(json.dumps(ready), file=out, flush=True)

    def on_event(msg: Msg) -> None:
        if opts.json:
            print(json.dumps(msg), file=out, flush=True)
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
        raise ServerRefusedError(f"the server closed the session: {close_text(exc)}") from exc
    finally:
        await cancel_and_wait(sender)
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "stop"}))
        await ws.close()
    if opts.output is not None:
        pcm = np.concatenate(result.audio) if result.audio else np.zeros(0, dtype=np.int16)
        write_audio(opts.output, pcm, int(ready["output_sample_rate"]))
        print(f"wrote {opts.output} ({len(pcm) / int(ready['output_sample_rate']):.1f} s)", file=err)
    return 0


# ------------------------------------------------------------ entry points


def talk(opts: TalkOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``voice-pipeline talk``; raises :class:`TalkError` (or another VoicePipelineError)."""
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


def main(argv: list[str] | None = None) -> int:
    """``python -m clients.talk``: the same as ``voice-pipeline talk``."""
    from voice_pipeline.cli import main as cli_main

    return cli_main(["talk", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Status", "TalkOptions", "add_arguments", "main", "options", "talk"]
