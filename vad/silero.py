"""Silero VAD run by onnxruntime alone (no torch).

The ONNX file bundled in the ``silero-vad`` package is located without importing
``silero_vad`` (its ``__init__`` imports torch and sets torch's thread count to 1
for the whole process). One :class:`onnxruntime.InferenceSession` is shared by all
streams; each :class:`SileroVADStream` keeps its own RNN state, context and
partial-frame buffer.

Model contract (checked at load): inputs ``input`` float32 [1, context + window],
``state`` float32 [2, 1, 128], ``sr`` int64 scalar; outputs ``output`` [1, 1]
(speech probability) and ``stateN``. Every window must be preceded by the last
``context`` samples of the previous input (zeros at the start), otherwise the
probabilities are garbage.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vad.base import FrameSplitter
from voice_pipeline.errors import (
    ClosedError,
    ConfigError,
    MissingPackageError,
    ModelError,
)

if TYPE_CHECKING:
    from voice_pipeline.config import VADConfig

#: samples per scored window, by sample rate
WINDOW_SAMPLES = {16000: 512, 8000: 256}
#: samples of the previous input prepended to each window, by sample rate
CONTEXT_SAMPLES = {16000: 64, 8000: 32}
_STATE_SHAPE = (2, 1, 128)
_INPUTS = {"input", "state", "sr"}


def bundled_model_path() -> Path:
    """``silero_vad/data/silero_vad.onnx`` of the installed package, found without importing it."""
    # find_spec on a top-level name locates the package without executing its __init__
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError("silero-vad", "--no-deps silero-vad")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


class SileroVAD:
    """Silero VAD v5/v6 ONNX engine; 512-sample windows at 16 kHz, 256 at 8 kHz."""

    def __init__(self, cfg: VADConfig, sample_rate_hz: int, model_path: Path | None) -> None:
        if sample_rate_hz not in WINDOW_SAMPLES:
            raise ConfigError(f"vad: Silero supports 8000 or 16000 Hz, not {sample_rate_hz} (resample first)")
        if model_path is None:
            model_path = Path(cfg.model_path) if cfg.model_path else bundled_model_path()
        if not model_path.is_file():
            raise ModelError(
                f"Silero VAD model not found at {model_path}; set vad.model_path to a "
                "silero_vad.onnx file or reinstall the 'silero-vad' package"
            )
        self.sample_rate_hz = sample_rate_hz
        self.frame_samples = WINDOW_SAMPLES[sample_rate_hz]
        self.context_samples = CONTEXT_SAMPLES[sample_rate_hz]
        self.model_path = model_path
        self._session: Any = _load_session(model_path, cfg.threads)
        self._sr = np.array(sample_rate_hz, dtype=np.int64)

    def stream(self) -> SileroVADStream:
        """A new per-session scorer sharing this engine's model."""
        return SileroVADStream(self)

    def close(self) -> None:
        """Release the model. Idempotent; streams of a closed engine raise EngineError."""
        self._session = None

    def _run(
        self, window: NDArray[np.float32], state: NDArray[np.float32]
    ) -> tuple[float, NDArray[np.float32]]:
        """Score one [1, context + window] input; return (probability, new state)."""
        session = self._session
        if session is None:
            raise ClosedError("the Silero VAD engine")
        out, new_state = session.run(None, {"input": window, "state": state, "sr": self._sr})
        return float(out[0, 0]), new_state


class SileroVADStream:
    """Per-session Silero scorer: RNN state, context and a partial-frame buffer."""

    def __init__(self, engine: SileroVAD) -> None:
        self._engine = engine
        self.frame_samples = engine.frame_samples
        self._context = engine.context_samples
        # [context | window] buffer reused for every window
        self._input = np.zeros((1, self._context + self.frame_samples), dtype=np.float32)
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._frames = FrameSplitter(self.frame_samples)

    def push(self, samples: NDArray[np.float32]) -> list[float]:
        """Add mono float32 samples (any length); one probability per completed frame."""
        audio = self._frames.split(samples)
        n = self.frame_samples
        probs: list[float] = []
        buf, ctx = self._input, self._context
        for start in range(0, audio.size, n):
            buf[0, ctx:] = audio[start : start + n]
            prob, self._state = self._engine._run(buf, self._state)
            probs.append(prob)
            buf[0, :ctx] = buf[0, -ctx:]  # this window's tail is the next one's context
        return probs

    def reset(self) -> None:
        """Forget the RNN state, the context and any buffered partial frame."""
        self._input.fill(0.0)
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._frames.reset()


def _load_session(model_path: Path, threads: int) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise MissingPackageError("onnxruntime") from exc
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    # the model is tiny; busy-waiting worker threads would only steal CPU from ASR/LLM/TTS
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelError(f"cannot load Silero VAD model {model_path}: {exc}") from exc
    names = {i.name for i in session.get_inputs()}
    if names != _INPUTS or len(session.get_outputs()) != 2:
        raise ModelError(
            f"{model_path} is not a Silero VAD v5/v6 ONNX model "
            f"(inputs {sorted(names)}, expected {sorted(_INPUTS)})"
        )
    return session
