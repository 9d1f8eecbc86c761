"""``voice-pipeline bench``: the command line (argparse stays here; the library gets a
:class:`~voice_pipeline.bench.run.BenchOptions`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from voice_pipeline.bench.errors import BenchError
from voice_pipeline.bench.options import BenchOptions
from voice_pipeline.errors import VoicePipelineError

if TYPE_CHECKING:
    from voice_pipeline.bench.run import BenchResult

DEFAULT_PATHS = {"ws": "/ws", "twilio": "/twilio"}

DESCRIPTION = """\
Load-test a running `voice-pipeline serve`: N simulated callers, each speaking
real speech at real-time pace (20 ms frames), listening to the replies and
interrupting a share of them, over the WebSocket protocol (/ws) or as Twilio
Media Streams (/twilio). Measures at the client, at the wire:

  voice-to-voice  end of the caller's speech -> first voiced reply audio received
  barge-in stop   onset of the interrupting speech -> nothing more of the reply
                  can be heard (its last audio or its audio.clear, the later)

and collects the server's per-stage latency records (/ws), its CPU and memory
(/metrics). Prints p50/p95/p99 per stage, turns per second, server CPU (a
warning past 70 %), and stages over budget in more than 5 % of turns.
Progress goes to stderr. Seeded: the same --seed says the same things at the
same moments. See docs/bench.md.
"""

EPILOG = """\
examples:
  voice-pipeline bench --sessions 2 --turns 5
  voice-pipeline bench --ramp --max-sessions 8 --json bench.json --html bench.html
  voice-pipeline bench --protocol twilio --url ws://127.0.0.1:8765/twilio --token s3cret
  voice-pipeline bench --wav-dir my_questions/ --interrupt-share 0
"""


class ArgumentsError(BenchError):
    """The command line cannot be used (exit status 2)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="load-test a running server with simulated callers (latency, capacity)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--url",
        metavar="URL",
        help="the server's voice endpoint (default: ws://127.0.0.1:8765/ws; /twilio for --protocol twilio)",
    )
    p.add_argument(
        "--protocol",
        choices=("ws", "twilio"),
        default="ws",
        help="ws: the voice WebSocket protocol (with per-stage records); twilio: Twilio Media Streams "
        "(default: ws)",
    )
    p.add_argument("--sessions", type=int, metavar="N", help="concurrent callers (default: 1)")
    p.add_argument(
        "--turns", type=int, default=5, metavar="N", help="turns per caller (default: %(default)s)"
    )
    p.add_argument(
        "--interrupt-share",
        type=float,
        default=0.2,
        metavar="F",
        help="share of replies to interrupt, exactly round(F x sessions x turns) of them, chosen by the seed "
        "(a caller's last reply cannot be: the interruption is its next turn) (default: %(default)s)",
    )
    p.add_argument(
        "--pause-s",
        type=float,
        default=1.0,
        metavar="S",
        help="silence after a reply before the caller's next turn (default: %(default)s)",
    )
    p.add_argument(
        "--pauses",
        type=float,
        nargs="?",
        const=1.0,
        default=0.0,
        metavar="SHARE",
        help="say this share of the questions as sentences with 0.4-1.2 s pauses inside, as people do "
        "(Piper; with --wav-dir, recordings with pauses inside count), and report the premature "
        "end-of-turn rate: turns that ended while the speaker had more to say (--pauses alone: every "
        "question; default: none)",
    )
    p.add_argument(
        "--seed", type=int, default=1, metavar="N", help="seed of the script (default: %(default)s)"
    )
    p.add_argument(
        "--wav-dir",
        type=Path,
        metavar="DIR",
        help="speak these WAV files (any rate, mono) instead of questions synthesized with Piper; "
        "files named interrupt*.wav are the interruptions",
    )
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON ('-' = stdout)")
    p.add_argument(
        "--html", type=Path, metavar="PATH", help="write a self-contained HTML report (waterfall, plot)"
    )
    p.add_argument(
        "--ramp",
        action="store_true",
        help="run 1, 2, 3, ... sessions until p95 voice-to-voice breaks its budget or the server refuses; "
        "reports the capacity",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=16,
        metavar="N",
        help="--ramp stops at this many sessions (default: %(default)s)",
    )
    p.add_argument(
        "--budget-ms",
        type=float,
        metavar="MS",
        help="--ramp: the p95 voice-to-voice to hold (default: the server's voice_to_voice budget)",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="the server's token: sent as 'Authorization: Bearer' on /ws, as customParameters.token "
        "on twilio",
    )
    p.add_argument(
        "--reply-timeout-s",
        type=float,
        default=60.0,
        metavar="S",
        help="a turn with no complete reply this long after its speech fails (default: %(default)s)",
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE", help="YAML config: the Piper voice (tts) and the budgets"
    )
    return p


