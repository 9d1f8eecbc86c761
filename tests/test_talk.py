"""``voice-pipeline talk`` against a real server started in-process (real models).

The client runs as a subprocess (``python -m voice_pipeline.cli talk ...``)
pointed at the in-process server's port, as a user would run it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import socket
import sys
import termios
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from speech import espeak
from test_server_e2e import running_server, ws_url
from websockets.asyncio.client import connect

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.server.app import VoiceServer

QUESTION = "What is the capital of France?"
EXE = [sys.executable, "-m", "voice_pipeline.cli", "talk"]


async def run_talk(*args: str, timeout_s: float = 180.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *EXE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
async def talk_server(engines: Engines, config: Config) -> AsyncIterator[VoiceServer]:
    async with running_server(engines, config, max_sessions=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("talk") / "question.wav"
    sf.write(path, espeak(QUESTION, 22050), 22050, subtype="PCM_16")
    return path


@pytest.mark.real_models
async def test_headless_turn_gives_transcript_reply_audio_and_latency(
    talk_server: VoiceServer, question_wav: Path, tmp_path: Path
) -> None:
    reply = tmp_path / "reply.wav"
    code, out, err = await run_talk(
        "--url", ws_url(talk_server), "--input", str(question_wav), "--output", str(reply), "--json"
    )
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ready" and kinds[-1] == "turn.latency"
    (final,) = [e for e in events if e["type"] == "transcript.final"]
    assert final["text"].strip()
    record = events[-1]["record"]
    assert record["user_text"].strip() and record["assistant_text"].strip()
    # push-to-talk ends the turn at once: the key, not a silence, ended it (the time it took
    # is printed; measuring it is the benchmarks' job)
    assert record["end_of_turn"]["rule"] == "push_to_talk" and record["end_of_turn"]["wait_ms"] == 0
    print(f"push-to-talk endpointing {record['stages_ms']['endpointing']:.0f} ms")
    audio, rate = sf.read(reply, dtype="int16")
    assert rate == 22050 and len(audio) > 0 and np.abs(audio).max() > 0


async def test_server_down_exits_non_zero_with_the_url() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{sock.getsockname()[1]}/ws"
    code, _, err = await run_talk("--url", url, "--input", str(Path(__file__)), timeout_s=60)
    assert code != 0
    # the input is checked first: a bad file is its own error
    assert "not a readable audio file" in err
    wav = Path(__file__).parent / "_silence_for_talk.wav"
    try:
        sf.write(wav, np.zeros(1600, dtype=np.float32), 16000)
        code, _, err = await run_talk("--url", url, "--input", str(wav), timeout_s=60)
    finally:
        wav.unlink(missing_ok=True)
    assert code == 1
    assert f"server not reachable at {url}" in err and "Traceback" not in err


@pytest.mark.real_models
async def test_server_refusal_shows_the_close_reason(talk_server: VoiceServer, question_wav: Path) -> None:
    async with connect(ws_url(talk_server)) as holder:  # takes the only session
        start = {"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16"}
        await holder.send(json.dumps(start))
        assert json.loads(await holder.recv())["type"] == "ready"
        code, _, err = await run_talk("--url", ws_url(talk_server), "--input", str(question_wav))
    assert code == 1
    assert "refused" in err and "1013" in err and "session limit reached (1)" in err, err
    assert "Traceback" not in err


# ------------------------------------------------------------ interactive, in a pseudo-terminal


class PtyTalk:
    """``talk`` in a pseudo-terminal (its controlling terminal): keys in, screen text out."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.screen = ""
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
        self.screen += data.decode(errors="replace")
        self._changed.set()

    def press(self, key: str) -> None:
        os.write(self.master, key.encode())

    async def expect(self, pattern: str, after: int = 0, timeout_s: float = 120.0) -> int:
        """Wait until ``pattern`` (a regex) shows up past offset ``after``; the offset past it."""
        async with asyncio.timeout(timeout_s):
            while True:
                found = re.search(pattern, self.screen[after:])
                if found:
                    return after + found.end()
                if self.proc.returncode is not None:
                    raise AssertionError(f"talk exited: {self.screen[-2000:]!r}")
                self._changed.clear()
                try:
                    await self._changed.wait()
                except asyncio.CancelledError:
                    lines = [x for x in self.screen.split("\x1b[K") if "\n" in x]
                    print(f"waiting for {pattern!r}; the screen's lines: {lines!r}")
                    raise


def _controlling_tty() -> None:  # in the child, after setsid: the pty becomes its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.real_models
async def test_interactive_push_to_talk_in_a_terminal(talk_server: VoiceServer, tmp_path: Path) -> None:
    story = tmp_path / "story.wav"
    sf.write(story, espeak("Tell me a long story about a brave knight and a dragon."), 16000)
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        *EXE,
        "--url",
        ws_url(talk_server),
        "--mic-file",
        str(story),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=_controlling_tty,
    )
    os.close(slave)
    term = PtyTalk(proc, master)
    try:
        at = await term.expect(r"connected to ws://")
        term.press(" ")  # start talking: the mic file is said
        at = await term.expect(r"REC \[", at)  # the level meter
        at = await term.expect(r"end of the mic file", at)
        term.press(" ")  # stop: the server ends the turn at once
        at = await term.expect(r"you: \w+.*\r\n", at)  # the final transcript
        at = await term.expect(r"assistant: \w+", at)  # the reply streams
        term.press(" ")  # interrupt it and talk again
        at = await term.expect(r"\[interrupted: [^\]]+\]", at)
        at = await term.expect(r"latency: \S*endpoint \d+ ms", at)
        await term.expect(r"end of the mic file", at)
        term.press("\x03")  # Ctrl-C: a SIGINT from the terminal
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        await asyncio.sleep(0)  # the last output
        assert "bye" in term.screen and "Traceback" not in term.screen
        attrs = termios.tcgetattr(master)
        assert attrs[3] & termios.ECHO and attrs[3] & termios.ICANON  # the terminal is sane again
    finally:
        asyncio.get_running_loop().remove_reader(master)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)


async def _spawn_in_pty(*args: str) -> PtyTalk:
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        *EXE,
        *args,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=_controlling_tty,
    )
    os.close(slave)
    return PtyTalk(proc, master)


async def _quit(term: PtyTalk) -> None:
    term.press("\x03")
    assert await asyncio.wait_for(term.proc.wait(), 60) == 0
    assert "Traceback" not in term.screen


@pytest.mark.real_models
async def test_interactive_reconnects_after_the_connection_drops(
    engines: Engines, config: Config, question_wav: Path
) -> None:
    async with running_server(engines, config) as first:
        port = first.port
        term = await _spawn_in_pty("--url", ws_url(first), "--mic-file", str(question_wav))
        try:
            at = await term.expect(r"connected to ws://")
            await first.aclose()  # the server goes away: 1001
            at = await term.expect(
                r"connection lost \(closed with 1001: server shutting down\); reconnecting", at
            )
            at = await term.expect(r"server not reachable at ws://127\.0\.0\.1:\d+/ws.*; retrying in", at)
            async with running_server(engines, config, port=port):  # back on the same port
                await term.expect(r"connected to ws://", at)
                await _quit(term)
        finally:
            asyncio.get_running_loop().remove_reader(term.master)
            if term.proc.returncode is None:
                term.proc.kill()
                await term.proc.wait()
            os.close(term.master)
