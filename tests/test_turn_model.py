"""Smart Turn v3.2 (the audio end-of-turn model) with the real model file, on espeak-ng speech."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from speech import espeak

from vad.base import ModelStopped, StopSignal, TurnModel
from vad.smart_turn import FRAMES, N_MELS, WINDOW_SAMPLES, SmartTurn, TurnFeatures, window_audio
from voice_pipeline.bench.paused import find_gaps
from voice_pipeline.errors import AudioInputError, EngineError, ModelError
from voice_pipeline.models import ModelPaths

pytestmark = pytest.mark.real_models

RATE = 16000


def test_features_are_what_the_model_was_trained_on() -> None:
    """The reference: transformers' WhisperFeatureExtractor(chunk_length=8) with
    do_normalize on the left-padded last 8 s (as Smart Turn's own inference code)."""
    from transformers import WhisperFeatureExtractor

    ref_fe = WhisperFeatureExtractor(chunk_length=8)
    mine = TurnFeatures()
    for audio in (espeak("What is the capital of France?"), np.zeros(RATE, np.float32)):
        ref = ref_fe(
            window_audio(audio),
            sampling_rate=RATE,
            return_tensors="np",
            padding="max_length",
            max_length=WINDOW_SAMPLES,
            truncation=True,
            do_normalize=True,
        ).input_features
        got = mine(audio)
        assert got.shape == ref.shape == (1, N_MELS, FRAMES)
        assert got.dtype == np.float32
        assert np.abs(got - ref).max() < 1e-4


def test_window_keeps_the_end_and_pads_on_the_left() -> None:
    short = np.ones(RATE, np.float32)
    w = window_audio(short)
    assert len(w) == WINDOW_SAMPLES and w[-RATE:].min() == 1.0 and w[:-RATE].max() == 0.0
    long = np.arange(10 * RATE, dtype=np.float32)
    assert np.array_equal(window_audio(long), long[-WINDOW_SAMPLES:])
    with pytest.raises(AudioInputError):
        window_audio(np.zeros((2, 100), np.float32))


def test_a_finished_question_sounds_finished(smart_turn: TurnModel) -> None:
    for voice in ("en-us+f3", "en-us+m3", "en-gb+m1"):
        p = smart_turn.p_complete(espeak("What is the capital of France?", voice=voice))
        assert p > 0.8, (voice, p)


def test_a_sentence_cut_after_um_sounds_unfinished(smart_turn: TurnModel) -> None:
    """Spoken whole, with commas ("So, um, I was wondering, ..."), then cut at the pause
    after "um": the intonation says more is coming (measured 0.01 in three voices)."""
    for voice in ("en-us+f3", "en-us+m3", "en-gb+m1"):
        audio = espeak("So, um, I was wondering, if you could help me.", voice=voice)
        gaps = find_gaps(audio, RATE, 3)
        assert len(gaps) == 3
        cut = audio[: gaps[1][0] + RATE // 20]  # "So, um" and 50 ms of the pause
        p = smart_turn.p_complete(cut)
        assert p < 0.5, (voice, p)


def test_silence_and_odd_lengths_do_not_crash(smart_turn: TurnModel) -> None:
    for n in (0, 1, 160, 9 * RATE):
        p = smart_turn.p_complete(np.zeros(n, np.float32))
        assert 0.0 <= p <= 1.0


def test_a_bad_model_file_is_a_clear_error(tmp_path: Path, model_paths: ModelPaths) -> None:
    with pytest.raises(ModelError, match="voice-pipeline models"):
        SmartTurn(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="cannot load"):
        SmartTurn(junk)
    assert model_paths.turn is not None
    closed = SmartTurn(model_paths.turn)
    closed.close()
    closed.close()  # idempotent
    with pytest.raises(EngineError):
        closed.p_complete(np.zeros(RATE, np.float32))


def test_a_stopped_verdict_stops_the_model_and_the_next_one_runs(smart_turn: TurnModel) -> None:
    """Speech resumed: the session stops the void verdict's run (onnxruntime's terminate flag),
    before it began or while it runs; the shared model then answers the next pause as before."""
    audio = espeak("What is the capital of France?", voice="en-us+m3")
    p = smart_turn.p_complete(audio)
    assert smart_turn.p_complete(audio, stop=StopSignal()) == pytest.approx(p)  # never stopped
    before = StopSignal()
    before.stop()
    with pytest.raises(ModelStopped):
        smart_turn.p_complete(audio, stop=before)

    class StoppedWhileItRuns(StopSignal):
        def on_stop(self, hook: Callable[[], None]) -> None:
            super().on_stop(hook)
            threading.Thread(target=lambda: (time.sleep(0.02), self.stop())).start()

    with pytest.raises(ModelStopped):
        smart_turn.p_complete(audio, stop=StoppedWhileItRuns())
    assert smart_turn.p_complete(audio) == pytest.approx(p)
