"""``voice-pipeline run``: stream a WAV file through the pipeline like a live microphone."""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib import resources
from pathlib import Path

from voice_pipeline.cli.common import Subparsers, add_config_args, config_from_args, stderr
from voice_pipeline.errors import ConfigError

EXAMPLE = "example_questions.wav"


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="stream a WAV file through the pipeline like a live microphone",
        description="Stream IN through the pipeline as if it were a live microphone and write OUT, "
        "what a listener would have heard, on IN's timeline. IN may hold several questions separated "
        "by silence; each gets a reply. Prints each turn's transcript, reply and stage latencies "
        "against the budget.",
    )
    p.add_argument(
        "--input",
        "-i",
        type=Path,
        metavar="IN.wav",
        help="input audio, any rate/channels (default: a bundled example with two questions)",
    )
    p.add_argument(
        "--output",
        "-o",
        type=Path,
        default=Path("voice-pipeline-out.wav"),
        metavar="OUT.wav",
        help="where to write the reply audio (default: %(default)s)",
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="REPORT.json",
        help="write per-turn marks, stage latencies and a summary as JSON",
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="feed the input as fast as the pipeline takes it instead of in real time",
    )
    p.add_argument(
        "--echo-db",
        type=float,
        metavar="DB",
        help="simulate a loudspeaker next to the microphone: mix what the listener hears back "
        "into the input at this gain (e.g. -6); real time only",
    )
    p.add_argument(
        "--echo-delay-ms",
        type=float,
        default=120.0,
        metavar="MS",
        help="delay of the simulated echo path (default: %(default)s)",
    )
    add_config_args(p)
    p.set_defaults(handler=cmd_run)


def _example_path() -> Path:
    return Path(str(resources.files("voice_pipeline") / "data" / EXAMPLE))


def cmd_run(args: argparse.Namespace) -> int:
    from voice_pipeline.audio import read_audio
    from voice_pipeline.engines import Engines
    from voice_pipeline.ledger.report import format_summary, format_turn
    from voice_pipeline.models import prepare_models
    from voice_pipeline.preflight import check_outputs, check_tools
    from voice_pipeline.runner import EchoPath, run_audio, write_output, write_report

    cfg = config_from_args(args)
    if args.echo_db is not None and args.fast:
        raise ConfigError("--echo-db simulates a room in real time; it cannot be combined with --fast")
    input_path = args.input or _example_path()
    raw, in_rate = read_audio(input_path)  # bad input fails before any model loads
    check_outputs(("--output", args.output), ("--report", args.report))  # ... and unwritable outputs
    paths = prepare_models(cfg, progress=stderr)
    check_tools(cfg, paths.llm)  # ... and tools that cannot load or be called
    engines = Engines.load(cfg, paths, stderr)
    mode = "as fast as possible" if args.fast else "in real time"
    stderr(f"streaming {input_path} ({len(raw) / in_rate:.1f} s) {mode}")

    async def go() -> int:
        try:
            t0 = time.monotonic()
            stderr("warming up the engines ...")
            await engines.warm_up(cfg.dialogue.system_prompt)
            stderr(f"warmed up in {time.monotonic() - t0:.1f} s")
            echo = EchoPath(args.echo_db, args.echo_delay_ms) if args.echo_db is not None else None
            result = await run_audio(engines, cfg, raw, in_rate, realtime=not args.fast, echo=echo)
        finally:
            await engines.aclose()
        for turn in result.turns:
            print(format_turn(turn, cfg.budget))
        print(format_summary(result.summary))
        write_output(args.output, result)
        stderr(
            f"wrote {args.output} ({len(result.output) / result.output_rate_hz:.1f} s "
            f"at {result.output_rate_hz} Hz)"
        )
        if args.report:
            write_report(args.report, result, input_path)
            stderr(f"wrote {args.report}")
        return 0

    return asyncio.run(go())
