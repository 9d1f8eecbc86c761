"""Engines behind their interfaces: a stage's engines are found by name in its registry,
and an engine from outside the stage's package is one class and one ``register`` line."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fakes import Fakes, FakeTTS
from harness import REPLY, make_harness
from numpy.typing import NDArray

import asr
import llm
import tts
import vad
from tts import build_tts
from voice_pipeline.config import Config, TTSConfig
from voice_pipeline.engine_registry import EngineRegistry
from voice_pipeline.errors import ConfigError
from voice_pipeline.models import ModelPaths, prepare_models
from voice_pipeline.preflight import check_engines


def test_each_stage_registers_its_own_engines() -> None:
    assert vad.ENGINES.names == ("silero", "webrtc")
    assert asr.ENGINES.names == ("faster-whisper",)
    assert llm.ENGINES.names == ("vllm", "remote")
    assert tts.ENGINES.names == ("piper",)


def with_engine(stage: str, name: str) -> Config:
    cfg = Config()
    return dataclasses.replace(cfg, **{stage: dataclasses.replace(getattr(cfg, stage), engine=name)})


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        (with_engine("vad", "magic"), "vad.engine: 'magic' is not a registered engine ('silero', 'webrtc')"),
        (with_engine("asr", "vosk"), "asr.engine: 'vosk'"),
        (with_engine("llm", "openai"), "llm.engine: 'openai' is not a registered engine ('vllm', 'remote')"),
        (with_engine("tts", ""), "tts.engine: ''"),
    ],
)
def test_an_engine_nobody_registered_is_a_config_error_naming_the_key(cfg: Config, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_engines(cfg)
    assert needle in str(info.value)


def test_the_default_config_names_registered_engines() -> None:
    check_engines(Config())


def test_a_name_is_registered_once() -> None:
    registry: EngineRegistry[int] = EngineRegistry("demo")
    registry.register("one", 1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("one", 2)
    with pytest.raises(ValueError, match="empty"):
        registry.register("", 3)
    registry.unregister("one")
    assert registry.names == ()


class ChirpTTS(FakeTTS):
    """A TTS engine that is not in :mod:`tts`: a rising tone per character, at 16 kHz."""

    def __init__(self, cfg: TTSConfig) -> None:
        super().__init__()
        self.sample_rate_hz = 16000
        self.cfg = cfg

    def synthesize(self, text: str) -> NDArray[np.int16]:
        self.texts.append(text)
        n = round(len(text) * self.ms_per_char * self.sample_rate_hz / 1000)
        t = np.arange(n) / self.sample_rate_hz
        return (8000 * np.sin(2 * np.pi * (300 + 200 * t) * t)).astype(np.int16)


@pytest.fixture
def chirp() -> Iterator[str]:
    tts.ENGINES.register("chirp", lambda cfg, voice_path: ChirpTTS(cfg))  # the one line
    yield "chirp"
    tts.ENGINES.unregister("chirp")


async def test_an_engine_registered_from_outside_the_package_speaks_a_reply(chirp: str) -> None:
    cfg = with_engine("tts", chirp)
    check_engines(cfg)
    engine = build_tts(cfg.tts, Path("voice prepared for piper, unused"))
    assert isinstance(engine, ChirpTTS)
    fakes = Fakes(tts=engine)
    fakes.llm.reply = REPLY
    h = make_harness(fakes=fakes)
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.completed(1))
        assert h.record(1).assistant_text == REPLY
        assert engine.texts  # the reply went through the registered engine ...
        played = h.transport.played_samples(1)  # ... and its audio reached the listener
        assert played == sum(round(len(t) * 60 * 16000 / 1000) for t in engine.texts)
    finally:
        fakes.llm.release()
        await h.session.aclose()


def prepare(cfg: Config, tmp_path: Path, *, voice: Path | None = None) -> tuple[ModelPaths, list[str]]:
    """``voice-pipeline models`` for ``cfg`` (cache in ``tmp_path``) with every other model
    given by path and a remote LLM, so nothing is copied or converted: its paths and lines."""
    given = tmp_path / "given"
    given.mkdir()
    for name in ("vad.onnx", "turn.onnx"):
        (given / name).touch()
    (given / "asr").mkdir()
    cfg = dataclasses.replace(
        cfg,
        vad=dataclasses.replace(cfg.vad, model_path=str(given / "vad.onnx")),
        asr=dataclasses.replace(cfg.asr, model_path=str(given / "asr")),
        llm=dataclasses.replace(cfg.llm, engine="remote"),
        turn=dataclasses.replace(cfg.turn, model_path=str(given / "turn.onnx")),
        tts=dataclasses.replace(cfg.tts, voice_path=None if voice is None else str(voice)),
        models=dataclasses.replace(cfg.models, cache_dir=str(tmp_path / "cache")),
    )
    said: list[str] = []
    return prepare_models(cfg, said.append), said


def test_models_prepares_no_piper_voice_for_another_tts_engine(chirp: str, tmp_path: Path) -> None:
    _, said = prepare(with_engine("tts", chirp), tmp_path)
    assert said and not [line for line in said if line.startswith("tts")]
    assert not (tmp_path / "cache" / "piper").exists()


def test_another_tts_engine_gets_its_voice_path_unchecked(chirp: str, tmp_path: Path) -> None:
    voice = tmp_path / "a chirp voice, not a Piper one"  # no file, no .json beside it
    paths, said = prepare(with_engine("tts", chirp), tmp_path, voice=voice)
    assert paths.tts == voice
    assert not [line for line in said if line.startswith("tts")]


def test_models_checks_the_piper_voice_for_piper(tmp_path: Path) -> None:
    voice = tmp_path / "voice.onnx"
    voice.touch()
    Path(f"{voice}.json").touch()
    paths, said = prepare(Config(), tmp_path, voice=voice)
    assert f"tts: using configured {voice}" in said
    assert paths.tts == voice
