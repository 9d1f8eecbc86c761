"""Checks made before the long work: before any model loads (20-60 s), a command finds
out whether it could deliver its results at all.

:func:`check_outputs`: ``run`` can write ``--output`` and ``--report`` (else it would
fail with the run's output lost). :func:`check_ports`: ``serve`` can listen on its
port and AudioSocket's (else it would say so only after loading the models). Both
raise a one-line :class:`~voice_pipeline.errors.VoicePipelineError`; a port taken
between the check and the listen still fails cleanly where the server starts.
"""

from __future__ import annotations

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
