"""Errors before the long work: ``run`` and ``serve`` find out before any model loads
whether they could deliver, and say why in one line (exit 1, no traceback).

"Before any model loads" is checked on what the process leaves behind: each command
runs with an empty ``--cache-dir`` that preparing the models would fill, and prints
nothing but the error. The last test starts the servers in-process on the fake
engines: when AudioSocket's port cannot be bound, the WebSocket server that already
listens is closed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import Fakes

from voice_pipeline.config import Config, ServerConfig, TelephonyConfig
from voice_pipeline.errors import ConfigError, VoicePipelineError
from voice_pipeline.preflight import check_outputs, check_ports
from voice_pipeline.server.app import VoiceServer
from voice_pipeline.server.listen import start_listening

EXE = [sys.executable, "-m", "voice_pipeline.cli"]


def cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    """Run the command with an empty model cache; (exit code, stderr)."""
    cache = tmp_path / "cache"
    out = subprocess.run(
        [*EXE, *args, "--cache-dir", str(cache)], capture_output=True, text=True, timeout=120
    )
    assert not cache.exists(), "models were prepared before the error"
    assert out.stdout == "" and "Traceback" not in out.stderr, out.stderr
    return out.returncode, out.stderr


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port something else listens on (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------ run: --output and --report


@pytest.mark.parametrize("option", ["--output", "--report"])
def test_run_checks_an_output_in_a_missing_folder_before_any_model_loads(tmp_path: Path, option: str) -> None:
    target = tmp_path / "no" / "such" / "folder" / "out.x"
    code, err = cli(tmp_path, "run", option, str(target))
    assert code == 1
    assert (
        one_line(err)
        == f"voice-pipeline run: error: {option} {target}: cannot write it: No such file or directory"
    )


def test_run_checks_an_output_that_is_a_folder(tmp_path: Path) -> None:
    code, err = cli(tmp_path, "run", "--report", str(tmp_path))
    assert code == 1 and one_line(err) == f"voice-pipeline run: error: --report {tmp_path}: is a directory"


def test_the_output_check_leaves_no_file_behind_and_existing_files_as_they_were(tmp_path: Path) -> None:
    new, old = tmp_path / "new.wav", tmp_path / "old.json"
    old.write_text("kept")
    check_outputs(("--output", new), ("--report", old), ("--report", None))
    assert not new.exists() and old.read_text() == "kept"


def test_an_output_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"--output .*out\.wav: cannot write it: Not a directory"):
        check_outputs(("--output", blocker / "out.wav"))  # (a read-only folder: root may write there)


# ------------------------------------------------------------ config files


@pytest.mark.parametrize(
    ("text", "needle"),
    [(b"on: 1\n", "key True is not a string"), (b"vad:\n  threshold: 0.5 # \xe9\n", "not UTF-8 text")],
)
def test_a_config_file_yaml_cannot_map_is_one_line_before_any_model_loads(
    tmp_path: Path, text: bytes, needle: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    for command in ("run", "serve"):
        code, err = cli(tmp_path, command, "--config", str(path))
        line = one_line(err)
        assert code == 1 and line.startswith(f"voice-pipeline {command}: error: {path}: ") and needle in line


# ------------------------------------------------------------ serve: ports


def test_serve_checks_its_port_before_any_model_loads(tmp_path: Path) -> None:
    with taken_port() as port:
        code, err = cli(tmp_path, "serve", "--port", str(port))
    assert code == 1
    assert (
        one_line(err)
        == f"voice-pipeline serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_serve_checks_the_audiosocket_port_before_any_model_loads(tmp_path: Path) -> None:
    with taken_port() as port:
        code, err = cli(tmp_path, "serve", "--port", "0", "--audiosocket-port", str(port))
    assert code == 1
    assert (
        one_line(err)
        == f"voice-pipeline serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_one_port_for_both_is_a_config_error() -> None:
    cfg = Config(server=ServerConfig(port=9000), telephony=TelephonyConfig(audiosocket_port=9000))
    with pytest.raises(ConfigError, match=r"telephony\.audiosocket_port: 9000 is also server\.port"):
        check_ports(cfg)
    check_ports(
        dataclasses.replace(cfg, server=ServerConfig(port=0), telephony=TelephonyConfig(audiosocket_port=0))
    )


async def test_an_audiosocket_port_that_cannot_be_bound_closes_the_websocket_server() -> None:
    ws_port = free_port()
    with taken_port() as phone_port:
        cfg = Config(
            server=ServerConfig(port=ws_port), telephony=TelephonyConfig(audiosocket_port=phone_port)
        )
        server = VoiceServer(Fakes().engines(), cfg)
        with pytest.raises(
            VoicePipelineError, match=f"cannot listen on 127.0.0.1:{phone_port}: Address already"
        ):
            await start_listening(server, Fakes().engines(), cfg)
    with pytest.raises(ConnectionRefusedError):  # nothing listens on the WebSocket port any more
        socket.create_connection(("127.0.0.1", ws_port), timeout=5).close()
    # and it can be bound again at once (a second start in the same process would work)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", ws_port))
