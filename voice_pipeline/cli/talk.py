"""``voice-pipeline talk``: the push-to-talk terminal client of a running server (the client
and its arguments are :mod:`clients.talk`; this only mounts it)."""

from __future__ import annotations

import argparse

from voice_pipeline.cli.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "talk",
        help="push-to-talk client of a running `voice-pipeline serve`",
        description="Talk to a running server from the terminal. Interactive: press SPACE or ENTER "
        "to start speaking and again to stop (terminals report no key release, so the key toggles); "
        "pressing it while the assistant speaks interrupts it; Ctrl-C quits. Headless: --input FILE.wav "
        "says the file as one utterance. Audio devices need PortAudio (Debian: libportaudio2).",
    )
    from clients.talk import add_arguments

    add_arguments(p)
    p.set_defaults(handler=cmd_talk)


def cmd_talk(args: argparse.Namespace) -> int:
    from clients.talk import options, talk

    return talk(options(args))
