"""The fast path's pure decisions: which short window a clip decodes in, and whether
to trust what came back (:mod:`asr.fast_path` runs the model).

Window choice (:func:`choose_window`): the engine's ``window_s`` (10 s) takes audio up to
``window_s - WINDOW_MARGIN_S``. Shorter windows for clips from 1.6 s (``windows=``) are chosen
where the 10 s window's encoder is slow (:func:`choose_short_windows`, by default): there they
cut a decode by ~30 % at the same WER, once a loop of the sentence is read as the sentence
(:func:`repeated_phrase`) and the window's room is silence; elsewhere they saved only
10-30 ms (figures in :mod:`asr.fast_path`'s docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

#: the largest window takes audio up to ``window_s - WINDOW_MARGIN_S`` seconds, and a
#: shorter window keeps at least this much room after the audio
WINDOW_MARGIN_S = 1.0

#: the shorter windows of ``asr.short_windows`` (:func:`choose_short_windows`), seconds
SHORT_WINDOWS = (5.0, 6.0, 8.0)
#: ... chosen where the 10 s window's encoder takes longer than this at load, ms: 186-373 ms on
#: a 2-core Zen 1 EPYC (AVX2 at half width), 69 ms emulated AVX2 and 35 ms AVX-512 BF16
SHORT_WINDOWS_MIN_ENCODER_MS = 120.0
#: ... for clips at least this long, seconds; shorter ones decode in the largest window. A clip
#: of one or two words in a 5 or 6 s window came back doubled ("Yes. Yes.", "Sure. Sure.", "No!
#: No!": 10 and 11 of 90 Piper and espeak clips, all 1.0-1.42 s; 0 in 10 s; 2-core Zen 1 EPYC)
SHORT_WINDOWS_MIN_AUDIO_S = 1.6

#: faster-whisper's silence guard: no-speech probability above this *and* ...
NO_SPEECH_THRESHOLD = 0.6
#: ... average token log-probability below this. Alone, a low average log-probability
#: sends the fast path to the full 30 s window (faster-whisper re-decodes it too).
LOG_PROB_THRESHOLD = -1.0

#: a decode with more words than ``MAX_WORDS_PER_S * audio_s + MAX_EXTRA_WORDS``
#: cannot be what was said: it is a loop
MAX_WORDS_PER_S = 5.0
MAX_EXTRA_WORDS = 3
#: a phrase of this many words said twice back to back is one said once ("thank you, thank
#: you" and "stop! stop!" are said; whole sentences twice in one breath are a decode's echo)
MIN_DOUBLED_WORDS = 3
#: an n-gram repeated back to back this often is a loop (single words: one more)
MIN_LOOP_REPEATS = 3


def choose_short_windows(mode: str, encoder_ms: float | None) -> tuple[float, ...]:
    """The shorter windows an engine decodes short clips in (``asr.short_windows``).

    "on": :data:`SHORT_WINDOWS`; "off": none; "auto": :data:`SHORT_WINDOWS` where the largest
    window's encoder took more than :data:`SHORT_WINDOWS_MIN_ENCODER_MS` at load
    (``encoder_ms``; None, not timed: none). They pay where the encoder is a large share of
    a decode and cost ~1 WER point everywhere (figures in :mod:`asr.fast_path`).
    """
    slow = encoder_ms is not None and encoder_ms > SHORT_WINDOWS_MIN_ENCODER_MS
    return SHORT_WINDOWS if mode == "on" or (mode == "auto" and slow) else ()


def choose_window(
    audio_s: float,
    window_s: float,
    *,
    windows: Sequence[float],
    margin_s: float = WINDOW_MARGIN_S,
    margin_share: float = 0.0,
    min_short_s: float = SHORT_WINDOWS_MIN_AUDIO_S,
) -> float | None:
    """The window, seconds, that ``audio_s`` seconds of audio decode in; None = too long.

    The smallest of ``windows`` below ``window_s`` with ``max(margin_s, margin_share *
    audio_s)`` seconds of room after the audio, for audio of at least ``min_short_s``;
    else ``window_s`` itself when the audio leaves it ``margin_s`` of room; else None (the
    full 30 s window decodes it).
    A window with too little room makes Whisper loop (MEASURED.md: WER 117-412 % in a
    window only as long as the audio).
    """
    room = max(margin_s, margin_share * audio_s)
    for window in sorted(windows) if audio_s >= min_short_s else ():
        if window < window_s and audio_s + room <= window:
            return window
    if audio_s + margin_s <= window_s:
        return window_s
    return None


def judge_window(
    text: str, audio_s: float, *, no_speech_prob: float, avg_logprob: float, hit_max_length: bool
) -> str | None:
    """What a short-window decode says: its text, "" for silence, None = ask the full window.

    * no-speech probability > :data:`NO_SPEECH_THRESHOLD` and either a text without a
      single word (Whisper's "." for silence) or an average log-probability below
      :data:`LOG_PROB_THRESHOLD`: silence, "";
    * no-speech probability high but confident words: None (the full window judges);
    * low average log-probability: None (unsure);
    * :func:`looks_degenerate`: the phrase when the text is one phrase said again and again
      (:func:`repeated_phrase`), else None (a loop);
    * a phrase of :data:`MIN_DOUBLED_WORDS` or more words said twice: the phrase ("What do
      these make? What do these make?", heard so in a window padded with silence);
    * otherwise the text.

    Why the word check: silence decodes to "." with an average log-probability right on
    the -1.0 line, and which side of it depends on the CPU's int8 kernels. Measured on
    1 s of zeros (tiny.en int8): -1.07 with oneDNN's AVX-512 VNNI kernels, -0.97 with its
    AVX2 kernels (``ONEDNN_MAX_CPU_ISA=AVX2`` on the same AMD EPYC, and the AVX2-only
    EPYC of CI), where the log-probability rule alone sent silence to the full window.
    A text with no word in it cannot be a transcript, whatever its confidence.
    """
    if no_speech_prob > NO_SPEECH_THRESHOLD:
        if avg_logprob < LOG_PROB_THRESHOLD or not _normalized_words(text):
            return ""
        return None  # words over likely silence: the full window judges
    if avg_logprob < LOG_PROB_THRESHOLD:
        return None  # unsure: the full window is the reference
    phrase = repeated_phrase(text)
    if looks_degenerate(text, audio_s, hit_max_length=hit_max_length):
        # a phrase heard, then said again until the budget: the phrase
        if phrase is None or looks_degenerate(phrase, audio_s, hit_max_length=False):
            return None
        return phrase
    if phrase is not None and len(_normalized_words(phrase)) >= MIN_DOUBLED_WORDS:
        return phrase  # a sentence twice in one breath: heard twice, said once
    return text


def looks_degenerate(text: str, audio_s: float, *, hit_max_length: bool) -> bool:
    """Whether a short-window decode of ``audio_s`` seconds is a loop, not a transcript.

    True when generation ran into its token budget, when there are more words than
    anyone says in that time (``MAX_WORDS_PER_S * audio_s + MAX_EXTRA_WORDS``), or when
    the words hold a back-to-back repeated n-gram (:func:`has_repeat_loop`).
    """
    if hit_max_length:
        return True
    words = _normalized_words(text)
    if len(words) > MAX_WORDS_PER_S * audio_s + MAX_EXTRA_WORDS:
        return True
    return has_repeat_loop(words)


def has_repeat_loop(words: Sequence[str]) -> bool:
    """Whether some n-gram occurs :data:`MIN_LOOP_REPEATS` times back to back.

    A single word needs one repeat more ("no no no" is speech, "no no no no" a loop).
    Compares the words as given; :func:`looks_degenerate` folds case and punctuation.
    """
    count = len(words)
    for n in range(1, count // MIN_LOOP_REPEATS + 1):
        needed = MIN_LOOP_REPEATS + 1 if n == 1 else MIN_LOOP_REPEATS
        for start in range(count - needed * n + 1):
            gram = words[start : start + n]
            if all(words[start + k * n : start + (k + 1) * n] == gram for k in range(1, needed)):
                return True
    return False


def repeated_phrase(text: str) -> str | None:
    """The first copy of ``text`` when all of it is one phrase of 2+ words said again and again
    (the last copy may be cut, even mid-word), else None.

    A short window's usual loop: measured on a 2-core AVX2 EPYC (tiny.en int8, 5 s window,
    questions and held-out sentences in three voices, framed), 16 of its 19 rejections were
    the sentence heard and then repeated until the token budget ran out ("What time is it?
    What time is it? What ti"), the first copy equal to the 10 s window's text. A text that
    only *contains* a repeat ("... on the first Sunday, and we're free on the first Sunday,
    and we're free ...") is not one: its words are not all copies of its start.
    """
    raw = text.split()
    words = [_normalized_words(w) for w in raw]
    flat = [w for ws in words for w in ws]
    if len(set(flat)) < 2:
        return None  # one word again and again: no phrase ("no no no no" is said, too)
    for n in range(2, len(flat) // 2 + 1):
        unit, rest = flat[:n], flat[n:]
        copies = all(w == unit[k % n] for k, w in enumerate(rest[:-1]))
        if copies and rest and unit[(len(rest) - 1) % n].startswith(rest[-1]):
            taken = 0
            for i, ws in enumerate(words):  # the raw words holding the first n, if they align
                taken += len(ws)
                if taken == n:
                    return " ".join(raw[: i + 1])
                if taken > n:
                    return None
    return None


def ct2_max_length(max_new_tokens: int, prompt_len: int, model_max_length: int) -> int:
    """The ``max_length`` to pass to ``ctranslate2.models.Whisper.generate`` for a budget.

    CTranslate2 (4.x) caps generation at ``min(max_length // 2, max_length - prompt_len)``
    new tokens (the reference implementation's half context; OpenNMT/CTranslate2#1856),
    so ``max_length=50`` gives 25 tokens, not 48.
    """
    return min(max(2 * max_new_tokens, max_new_tokens + prompt_len), model_max_length)


def _normalized_words(text: str) -> list[str]:
    kept = "".join(c.lower() if c.isalnum() or c.isspace() or c == "'" else " " for c in text)
    return kept.split()
