"""The full path: faster-whisper's own ``transcribe`` on Whisper's 30 s window, for audio
longer than the fast path takes (:mod:`asr.fast_path`) and for the fast path's rejects.

Decode options of the full path (faster-whisper's ``transcribe``), and why (figures
measured on the project's 2-core machines, and the tests of :mod:`asr.faster_whisper`):

``beam_size=cfg.beam_size`` (1)
    Greedy by default. Beam 5 doubled the decode time (1.0 s vs 0.5 s on a 2.6 s
    question); it is a config choice, not hard-wired.
``temperature=0.0`` only
    No temperature fallback: a low-confidence decode is not re-run up to five
    times at higher (sampled) temperatures, each re-run a full decode that can
    blow the latency budget. Decodes stay deterministic, so re-decoding the same
    audio gives the same words (what LocalAgreement compares).
``without_timestamps=True``, ``word_timestamps=False``
    One decoding pass per 30 s window, no timestamp tokens. faster-whisper's
    defaults (timestamps on) ran a second pass at 6 s (706 ms vs 401 ms) and
    hallucinated; ``word_timestamps`` together with ``without_timestamps``
    hallucinated "Thank you.".
``condition_on_previous_text=False``
    Every call decodes one whole utterance; there is no previous text to condition
    on, and conditioning is how one bad window contaminates the next.
``vad_filter=False``
    The pipeline's own VAD has already cut the utterance; a second (Silero) pass
    would cost time and could clip the pre-roll.
``no_speech_threshold=0.6``, ``log_prob_threshold=-1.0``
    faster-whisper's own values, passed explicitly because they are the silence
    guard: a window whose no-speech probability is above 0.6 *and* whose average
    token log-probability is below -1.0 is dropped. With this,
    pure silence and low-level noise decode to "" (measured: 0.5-7 s of zeros, 1-3 s
    of noise at -50 dBFS), not to "Thank you.". 8 s and more of digital zeros
    decode to "you" on this path (not on the fast path, which takes up to 9 s).
``chunk_length`` is never passed
    It did not make decoding faster, and it overwrites the shared feature
    extractor's window size, which would race between threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from asr.window import LOG_PROB_THRESHOLD, NO_SPEECH_THRESHOLD

__all__ = ["decode_full"]


def decode_full(model: Any, samples: NDArray[np.float32], *, language: str, beam_size: int) -> str:
    """The text of ``samples`` (mono float32, 16 kHz) decoded by ``model`` (a faster-whisper
    ``WhisperModel``) with the options above; its segments joined. Blocking."""
    segments, _info = model.transcribe(
        samples,
        language=language,
        beam_size=beam_size,
        temperature=0.0,
        without_timestamps=True,
        word_timestamps=False,
        condition_on_previous_text=False,
        vad_filter=False,
        no_speech_threshold=NO_SPEECH_THRESHOLD,
        log_prob_threshold=LOG_PROB_THRESHOLD,
    )
    pieces = [segment.text.strip() for segment in segments]  # lazy: decoding happens here
    return " ".join(piece for piece in pieces if piece)
