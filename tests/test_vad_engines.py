"""The real VAD engines (Silero ONNX, WebRTC) on real espeak-ng speech, and the
Endpointer driven by them. Nothing is skipped: the models ship in pip wheels. The
tests that load the Silero model are marked ``real_models``; the model-file and
argument checks are not."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray
from speech import concat, espeak, silence

from vad import build_vad
from vad.base import VAD
from vad.endpointer import EndOfTurn, Endpointer, PauseStarted, SpeechStarted
from vad.silero import SileroVAD, bundled_model_path
from vad.webrtc import WebRTCVAD, float_to_pcm16
from voice_pipeline.config import VADConfig
from voice_pipeline.errors import AudioInputError, ConfigError, EngineError, ModelError

TEXT_1 = "The quick brown fox jumps over the lazy dog."
TEXT_2 = "Please turn off the lights in the kitchen."
RATES = (16000, 8000)
ENGINES = ("silero", "webrtc")
# WebRTC's noise model adapts during the first ~100 ms: frames before this may read 1.0
WARMUP_S = 0.3

Audio = NDArray[np.float32]


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def vad_engines(silero16: VAD) -> dict[tuple[str, int], VAD]:
    """Every engine at every rate, built once (Silero 16 kHz is the session's shared one)."""
    cfg = VADConfig()
    engines: dict[tuple[str, int], VAD] = {}
    for rate in RATES:
        engines["silero", rate] = silero16 if rate == 16000 else SileroVAD(cfg, rate, None)
        engines["webrtc", rate] = WebRTCVAD(cfg, rate)
    return engines


@pytest.fixture(scope="session")
def utterances() -> dict[tuple[str, int], Audio]:
    """espeak-ng speech with its own leading/trailing silence trimmed: speech from
    the first to the last sample."""
    out: dict[tuple[str, int], Audio] = {}
    for text in (TEXT_1, TEXT_2):
        for rate in RATES:
            audio = espeak(text, rate)
            loud = np.flatnonzero(np.abs(audio) > 0.01)
            out[text, rate] = audio[loud[0] : loud[-1] + 1]
    return out


def with_noise(audio: Audio, seed: int = 0) -> Audio:
    """Add -60 dBFS white noise so that "silence" is not digital zeros."""
    rng = np.random.default_rng(seed)
    return (audio + rng.normal(0.0, 0.001, audio.size)).astype(np.float32)


def frame_times(vad: VAD, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(start, end) in seconds of n frames."""
    starts = np.arange(n) * vad.frame_samples / vad.sample_rate_hz
    return starts, starts + vad.frame_samples / vad.sample_rate_hz


def push_in_chunks(vad: VAD, audio: Audio, sizes: Callable[[], int]) -> list[float]:
    stream = vad.stream()
    probs: list[float] = []
    i = 0
    while i < audio.size:
        n = sizes()
        probs.extend(stream.push(audio[i : i + n]))
        i += n
    return probs


ENGINE_RATES = [(e, r) for e in ENGINES for r in RATES]
IDS = [f"{e}-{r // 1000}k" for e, r in ENGINE_RATES]


# ------------------------------------------------------------------ scoring


@pytest.mark.real_models  # loads the Silero model
@pytest.mark.parametrize(("engine", "rate"), ENGINE_RATES, ids=IDS)
def test_speech_scores_high_and_silence_low(
    engine: str,
    rate: int,
    vad_engines: dict[tuple[str, int], VAD],
    utterances: dict[tuple[str, int], Audio],
) -> None:
    vad = vad_engines[engine, rate]
    speech = utterances[TEXT_1, rate]
    lead_s, tail_s = 1.0, 1.0
    audio = with_noise(concat(silence(lead_s, rate), speech, silence(tail_s, rate)))
    probs = np.array(vad.stream().push(audio))
    assert len(probs) == audio.size // vad.frame_samples

    start, end = frame_times(vad, len(probs))
    speech_end_s = lead_s + speech.size / rate
    in_speech = (start >= lead_s) & (end <= speech_end_s)
    before = (start >= WARMUP_S) & (end <= lead_s - 0.05)
    after = start >= speech_end_s + 0.3  # models keep a short hangover after speech

    assert in_speech.sum() > 60 and before.sum() > 15 and after.sum() > 15
    # espeak leaves short gaps between some words, so not every speech frame is voiced
    assert probs[in_speech].mean() >= 0.8
    assert (probs[in_speech] >= 0.5).mean() >= 0.85
    assert probs[before].max() < 0.2
    assert probs[after].max() < 0.2


@pytest.mark.real_models  # loads the Silero model
@pytest.mark.parametrize(("engine", "rate"), ENGINE_RATES, ids=IDS)
def test_chunking_does_not_change_the_scores(
    engine: str,
    rate: int,
    vad_engines: dict[tuple[str, int], VAD],
    utterances: dict[tuple[str, int], Audio],
) -> None:
    vad = vad_engines[engine, rate]
    audio = with_noise(concat(silence(0.3, rate), utterances[TEXT_1, rate], silence(0.3, rate)))
    whole = vad.stream().push(audio)
    chunk_20ms = push_in_chunks(vad, audio, lambda: rate // 50)
    rng = np.random.default_rng(1)
    ragged = push_in_chunks(vad, audio, lambda: int(rng.integers(1, 2000)))
    assert len(whole) == len(chunk_20ms) == len(ragged) == audio.size // vad.frame_samples
    np.testing.assert_allclose(chunk_20ms, whole, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ragged, whole, rtol=0, atol=1e-6)


@pytest.mark.real_models  # loads the Silero model
@pytest.mark.parametrize(("engine", "rate"), ENGINE_RATES, ids=IDS)
def test_streams_are_independent_and_reset_restores_a_fresh_stream(
    engine: str,
    rate: int,
    vad_engines: dict[tuple[str, int], VAD],
    utterances: dict[tuple[str, int], Audio],
) -> None:
    vad = vad_engines[engine, rate]
    a = with_noise(utterances[TEXT_1, rate], seed=2)
    b = with_noise(utterances[TEXT_2, rate], seed=3)
    expected_a, expected_b = vad.stream().push(a), vad.stream().push(b)

    sa, sb = vad.stream(), vad.stream()
    got_a: list[float] = []
    got_b: list[float] = []
    step = rate // 50
    for i in range(0, max(a.size, b.size), step):  # interleaved on one shared engine
        got_a += sa.push(a[i : i + step])
        got_b += sb.push(b[i : i + step])
    np.testing.assert_allclose(got_a, expected_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_b, expected_b, rtol=0, atol=1e-6)

    sa.push(a[: a.size // 2 + 7])  # leaves model state and a partial frame behind
    sa.reset()
    np.testing.assert_allclose(sa.push(b), expected_b, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ endpointing


@pytest.mark.real_models  # loads the Silero model
@pytest.mark.parametrize(("engine", "rate"), ENGINE_RATES, ids=IDS)
def test_endpointer_finds_two_turns_at_the_true_speech_ends(
    engine: str,
    rate: int,
    vad_engines: dict[tuple[str, int], VAD],
    utterances: dict[tuple[str, int], Audio],
) -> None:
    cfg = VADConfig()
    vad = vad_engines[engine, rate]
    s1, s2 = utterances[TEXT_1, rate], utterances[TEXT_2, rate]
    parts = [silence(0.8, rate), s1, silence(1.0, rate), s2, silence(1.0, rate)]
    audio = with_noise(concat(*parts))
    starts_true = [parts[0].size, parts[0].size + s1.size + parts[2].size]
    ends_true = [starts_true[0] + s1.size, starts_true[1] + s2.size]

    stream, ep = vad.stream(), Endpointer(cfg, rate, vad.frame_samples)
    actions = []
    step = rate // 50
    for i in range(0, audio.size, step):
        for p in stream.push(audio[i : i + step]):
            actions.extend(ep.update(p))

    started = [a for a in actions if isinstance(a, SpeechStarted)]
    ended = [a for a in actions if isinstance(a, EndOfTurn)]
    assert len(started) == 2 and len(ended) == 2, actions
    tolerance = round(0.15 * rate)
    end_silence = cfg.end_silence_ms * rate // 1000
    for st, eot, t0, t1 in zip(started, ended, starts_true, ends_true, strict=True):
        assert abs(st.onset_sample - t0) <= tolerance
        assert st.start_sample <= t0  # pre-roll covers the first phoneme
        assert abs(eot.speech_end_sample - t1) <= tolerance
        silence_heard = eot.decided_sample - eot.speech_end_sample
        assert end_silence <= silence_heard < end_silence + vad.frame_samples
    # every pause inside a turn is reported before the turn ends
    last_pause = [a for a in actions if isinstance(a, PauseStarted)][-1]
    assert last_pause.speech_end_sample == ended[-1].speech_end_sample


# ------------------------------------------------------------------ construction and errors


@pytest.mark.real_models  # loads the Silero model
def test_factory_builds_both_engines() -> None:
    assert isinstance(build_vad(VADConfig(engine="webrtc"), 8000), WebRTCVAD)
    silero = build_vad(VADConfig(engine="silero"), 16000)
    assert isinstance(silero, SileroVAD)
    assert (silero.sample_rate_hz, silero.frame_samples) == (16000, 512)
    silero.close()


@pytest.mark.real_models  # loads the Silero model
def test_silero_frame_sizes() -> None:
    assert SileroVAD(VADConfig(), 8000, None).frame_samples == 256
    assert WebRTCVAD(VADConfig(), 8000).frame_samples == 240
    assert WebRTCVAD(VADConfig(), 16000).frame_samples == 480


@pytest.mark.real_models  # loads the Silero model
def test_building_silero_does_not_import_torch_or_silero_vad() -> None:
    code = (
        "import sys\n"
        "from vad.silero import SileroVAD\n"
        "from voice_pipeline.config import VADConfig\n"
        "import numpy as np\n"
        "s = SileroVAD(VADConfig(), 16000, None).stream()\n"
        "assert len(s.push(np.zeros(1024, np.float32))) == 2\n"
        "bad = sorted(m for m in ('torch', 'silero_vad') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_bundled_model_is_found() -> None:
    path = bundled_model_path()
    assert path.name == "silero_vad.onnx" and path.is_file()


def test_missing_model_file_is_a_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelError, match="not found"):
        SileroVAD(VADConfig(), 16000, missing)
    with pytest.raises(ModelError, match="not found"):
        SileroVAD(VADConfig(model_path=str(missing)), 16000, None)


def test_corrupt_or_foreign_model_is_a_model_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not an onnx model")
    with pytest.raises(ModelError, match="cannot load"):
        SileroVAD(VADConfig(), 16000, junk)


@pytest.mark.parametrize("rate", [22050, 44100, 32000])
def test_unsupported_rate_is_a_config_error(rate: int) -> None:
    with pytest.raises(ConfigError):
        SileroVAD(VADConfig(), rate, None)
    if rate != 32000:
        with pytest.raises(ConfigError):
            WebRTCVAD(VADConfig(), rate)


@pytest.mark.real_models  # loads the Silero model
@pytest.mark.parametrize("engine", ENGINES)
def test_non_mono_audio_is_an_input_error(engine: str, vad_engines: dict[tuple[str, int], VAD]) -> None:
    stream = vad_engines[engine, 16000].stream()
    with pytest.raises(AudioInputError):
        stream.push(np.zeros((2, 480), dtype=np.float32))


@pytest.mark.real_models  # loads the Silero model
def test_a_closed_silero_engine_refuses_to_score() -> None:
    vad = SileroVAD(VADConfig(), 16000, None)
    stream = vad.stream()
    assert len(stream.push(np.zeros(512, dtype=np.float32))) == 1
    vad.close()
    vad.close()  # idempotent
    assert stream.push(np.zeros(100, dtype=np.float32)) == []  # no complete frame, no model
    with pytest.raises(EngineError):
        stream.push(np.zeros(512, dtype=np.float32))


def test_float_to_pcm16_scales_and_clips() -> None:
    x = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0], dtype=np.float32)
    pcm = np.frombuffer(float_to_pcm16(x), dtype="<i2")
    assert pcm.tolist() == [-32768, -32768, -16384, 0, 16384, 32767, 32767]
