"""The faster-whisper engine's fast path: one utterance decoded in a short window.

:class:`WindowDecoder` runs the model for
:meth:`asr.faster_whisper.FasterWhisperASR.transcribe_window`; the pure decisions it
relies on (which window, whether to trust the result) are in :mod:`asr.window`. This
module holds the decode itself, its constants and the figures that chose them.

**The decode.** Audio up to ``window_s - 1`` s (``window_s`` = 10 by default, so up to
9 s). faster-whisper pads every input to Whisper's 30 s window and the encoder
dominates; here the log-mel features come from the model's own extractor (its last frame dropped, as
``generate_segments`` does), are zero-padded (``pad_or_trim``'s value) to a 10 s
window of 1000 frames, and go to ``ctranslate2.models.Whisper.generate`` directly,
with faster-whisper's settings: prompt ``<|startoftranscript|> <|notimestamps|>`` for
an English-only model (language and ``<|transcribe|>`` added for a multilingual one),
``suppress_blank``, ``suppress_tokens=[-1]`` resolved by ``get_suppressed_tokens``,
``beam_size`` from the config. What comes back is checked, and anything doubtful
goes to the full path (faster-whisper's ``transcribe``) instead:

* no-speech probability > 0.6 and average log-probability < -1.0, or a text without
  a word (Whisper's "." for silence): silence, "" (:func:`asr.window.judge_window`);
* no-speech probability > 0.6 but confident words: the full window judges (silence
  sits on the -1.0 line: 3 s of zeros decoded "." at -0.99 here, and 1 s at -0.97
  with AVX2 int8 kernels, so confidence alone cannot tell silence on every CPU);
* average log-probability < -1.0: unsure, the full window judges;
* :func:`asr.window.looks_degenerate`: the token budget ran out (``8/s * audio + 10``
  tokens, so a loop is cut early), more than ``5/s * audio + 3`` words, or an n-gram
  repeated back to back (a window only as long as the audio loops: WER 117-412 %,
  measured on a 2-core EPYC in 2026-11).

A 50 ms lead-in of silence goes before the audio: a clip whose speech starts at
its first sample was misheard more often in the short window ("What is the capital
of Friends?"; 12-question set 19.8 % vs 18.1 % WER for the full path without it).
Lead-ins of 0.05-0.2 s all helped, by similar amounts (a few words apart);
0.05 s had the lowest WER averaged over the three sets below.

Measured (tiny.en int8, beam 1, 2 shared cores, espeak-ng en-us+f3 150 wpm unless
noted; WER over all words, case and punctuation folded; "framed" = 150 ms of silence
before, 300 ms after, as the VAD delivers an utterance):

=====================================  ==============  ==============
set                                    fast path WER   full path WER
=====================================  ==============  ==============
12 questions, 0.9-7.1 s (116 words)    12.1 %          18.1 %
same, framed                           12.1 %          14.7 %
32 sentences x f3/m3 x bare/framed     12.6 %          14.9 %
24 held-out, same 4 conditions         14.6 %          16.4 %
=====================================  ==============  ==============

Median decode on the 12-question set 121-157 ms on the fast path vs 341-477 ms on
the full path (four runs; the spread is other load on the machine). By clip length,
under heavy load (1 / 3 / 6 / 9 s): fast 136-192 / 113-180 / 200-344 / 232-362 ms,
full 552-1210 / 633-1382 / 606-1289 / 648-1723 ms; about 3x in every run. 3 of 248
clips fell back (low confidence or high no-speech probability). A fallback costs
the fast attempt on top of the full decode: a decode forced to run into its token
budget (end-of-text suppressed) added 0.2-0.5 s. The two paths differ in single
words here and there, in both directions; on these sets the fast one was slightly
better, not worse.

Shorter windows for shorter clips: where the encoder is slow (``asr.short_windows``, below the table).
First measured as follows. ``windows=(4, 5, 6, 8)``
decodes a clip in the smallest window leaving it 1 s of room
(:func:`asr.window.choose_window`; a rejected decode tries the 10 s window before the
30 s one). The encoder is a small part of a short decode (10 s / 4 s window: 35 / 13 ms
on AVX-512 BF16, 69 / 24 ms on emulated AVX2), and about one decode in five in a 4-8 s window
was rejected by the guards, mostly a loop run into its token budget (none got through),
which costs a second decode. So the median gained 10-30 ms, the p90 lost 100-190 ms and
the WER 0.8-1.3 points (held-out sentences: 1.6-2.3). Measured 2026-12-01 on a 2-core
AMD EPYC (shared, load 3-4) by ``benchmarks/bench_asr_window.py`` (AVX2: the same with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 CT2_FORCE_CPU_ISA=AVX2`` and
``--voices en-us+f3 piper``); 12 questions, 32 sentences and 24 held-out ones, espeak-ng
en-us+f3/m3, en-gb+m1 and Piper, bare and framed, 0.6-6.0 s (544 clips; AVX2 272);
decode ms p50 / p90 with any second decode, WER:

=================================  ===  ========================  ==========================
rule                               thr  AVX-512 BF16              AVX2, emulated on AVX-512
=================================  ===  ========================  ==========================
10 s only (the default)            1    154 / 263 ms, 13.3 %      188 / 263 ms, 12.2 %
"                                  2    157 / 265 ms, 13.3 %      191 / 253 ms, 12.2 %
smallest with 1 s room, then 10 s  1    141 / 394 ms, 14.6 %      158 / 434 ms, 13.3 %
"                                  2    143 / 401 ms, 14.6 %      162 / 443 ms, 13.3 %
room max(1 s, 50 %), then 10 s     1    144 / 367 ms, 14.1 %      162 / 426 ms, 13.1 %
"                                  2    149 / 381 ms, 14.1 %      169 / 426 ms, 13.1 %
smallest with 1 s room, then 30 s  1    141 / 657 ms, 14.6 %      158 / 802 ms, 13.0 %
=================================  ===  ========================  ==========================

**Shorter windows where the encoder is slow** (``asr.short_windows: auto``, the default:
:func:`asr.window.choose_short_windows`, the 10 s window's encoder timed at load, over 120 ms;
"on" and "off" also).
On a 2-core Zen 1 EPYC (AVX2 at half width; encoder 141 / 172 / 236 / 312 ms for a 5 / 6 / 8 /
10 s window, 1 thread, a loaded host) 16 of the 19 rejections in a 5 s window were the sentence
heard and then said again until the token budget ("What time is it? What time is it? What ti"),
its first copy the 10 s window's text: such a loop is now read as its phrase
(:func:`asr.window.repeated_phrase`). And in a short window padded with zeros the sentence's
last mark often became "." or "..." ("How many days are in a week..."), which the end-of-turn
policy reads as trailing off: one question of ``bench_speculation.py`` (both repetitions) then
waited the long wait (2.1 s). Padded with silence it came back ("?"), and silence also brings a sentence said
twice in one breath ("What do these make? What do these make?"), now read once
(:data:`asr.window.MIN_DOUBLED_WORDS`). ``bench_asr_window.py --threads 1 --pads zeros silence
--windows 5 6 8 10 --sets questions held-out --voices en-us+f3 en-gb+m1 piper`` (216 clips),
the rule "smallest window with 1 s of room, then 10 s": zeros in 10 s only (the default
before) p50 / p90 469 / 607 ms, WER 11.9 %, 4 fallbacks, the end mark right in 193 of 216;
short windows padded with silence 327 / 492 ms, WER 12.0 %, 4 fallbacks, 200 of 216; with
zeros 316 / 453 ms, 13.4 %, 188 of 216. So an engine with shorter windows pads them with
silence (``pad_silence`` None); where the encoder is fast (35 ms in 10 s on AVX-512 BF16,
69 ms emulated AVX2) nothing changes. A partial always decodes in the 10 s window
(:meth:`asr.faster_whisper.FasterWhisperASR.transcribe_partial`). **Clips under 1.6 s** (a
word or two) decode in the 10 s window (:data:`asr.window.SHORT_WINDOWS_MIN_AUDIO_S`): Piper's
"Yes.", "Sure,", "No." (1.0-1.4 s framed in 0.3 s of silence) came back doubled ("Yes. Yes.") in
a 5 or 6 s window padded with silence, 10 and 11 of 90 Piper and espeak clips of one to three
words, and 0 of 90 in the 10 s window, padded with silence (WER 13.6 %) or zeros (15.4 %); the 5 s
window with zeros doubled 2 and rejected 15 (session 16, the same EPYC).

**The window's room after the audio** is filled as faster-whisper's ``pad_or_trim`` fills
it: zeros in feature units, which are a steady noise at log10 power -4, not silence.
Whisper's reference pads the audio instead, so its room is silence
(:func:`silence_feature`; openai/whisper changed to that in 2023 for fewer hallucinations).
Suspected of the short windows' rejections, it was measured (``WindowDecoder(pad_silence=True)``,
``bench_asr_window.py --pads zeros silence --windows 5 10 --sets questions held-out --voices
en-us+f3 en-gb+m1 piper``, 216 clips, 1 thread, interleaved clip by clip; 2026-12-04 on a real
2-core AVX2 EPYC, Zen 1, a loaded host: 10 s encoder 373 ms): in the 10 s window silence gave
WER 11.5 % against 12.4 %, 7 fallbacks against 8, the same decode time (p50 607 ms); in a 5 s
window it was rejected *more* often (57 of 189 against 45; with 2-3 s of room 38 % against
28 %). Not the cause, and no clear gain: zeros stay.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asr.window import WINDOW_MARGIN_S, ct2_max_length, judge_window

log = logging.getLogger(__name__)

__all__ = [
    "LEAD_IN_S",
    "MAX_NEW_TOKENS_EXTRA",
    "MAX_NEW_TOKENS_PER_S",
    "WindowDecoder",
    "encoder_ms",
    "silence_feature",
]

#: silence the fast path puts before the audio: speech starting at the very first
#: sample is misheard more often in a short window (see the module docstring)
LEAD_IN_S = 0.05

#: the fast path's token budget, ``ceil(MAX_NEW_TOKENS_PER_S * audio_s) + MAX_NEW_TOKENS_EXTRA``:
#: above the word limit (~1.3 tokens a word), small enough that a loop ends early
MAX_NEW_TOKENS_PER_S = 8.0
MAX_NEW_TOKENS_EXTRA = 10

#: audio whose loudest sample is below this (-70 dBFS) is silence without a decode: in a window
#: padded with silence Whisper hears "you" in digital silence (no-speech 0.99, log-prob -0.77)
SILENT_PEAK = 10 ** (-70 / 20)

#: the normalized log-mel of digital silence (log10 of the extractor's 1e-10 floor, mapped
#: by ``(x + 4) / 4``), for a clip so quiet that its own floor (max - 8) lies below it
_SILENT_FEATURE = (-10.0 + 4.0) / 4.0


class WindowDecoder:
    """The short-window decode: prompt, suppression list and shapes, fixed at load.

    Immutable after ``__init__``, so one instance serves concurrent calls (the
    feature extractor is only read: it is called without ``chunk_length``, which
    would overwrite its window size).
    """

    def __init__(
        self, model: Any, *, language: str, beam_size: int, window_s: float, pad_silence: bool = False
    ) -> None:
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        extractor = model.feature_extractor
        self.frames_per_s: float = extractor.sampling_rate / extractor.hop_length
        self.window_s = window_s
        self.max_audio_s = window_s - WINDOW_MARGIN_S
        self.sample_rate_hz: int = extractor.sampling_rate
        self.beam_size = beam_size
        multilingual = bool(model.model.is_multilingual)
        # as WhisperModel.transcribe: an English-only model always decodes "en"
        tokenizer = Tokenizer(
            model.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=language if multilingual else "en",
        )
        self.tokenizer = tokenizer
        # get_prompt(without_timestamps=True), no previous text: sot [lang transcribe] notimestamps
        self.prompt: list[int] = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        # faster-whisper's default suppress_tokens=[-1]: the model's non-speech symbols
        # plus the task and special tokens
        self.suppress_tokens: list[int] = list(get_suppressed_tokens(tokenizer, [-1]))
        self.max_length: int = model.max_length  # the decoder's 448 positions
        self.pad_silence = pad_silence

    def decode(
        self,
        model: Any,
        samples: NDArray[np.float32],
        audio_s: float,
        window_s: float,
        *,
        wanted: Callable[[], object] | None = None,
    ) -> str | None:
        """The text, "" for silence, or None when the full window should decode instead.

        ``wanted`` is called between the encoder and the decoder (which are one ``generate``
        otherwise): it raises (:class:`asr.base.DecodeUnwanted`) to stop a decode nobody will
        use. The encoder is 40-60 % of a short decode on a 2-core AVX2 EPYC; the decoder,
        token by token, the rest, and it cannot be stopped once begun."""
        import ctranslate2

        if not samples.size or float(np.max(np.abs(samples))) < SILENT_PEAK:
            return ""  # nothing to hear (digital silence, as a muted phone line sends)
        lead_in = np.zeros(round(LEAD_IN_S * self.sample_rate_hz), dtype=np.float32)
        features = model.feature_extractor(np.concatenate([lead_in, samples]))
        # as generate_segments: the last frame (from the extractor's 160-sample tail
        # padding) is not content; the room after it is zeros, as pad_or_trim pads (or
        # silence, with pad_silence: measured, not better; see the module docstring)
        content = features[:, : features.shape[-1] - 1]
        frames = max(round(window_s * self.frames_per_s), content.shape[1])
        room = silence_feature(features) if self.pad_silence else 0.0
        padded = np.full((1, content.shape[0], frames), room, dtype=np.float32)
        padded[0, :, : content.shape[1]] = content
        max_new_tokens = min(
            math.ceil(MAX_NEW_TOKENS_PER_S * audio_s) + MAX_NEW_TOKENS_EXTRA,
            self.max_length // 2 - len(self.prompt),
        )
        encoded = model.model.encode(ctranslate2.StorageView.from_array(padded))
        if wanted is not None:
            wanted()
        result = model.model.generate(
            encoded,
            [self.prompt],
            beam_size=self.beam_size,
            patience=1.0,
            length_penalty=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            max_length=ct2_max_length(max_new_tokens, len(self.prompt), self.max_length),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self.suppress_tokens,
        )[0]
        tokens: list[int] = result.sequences_ids[0]
        # faster-whisper's recovery of the average log-probability (length_penalty 1)
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        text = str(self.tokenizer.decode(tokens)).strip()
        no_speech, hit_max = float(result.no_speech_prob), len(tokens) >= max_new_tokens
        verdict = judge_window(
            text, audio_s, no_speech_prob=no_speech, avg_logprob=float(avg_logprob), hit_max_length=hit_max
        )
        if verdict is None:  # why, for the server's log (-v): a rejection costs a slow decode
            log.info(
                "asr: the short window heard %r in %.1f s (no-speech %.2f, log-prob %.2f, %d tokens%s): "
                "not trusted", text, audio_s, no_speech, avg_logprob, len(tokens),
                ", budget hit" if hit_max else "",
            )  # fmt: skip
        return verdict


def encoder_ms(model: Any, window_s: float, reps: int = 2) -> float:
    """ms the encoder alone takes for a ``window_s`` window: the fastest of ``reps`` after one
    warm-up call (a decode is this plus one decoder step per token)."""
    import ctranslate2

    extractor = model.feature_extractor
    frames = round(window_s * extractor.sampling_rate / extractor.hop_length)
    mels = np.zeros((1, extractor.mel_filters.shape[0], frames), dtype=np.float32)
    times = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        model.model.encode(ctranslate2.StorageView.from_array(mels))
        if rep:  # the first call allocates
            times.append((time.perf_counter() - t0) * 1000)
    return min(times)


def silence_feature(features: NDArray[np.float32]) -> float:
    """The normalized log-mel that zero samples after the audio of ``features`` would get
    (what Whisper's reference pads a window with).

    The extractor floors every log10 mel power at the clip's maximum less 8 (and at log10
    1e-10), then maps ``x`` to ``(x + 4) / 4``: so silence is the features' maximum less 2,
    or the absolute floor for a clip quieter than that.
    """
    if not features.size:
        return _SILENT_FEATURE
    return max(float(features.max()) - 2.0, _SILENT_FEATURE)
