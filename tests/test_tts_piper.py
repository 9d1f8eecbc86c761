"""PiperTTS with the real en_US-joe-medium voice (runs in CI), checked back with Whisper."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soxr
from numpy.typing import NDArray
from speech import word_error_rate

from asr.base import ASREngine
from tts.base import TTS
from tts.piper import (
    LEADING_SILENCE_MS,
    SILENCE_FLOOR_DBFS,
    PiperTTS,
    conv2d_model,
    trim_silence,
    voice_name,
)
from voice_pipeline.config import TTSConfig
from voice_pipeline.errors import EngineError, ModelError
from voice_pipeline.models import ModelPaths

pytestmark = pytest.mark.real_models

SENTENCE = "The capital of France is Paris."
FRAME_MS = 10
CFG = TTSConfig()


@pytest.fixture(scope="session")
def voice_path(model_paths: ModelPaths) -> Path:
    return model_paths.tts


@pytest.fixture(scope="session")
def tts(piper: TTS) -> PiperTTS:
    """The session's shared Piper engine (tests/conftest.py)."""
    assert isinstance(piper, PiperTTS)
    return piper


def transcribe(asr: ASREngine, audio: NDArray[np.int16], rate_hz: int) -> str:
    pcm = soxr.resample(audio.astype(np.float32) / 32768.0, rate_hz, 16000, quality="HQ")
    return asr.transcribe(np.ascontiguousarray(pcm, dtype=np.float32)).text


def frame_rms(audio: NDArray[np.int16], rate_hz: int) -> NDArray[np.float64]:
    frame = rate_hz * FRAME_MS // 1000
    n = len(audio) // frame
    frames = audio[: n * frame].astype(np.float64).reshape(n, frame)
    return np.asarray(np.sqrt(np.mean(frames**2, axis=1)), dtype=np.float64)


def silent_frames(audio: NDArray[np.int16], rate_hz: int) -> NDArray[np.bool_]:
    """10 ms frames below a simple energy threshold.

    10 dB below the trimmer's floor, so a 10 ms frame holding the trimmer's last
    voiced 5 ms frame always counts as voiced here (no quantization slack needed).
    """
    floor = 32767.0 * 10.0 ** ((SILENCE_FLOOR_DBFS - 10.0) / 20.0)
    return np.asarray(frame_rms(audio, rate_hz) < floor)


def edge_silence_ms(audio: NDArray[np.int16], rate_hz: int) -> tuple[int, int]:
    silent = silent_frames(audio, rate_hz)
    voiced = np.flatnonzero(~silent)
    assert voiced.size, "no voiced frame at all"
    return int(voiced[0]) * FRAME_MS, (len(silent) - 1 - int(voiced[-1])) * FRAME_MS


def longest_inner_silence_ms(audio: NDArray[np.int16], rate_hz: int) -> int:
    silent = silent_frames(audio, rate_hz)
    voiced = np.flatnonzero(~silent)
    longest = run = 0
    for is_silent in silent[voiced[0] : voiced[-1] + 1]:
        run = run + 1 if is_silent else 0
        longest = max(longest, run)
    return longest * FRAME_MS


# ------------------------------------------------------------ real voice


def test_sentence_is_plausible_int16_audio(tts: PiperTTS) -> None:
    audio = tts.synthesize(SENTENCE)
    assert tts.sample_rate_hz == 22050
    assert audio.dtype == np.int16 and audio.ndim == 1
    assert 1.0 <= len(audio) / tts.sample_rate_hz <= 4.0
    rms = float(np.sqrt(np.mean(audio.astype(np.float64) ** 2)))
    assert rms > 1000.0  # Piper normalizes to full scale; speech RMS is ~3000


def test_edge_silence_is_trimmed(tts: PiperTTS) -> None:
    audio = tts.synthesize(SENTENCE)
    leading_ms, trailing_ms = edge_silence_ms(audio, tts.sample_rate_hz)
    assert trailing_ms <= CFG.max_trailing_silence_ms
    assert leading_ms <= LEADING_SILENCE_MS + FRAME_MS


