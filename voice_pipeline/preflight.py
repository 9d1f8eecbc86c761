"""Checks made before the long work: before any model loads (20-60 s), a command finds
out whether it could deliver its results at all.

:func:`check_outputs`: ``run`` can write ``--output`` and ``--report`` (else it would
fail with the run's output lost). :func:`check_ports`: ``serve`` can listen on its
port and AudioSocket's (else it would say so only after loading the models).
:func:`check_engines`: every stage's ``engine`` is registered.
:func:`check_tools`: every ``dialogue.tools`` entry imports and describes itself, and
``dialogue.tool_choice: auto`` has a model that can call tools. All raise a one-line
:class:`~voice_pipeline.errors.VoicePipelineError`; a port taken between the check and
the listen still fails cleanly where the server starts.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from voice_pipeline.config import Config
from voice_pipeline.errors import ConfigError, VoicePipelineError


def check_outputs(*outputs: tuple[str, Path | None]) -> None:
    """Each ``(option, path)`` can be written (None = not asked for). A file that does
    not exist yet is created and removed again; an existing one is opened for appending
    and left as it is."""
    for option, path in outputs:
        if path is None:
            continue
        if path.is_dir():
            raise ConfigError(f"{option} {path}: is a directory")
        existed = path.exists()
        try:
            with path.open("ab"):
                pass
        except OSError as exc:
            raise ConfigError(f"{option} {path}: cannot write it: {exc.strerror or exc}") from None
        if not existed:
            path.unlink(missing_ok=True)


def check_ports(cfg: Config) -> None:
    """``server.port`` and ``telephony.audiosocket_port`` are free on ``server.host``."""
    host, port, phones = cfg.server.host, cfg.server.port, cfg.telephony.audiosocket_port
    if phones is not None and phones == port != 0:
        raise ConfigError(f"telephony.audiosocket_port: {phones} is also server.port")
    for n in (port, phones):
        if n:  # None = not listening, 0 = any free port
            check_port(host, n)


def check_port(host: str, port: int) -> None:
    """Bind every address ``host`` resolves to as the server will (SO_REUSEADDR, IPv6
    sockets IPv6-only, as asyncio does), then let go."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise VoicePipelineError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise VoicePipelineError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def chat_template(model_dir: Path) -> str:
    """The model's chat template text ("" if it has none that can be read)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else ""


def check_tools(cfg: Config, llm_dir: Path | None) -> None:
    """``dialogue.tools`` load (ConfigError naming the entry), and with ``tool_choice: auto``
    the in-process model's chat template renders tools (``llm_dir``: its folder; a remote
    server is asked nothing here: it refuses a request it cannot serve)."""
    from llm.toolprompt import chat_template_supports_tools
    from voice_pipeline.tools.registry import load_tools

    d = cfg.dialogue
    if not d.tools:
        return
    load_tools(d.tools)
    if d.tool_choice != "auto" or llm_dir is None or cfg.llm.engine != "vllm":
        return
    if not chat_template_supports_tools(chat_template(llm_dir)):  # as the engine decides
        raise ConfigError(
            f"dialogue.tool_choice: 'auto' lets the model choose to call a tool, but {llm_dir.name} "
            "cannot call tools (its chat template has no tools). Either set dialogue.tool_choice: "
            "required (every reply's first round calls a tool, held to its schema by structured "
            "outputs: any model, the default one too), or use a model that can call tools "
            "(llm.model_path, e.g. a Qwen2.5 Instruct folder)"
        )


def check_engines(cfg: Config) -> None:
    """Every stage's ``engine`` names a registered engine (the stage packages register
    their own on import; see :mod:`voice_pipeline.engine_registry`)."""
    import asr
    import llm
    import tts
    import vad

    vad.ENGINES.factory(cfg.vad.engine)
    asr.ENGINES.factory(cfg.asr.engine)
    llm.ENGINES.factory(cfg.llm.engine)
    tts.ENGINES.factory(cfg.tts.engine)