def options(args: argparse.Namespace) -> BenchOptions:
    """Validated options from the command line; raises :class:`ArgumentsError`."""
    protocol = args.protocol
    url = args.url or f"ws://127.0.0.1:8765{DEFAULT_PATHS[protocol]}"
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise ArgumentsError(f"--url must be a ws:// or wss:// URL, got {url!r}")
    other = DEFAULT_PATHS["ws" if protocol == "twilio" else "twilio"]
    if parts.path.rstrip("/").endswith(other):
        raise ArgumentsError(
            f"--url {url} is the {other} endpoint but --protocol is {protocol}: "
            f"use ...{DEFAULT_PATHS[protocol]}"
        )
    if args.ramp and args.sessions is not None:
        raise ArgumentsError("--ramp chooses the number of sessions itself: drop --sessions")
    checks = (
        (args.sessions is None or args.sessions >= 1, "--sessions must be at least 1"),
        (args.turns >= 1, "--turns must be at least 1"),
        (0.0 <= args.interrupt_share <= 1.0, "--interrupt-share must be between 0 and 1"),
        (args.pause_s >= 0.0, "--pause-s must not be negative"),
        (0.0 <= args.pauses <= 1.0, "--pauses must be between 0 and 1"),
        (args.max_sessions >= 1, "--max-sessions must be at least 1"),
        (args.reply_timeout_s > 0.0, "--reply-timeout-s must be positive"),
        (args.budget_ms is None or args.budget_ms > 0.0, "--budget-ms must be positive"),
        (args.budget_ms is None or args.ramp, "--budget-ms applies to --ramp only"),
    )
    for ok, message in checks:
        if not ok:
            raise ArgumentsError(message)
    return BenchOptions(
        url=url,
        protocol=protocol,
        sessions=args.sessions or 1,
        turns=args.turns,
        interrupt_share=args.interrupt_share,
        pause_s=args.pause_s,
        pauses=args.pauses,
        seed=args.seed,
        wav_dir=args.wav_dir,
        ramp=args.ramp,
        max_sessions=args.max_sessions,
        token=args.token,
        ramp_budget_ms=args.budget_ms,
        reply_timeout_s=args.reply_timeout_s,
    )


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def execute(opts: BenchOptions, config: Path | None = None) -> BenchResult:
    """Run the bench (blocking); errors are :class:`VoicePipelineError` subclasses."""
    from voice_pipeline.bench.run import run_bench
    from voice_pipeline.bench.scenario import Speech
    from voice_pipeline.bench.speech import piper_speech, wav_speech
    from voice_pipeline.bench.text import format_turn
    from voice_pipeline.config import load_config

    cfg = load_config(config)
    rate = 8000 if opts.protocol == "twilio" else 16000

    # bad WAV files fail before anything connects
    wav_dir = opts.wav_dir
    given = wav_speech(wav_dir, rate, need_interruptions=opts.interrupt_share > 0) if wav_dir else None

    def speech() -> Speech:
        return given if given is not None else piper_speech(cfg, rate, _stderr, pauses=opts.pauses > 0)

    return asyncio.run(
        run_bench(opts, speech, _stderr, lambda t: _stderr(format_turn(t)), local_budget=cfg.budget)
    )


def run(args: argparse.Namespace) -> int:
    from voice_pipeline.bench.html import to_html
    from voice_pipeline.bench.report import to_json
    from voice_pipeline.bench.text import format_text

    try:
        opts = options(args)
    except ArgumentsError as exc:
        _stderr(f"voice-pipeline bench: error: {exc}")
        return 2
    try:
        result = execute(opts, args.config)
    except VoicePipelineError as exc:
        _stderr(f"voice-pipeline bench: error: {exc}")
        return 1
    except KeyboardInterrupt:
        _stderr("voice-pipeline bench: interrupted")
        return 130
    data = to_json(result)
    text = format_text(result)
    if args.json == "-":
        _stderr(text)
        print(json.dumps(data, indent=1))
    else:
        print(text, flush=True)
    try:
        if args.json and args.json != "-":
            Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
            _stderr(f"wrote {args.json}")
        if args.html:
            args.html.write_text(to_html(data))
            _stderr(f"wrote {args.html}")
    except OSError as exc:
        _stderr(f"voice-pipeline bench: error: cannot write the report: {exc}")
        return 1
    return 0