def test_a_tighter_bound_is_honoured(voice_path: Path) -> None:
    engine = PiperTTS(TTSConfig(max_trailing_silence_ms=20), voice_path)
    try:
        audio = engine.synthesize(SENTENCE)
        assert edge_silence_ms(audio, engine.sample_rate_hz)[1] <= 20  # untrimmed: 110-160 ms
    finally:
        engine.close()


def test_pause_between_sentences_is_trimmed_too(tts: PiperTTS) -> None:
    audio = tts.synthesize("Hello there. How are you today?")
    pause_limit = CFG.max_trailing_silence_ms + LEADING_SILENCE_MS + 2 * FRAME_MS
    assert longest_inner_silence_ms(audio, tts.sample_rate_hz) <= pause_limit
    assert len(audio) > len(tts.synthesize("Hello there."))


def test_audio_is_intelligible(tts: PiperTTS, whisper: ASREngine) -> None:
    text = transcribe(whisper, tts.synthesize(SENTENCE), tts.sample_rate_hz)
    assert "paris" in text.lower(), text


def test_steady_speech_is_the_same_every_time_and_still_intelligible(
    tts: PiperTTS, whisper: ASREngine
) -> None:
    """``vary=False`` (tests' input speech): noise off, the same samples on every call."""
    text = "Is it safe to swim in the lake?"
    steady = tts.synthesize(text, vary=False)
    assert np.array_equal(steady, tts.synthesize(text, vary=False))
    assert not np.array_equal(tts.synthesize(text), tts.synthesize(text))  # the voice's own noise
    heard = transcribe(whisper, steady, tts.sample_rate_hz)
    assert word_error_rate(text, heard) * len(text.split()) <= 1, heard  # tiny.en: a word may slip


def test_the_2d_graph_speaks_the_same_audio_as_the_voice_file(tts: PiperTTS, voice_path: Path) -> None:
    """tts.conv2d (the default, so the shared engine) rewrites the voice's 1-D convolutions
    as 2-D ones; with the noise off the audio must be the file's own, sample for sample."""
    from piper.config import SynthesisConfig

    assert CFG.conv2d and isinstance(conv2d_model(voice_path), bytes)  # rewritten
    plain = PiperTTS(TTSConfig(conv2d=False), voice_path)
    still = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    try:
        for text in (SENTENCE, "Bees make honey from the nectar of flowers, which they collect."):
            graphs = (plain._voice, tts._voice)
            assert graphs[0] is not None and graphs[1] is not None
            before, after = (
                np.concatenate([chunk.audio_float_array for chunk in voice.synthesize(text, still)])
                for voice in graphs
            )
            assert before.shape == after.shape and len(before) > tts.sample_rate_hz
            assert float(np.max(np.abs(after - before))) < 1e-3  # float rounding: ~2e-5
    finally:
        plain.close()


