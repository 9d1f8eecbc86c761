"""``voice-pipeline serve``: the voice assistant over WebSocket, with a demo page (the server
is :mod:`voice_pipeline.server`; this is its command line)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import time
from typing import TYPE_CHECKING

from voice_pipeline.cli.common import Subparsers, add_config_args, config_from_args, stderr
from voice_pipeline.config import Config

if TYPE_CHECKING:
    from voice_pipeline.engines import Engines
    from voice_pipeline.models import ModelPaths


def add_parser(sub: Subparsers) -> None:
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
    add_config_args(p)
    p.set_defaults(handler=cmd_serve)


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

    cfg = _server_config(args, config_from_args(args))
    check_ports(cfg)  # a port in use fails now, not after loading the models
    paths = prepare_models(cfg, progress=stderr)
    check_tools(cfg, paths.llm)  # ... and so do tools that cannot load or be called
    engines = Engines.load(cfg, paths, stderr)

    async def go() -> int:
        try:
            t0 = time.monotonic()
            stderr("warming up the engines ...")
            await engines.warm_up(cfg.dialogue.system_prompt)
            stderr(f"warmed up in {time.monotonic() - t0:.1f} s")
            server = VoiceServer(engines, cfg)
            server.machine["floors"] = await asyncio.to_thread(_floors, engines, paths)
            phones = await start_listening(server, engines, cfg)  # AudioSocket failed: none listens
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            print(f"voice-pipeline: open {server.url} in a browser (Ctrl-C stops)", flush=True)
            if not is_loopback(cfg.server.host) and cfg.server.certfile is None:
                stderr(
                    "note: browsers only allow the microphone on https:// or on localhost; "
                    "from other machines put the server behind TLS"
                )
            for warning in exposure_warnings(cfg.server):
                stderr(f"warning: {warning}")
            stderr("\n".join(endpoint_summary(cfg, None if phones is None else phones.port)))
            if cfg.server.auth_token:
                stderr(f"note: /ws requires the token; in a browser open {server.url}?token=<the token>")
            try:
                await stop.wait()
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                stderr(f"shutting down: closing {len(server.connections)} session(s) ...")
                if phones is not None:
                    await phones.aclose()
                await server.aclose()
        finally:
            await engines.aclose()
        stderr("stopped")
        return 0

    return asyncio.run(go())
