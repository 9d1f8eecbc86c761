"""``SmartTurn``: an audio turn-completion model (Smart Turn v3.2, BSD-2) under onnxruntime.

Given the user's utterance so far, it answers P(complete): does this *sound* like
the end of a turn (intonation, drawn-out final syllables, a breath taken to go on)?
The end-of-turn policy (:mod:`vad.end_of_turn`) combines it with the words and the
silence. The model file ships inside the ``pipecat-ai`` wheel (installed with
``--no-deps``; nothing else of Pipecat is used) and is prepared and checksummed by
``voice-pipeline models``.

Input, as the model was trained (verified against transformers'
``WhisperFeatureExtractor(chunk_length=8)`` in tests/test_turn_model.py):

1. the last 8 s of 16 kHz mono audio, left-padded with zeros to exactly 8 s;
2. the whole 8 s normalized to zero mean and unit variance (the padding included);
3. 80-bin Whisper log-mel features of it (n_fft 400, hop 160, the last STFT frame
   dropped, clamped to 8 below the maximum, ``(x + 4) / 4``): shape ``[1, 80, 800]``.
   The mel filters are faster-whisper's (the ASR stage's); the spectrogram is
   computed here in float64, as the reference does.

Output: ``[1, 1]``, P(complete), already through a sigmoid.

Cost: one call is a Whisper-tiny-sized encoder over 8 s, 150-170 ms on one
onnxruntime thread on a 2-core AVX2 EPYC (2026-11); the session runs it in a
worker thread from the first silent frame of a pause, in parallel with the
speculative ASR decode, so it hides in the silence that has to pass anyway.
Thread-safe: one instance serves every session (onnxruntime's ``run`` is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from vad.base import ModelStopped, StopSignal
from voice_pipeline.errors import AudioInputError, ClosedError, EngineError, MissingPackageError, ModelError

SAMPLE_RATE_HZ = 16000
#: seconds of audio the model sees (the end of the utterance)
WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE_HZ
N_MELS = 80
N_FFT = 400
HOP = 160
FRAMES = 800
#: the variance floor of the waveform normalization (transformers' value)
_NORM_EPS = 1e-7


def window_audio(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    """The last :data:`WINDOW_S` seconds of ``audio``, left-padded with zeros to exactly that."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1:
        raise AudioInputError(f"the turn model expects mono 1-D audio, got shape {x.shape}")
    if x.size >= WINDOW_SAMPLES:
        return np.ascontiguousarray(x[-WINDOW_SAMPLES:])
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if x.size:
        out[-x.size :] = x
    return out


class TurnFeatures:
    """Log-mel features as Smart Turn expects them. Immutable: shared between threads.

    The spectrogram is float64 like the reference's (transformers promotes to float64);
    the result agrees with transformers' extractor to about 1e-5. The model is int8
    quantized, and on uncertain inputs its answer is chaotic in the last digits of its
    input: Gaussian noise of 1e-5 on the features moved P(complete) of espeak's "The
    thing is" between 0.08 and 0.56, while a clear case stays put ("What is the
    capital of France?" 0.978-0.982). Treat P as coarse evidence, as the policy does.
    """

    def __init__(self) -> None:
        try:
            from faster_whisper.feature_extractor import FeatureExtractor
        except ImportError as exc:
            raise MissingPackageError("faster-whisper") from exc
        # Slaney-scale mel filters, as Whisper's (and faster-whisper's ASR) features use
        self._mel = np.asarray(FeatureExtractor.get_mel_filters(SAMPLE_RATE_HZ, N_FFT, N_MELS), np.float64)
        self._window = np.hanning(N_FFT + 1)[:-1]  # periodic Hann

    def __call__(self, audio: NDArray[np.float32]) -> NDArray[np.float32]:
        """``[1, 80, 800]`` features of the end of ``audio`` (16 kHz mono float32)."""
        x = window_audio(audio)
        x = (x - x.mean()) / np.sqrt(x.var() + np.float32(_NORM_EPS))  # float32, as the reference
        padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")  # centred frames
        frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
        power = np.abs(np.fft.rfft(frames * self._window, axis=-1)) ** 2  # [801, 201]
        mel = self._mel @ power[:-1].T  # the last frame dropped: [80, 800]
        log_mel = np.log10(np.maximum(mel, 1e-10))
        log_mel = np.maximum(log_mel, log_mel.max() - 8.0)
        out = ((log_mel + 4.0) / 4.0).astype(np.float32)
        if out.shape != (N_MELS, FRAMES):  # pragma: no cover - constants changed
            raise EngineError(f"turn model features have shape {out.shape}, expected (80, 800)")
        batch: NDArray[np.float32] = out[np.newaxis]
        return batch


class SmartTurn:
    """Smart Turn v3.x ONNX model: P(complete) of an utterance. One instance for all sessions."""

    sample_rate_hz: int = SAMPLE_RATE_HZ

    def __init__(self, model_path: Path, *, threads: int = 1) -> None:
        if not model_path.is_file():
            raise ModelError(
                f"turn model {model_path} does not exist (prepare it with: voice-pipeline models)"
            )
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise MissingPackageError("onnxruntime") from exc
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session: Any = ort.InferenceSession(
                str(model_path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"cannot load the turn model {model_path}: {exc}") from exc
        inputs = self._session.get_inputs()
        if len(inputs) != 1 or list(inputs[0].shape)[1:] != [N_MELS, FRAMES]:
            raise ModelError(
                f"{model_path} is not a Smart Turn v3 model (input {[(i.name, i.shape) for i in inputs]})"
            )
        self._input = inputs[0].name
        self._ort: Any = ort
        self._features = TurnFeatures()
        self._path = model_path

    def p_complete(self, audio: NDArray[np.float32], *, stop: StopSignal | None = None) -> float:
        """P(the utterance is complete) from its last 8 s. Blocking: call from a worker thread.

        ``stop`` ends the run within a few ms (onnxruntime's ``RunOptions.terminate``, checked
        between the graph's nodes), where a whole run takes 260-420 ms on a 2-core AVX2 EPYC."""
        session = self._session
        if session is None:
            raise ClosedError("SmartTurn")
        if stop is not None and stop.stopped:
            raise ModelStopped("turn model stopped before it ran")
        features = self._features(audio)
        options = self._ort.RunOptions()
        if stop is not None:
            stop.on_stop(lambda: setattr(options, "terminate", True))
        try:
            out = session.run(None, {self._input: features}, options)
        except Exception as exc:
            if stop is not None and stop.stopped:
                raise ModelStopped("turn model stopped") from exc
            raise EngineError(f"turn model failed: {exc}", retryable=False) from exc
        p = float(np.asarray(out[0]).reshape(-1)[0])
        if not np.isfinite(p):
            raise EngineError("turn model returned a non-finite probability", retryable=False)
        return min(1.0, max(0.0, p))

    def close(self) -> None:
        """Release the model. Idempotent; later calls raise EngineError."""
        self._session = None

    def __repr__(self) -> str:
        return f"SmartTurn({str(self._path)!r})"