@pytest.mark.parametrize("text", ["", "   \n", "...", "— !?", "🎉", "**"])
def test_nothing_to_say_gives_empty_audio_without_the_model(
    tts: PiperTTS, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was called")

    monkeypatch.setattr(tts._voice, "synthesize", fail)
    audio = tts.synthesize(text)
    assert audio.dtype == np.int16 and audio.shape == (0,)


def test_markdown_and_emoji_are_not_spoken(tts: PiperTTS) -> None:
    # spoken, "**" alone is ~1.5 s of "asterisk asterisk"
    assert len(tts.synthesize("**Paris** 🎉")) / tts.sample_rate_hz < 1.3


def test_concurrent_calls_are_safe(tts: PiperTTS) -> None:
    results: list[NDArray[np.int16]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(tts.synthesize(SENTENCE))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 3
    assert all(1.0 <= len(a) / tts.sample_rate_hz <= 4.0 for a in results)


def test_close_is_idempotent_and_final(voice_path: Path) -> None:
    engine = PiperTTS(CFG, voice_path)
    engine.close()
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.synthesize(SENTENCE)


# ------------------------------------------------------------ errors


def test_missing_voice_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="voice not found"):
        PiperTTS(CFG, tmp_path / "nope.onnx")


def test_missing_voice_config(tmp_path: Path) -> None:
    onnx = tmp_path / "voice.onnx"
    onnx.write_bytes(b"\0")
    with pytest.raises(ModelError, match=r"voice\.onnx\.json"):
        PiperTTS(CFG, onnx)


def test_corrupt_voice(tmp_path: Path, voice_path: Path) -> None:
    onnx = tmp_path / "voice.onnx"
    onnx.write_bytes(b"not an onnx model")
    config = voice_path.with_name(voice_path.name + ".json")
    (tmp_path / "voice.onnx.json").write_bytes(config.read_bytes())
    with pytest.raises(ModelError, match="cannot load"):
        PiperTTS(CFG, onnx)


def test_invalid_voice_config(tmp_path: Path) -> None:
    onnx = tmp_path / "voice.onnx"
    onnx.write_bytes(b"\0")
    (tmp_path / "voice.onnx.json").write_text("{not json")
    with pytest.raises(ModelError, match="invalid Piper voice config"):
        PiperTTS(CFG, onnx)


# ------------------------------------------------------------ trim_silence (pure)


def _tone(ms: int, rate_hz: int = 22050) -> NDArray[np.int16]:
    t = np.arange(rate_hz * ms // 1000) / rate_hz
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def _zeros(ms: int, rate_hz: int = 22050) -> NDArray[np.int16]:
    return np.zeros(rate_hz * ms // 1000, dtype=np.int16)


@pytest.mark.parametrize(
    ("lead_in", "trail_in", "lead_keep", "trail_keep", "lead_out", "trail_out"),
    [
        (50, 300, 5, 120, 5, 120),
        (50, 300, 0, 0, 0, 0),
        (0, 0, 5, 120, 0, 0),
        (2, 60, 5, 120, 2, 60),  # already shorter than the bound: untouched
    ],
)
def test_trim_silence_bounds(
    lead_in: int, trail_in: int, lead_keep: int, trail_keep: int, lead_out: int, trail_out: int
) -> None:
    rate = 22050
    audio = np.concatenate([_zeros(lead_in), _tone(400), _zeros(trail_in)])
    out = trim_silence(audio, rate, lead_ms=lead_keep, trail_ms=trail_keep)
    expected = (lead_out + 400 + trail_out) * rate / 1000
    assert abs(len(out) - expected) <= rate * 5 / 1000  # within one 5 ms frame
    assert out.dtype == np.int16


def test_trim_silence_keeps_quiet_speech_and_drops_all_silence() -> None:
    quiet = (_tone(300).astype(np.float64) * 0.05).astype(np.int16)  # ~ -32 dBFS RMS
    assert len(trim_silence(quiet, 22050, lead_ms=5, trail_ms=120)) == len(quiet)
    hiss = np.full(22050, 30, dtype=np.int16)  # ~ -61 dBFS
    assert len(trim_silence(hiss, 22050, lead_ms=5, trail_ms=120)) == 0
    assert len(trim_silence(_zeros(0), 22050, lead_ms=5, trail_ms=120)) == 0


def test_trim_silence_fades_a_cut_edge() -> None:
    audio = np.concatenate([_tone(200), np.full(2205, 60, dtype=np.int16)])
    out = trim_silence(audio, 22050, lead_ms=0, trail_ms=20)
    assert len(out) < len(audio) and out[-1] == 0


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/cache/piper/en_US-joe-medium.onnx", "joe"),
        ("de_DE-thorsten-high.onnx", "thorsten"),
        ("my.onnx", "my"),
    ],
)
def test_voice_name(path: str, name: str) -> None:
    """The name ``/v1/realtime`` announces: the one in Piper's file name."""
    assert voice_name(path) == name


def test_the_voice_is_named_after_its_file(piper: TTS) -> None:
    assert piper.voice == "joe"  # en_US-joe-medium.onnx, the default voice
