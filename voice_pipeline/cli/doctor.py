"""``voice-pipeline doctor``: this machine, the settings chosen for it, an LLM micro-benchmark
(the measurements are :mod:`voice_pipeline.doctor`; this is its command line)."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from voice_pipeline.cli.common import Subparsers, add_config_args, config_from_args, stderr
from voice_pipeline.errors import ConfigError


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "doctor",
        help="show this machine, the settings chosen for it, and what its LLM gives",
        description="Print the CPU (model, class: AVX-512 BF16 / AVX-512 / AVX2, usable cores), the "
        "machine-dependent settings (LLM dtype, threads, KV block size) and why each was chosen "
        "(a value set in --config always wins), the memory bandwidth and matmul rate measured now, "
        "and a few-second LLM micro-benchmark beside those floors: first token cold and with the "
        "system prompt cached, and milliseconds per generated token. Starting the LLM takes ~15 s.",
    )
    p.add_argument("--no-llm", action="store_true", help="skip the LLM micro-benchmark (no model is loaded)")
    p.add_argument(
        "--reps", type=int, default=5, metavar="N", help="requests per first-token figure (default: 5)"
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    add_config_args(p)
    p.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from llm import build_llm
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.doctor import (
        DoctorReport,
        format_report,
        llm_figures,
        measure_floors,
        model_parameters,
    )
    from voice_pipeline.tuning import choose

    cfg = config_from_args(args)
    if args.reps < 1:
        raise ConfigError("--reps: must be >= 1")
    tuning = choose(this_cpu(), cfg.llm, cfg.asr)
    stderr("measuring memory bandwidth and matmul speed ...")
    floors = measure_floors(tuning)
    figures = None
    start_s = None
    if not args.no_llm:
        from voice_pipeline.models import prepare_models

        paths = prepare_models(cfg, progress=stderr)
        stderr(f"starting the LLM ({cfg.llm.engine}) ...")
        t0 = time.monotonic()
        llm = build_llm(tuning.llm(cfg.llm), paths.llm)
        start_s = round(time.monotonic() - t0, 1)
        params = model_parameters(paths.llm) if paths.llm is not None else None

        async def bench() -> object:
            try:
                stderr("LLM micro-benchmark ...")
                return await llm_figures(
                    llm, cfg.dialogue.system_prompt, reps=args.reps, parameters=params, dtype=tuning.dtype
                )
            finally:
                await llm.aclose()

        figures = asyncio.run(bench())
    report = DoctorReport(tuning, floors, figures, start_s)  # type: ignore[arg-type]
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=2))
        stderr(f"wrote {args.json}")
    return 0
