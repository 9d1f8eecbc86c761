"""What every subcommand shares: the config flags, reading the config, progress on stderr."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from voice_pipeline.config import Config, load_config

#: what ``parser.add_subparsers()`` returns: each subcommand module adds its parser to it
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: a subcommand: the parsed arguments in, the exit status out
Handler: TypeAlias = Callable[[argparse.Namespace], int]


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML config (sections vad, turn, asr, llm, dialogue, tts, barge_in, audio, models, server, "
        "telephony, budget)",
    )
    p.add_argument(
        "--budget",
        type=Path,
        metavar="FILE",
        help="latency budget YAML (default: ./latency_budget.yaml or the project's)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where prepared models live (default: $VOICE_PIPELINE_CACHE or ~/.cache/voice-pipeline)",
    )
    p.add_argument(
        "--llm-url",
        metavar="URL",
        help="use a remote OpenAI-compatible vLLM server (e.g. http://127.0.0.1:8000/v1) "
        "instead of in-process vLLM",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    """The config the flags of :func:`add_config_args` select."""
    from voice_pipeline.preflight import check_engines

    cfg = load_config(args.config, args.budget)
    check_engines(cfg)  # an engine nobody registered: said now, as a bad key is
    if args.cache_dir:
        cfg = dataclasses.replace(cfg, models=dataclasses.replace(cfg.models, cache_dir=args.cache_dir))
    if args.llm_url:
        cfg = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, engine="remote", url=args.llm_url))
    return cfg


def offline() -> None:
    """Nothing may download weights at run time (Hugging Face libraries read these)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
