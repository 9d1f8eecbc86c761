"""What ``voice-pipeline talk`` is asked to do (its options, its arguments) and its errors.

Shared by the headless mode (:mod:`clients.talk`) and the interactive one
(:mod:`clients.talk_tty`); imports neither. Errors::

    TalkError                   (a VoicePipelineError) the talk client cannot do its job
    └── ServerFailedError       an ``error`` or ``turn.failed`` event, or no reply in time

What goes wrong with the connection itself (unreachable, refused, dropped) is a
:class:`voice_pipeline.connect.ServerSessionError`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from voice_pipeline.errors import VoicePipelineError

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
TOKEN_ENV = "VOICE_PIPELINE_TOKEN"


class TalkError(VoicePipelineError):
    """The talk client could not do its job."""


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
