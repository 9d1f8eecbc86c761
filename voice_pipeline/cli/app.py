"""The top-level parser and ``main``: the subcommands are mounted from their own modules."""

from __future__ import annotations

import argparse
import logging

import voice_pipeline.cli.bench as bench
import voice_pipeline.cli.doctor as doctor
import voice_pipeline.cli.models as models
import voice_pipeline.cli.run as run
import voice_pipeline.cli.serve as serve
import voice_pipeline.cli.talk as talk
from voice_pipeline.cli.common import Handler, offline, stderr
from voice_pipeline.errors import VoicePipelineError

DESCRIPTION = """\
Streaming voice assistant: VAD -> streaming ASR (faster-whisper) -> vLLM ->
streaming TTS (Piper), with a per-stage latency budget ledger.

  voice-pipeline models       prepare and verify the bundled models (once, ~1 min)
  voice-pipeline run          answer the questions spoken in a WAV file
  voice-pipeline serve        talk to it from a browser (WebSocket server + demo page)
  voice-pipeline talk         talk to a running server from the terminal (push-to-talk)
  voice-pipeline bench        load-test a running server: latency per stage, capacity
  voice-pipeline doctor       this machine, the settings chosen for it, an LLM micro-benchmark
"""

#: the subcommands in the order ``--help`` lists them: each module adds its own parser, whose
#: ``handler`` default is the function that runs it (a new subcommand: its module, imported
#: above, and its line here)
SUBCOMMANDS = (
    models.add_parser,
    run.add_parser,
    serve.add_parser,
    talk.add_parser,
    bench.add_parser,
    doctor.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-pipeline", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_parser in SUBCOMMANDS:
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    offline()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command is None:
        parser.print_help()
        return 2
    handler: Handler = args.handler
    try:
        return handler(args)
    except VoicePipelineError as exc:
        stderr(f"voice-pipeline {args.command}: error: {exc}")
        return 1
    except KeyboardInterrupt:
        stderr("interrupted")
        return 130
