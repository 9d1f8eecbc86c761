"""The short first chunk (``tts.first_chunk_words``) is intelligible: the first chunks of
typical replies, cut by the reply's chunker, synthesized by the real Piper voice and
transcribed back by the real Whisper, match their text (runs in CI)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import soxr
from speech import concat, normalize, silence, word_error_rate

from asr.base import ASREngine
from tts.base import TTS, synthesize_head
from tts.chunker import ClauseChunker
from voice_pipeline.config import TTSConfig
from voice_pipeline.tuning import choose_first_chunk_words

pytestmark = pytest.mark.real_models

#: replies as the model gives them (SmolLM2-135M, the default system prompt); no numbers,
#: which Whisper writes as digits
REPLIES = (
    "The capital of France is Paris.",
    "Sure, I can help with that.",
    "Bees make honey from the nectar of flowers.",
    "Water boils when it gets hot enough.",
    "The sky is blue because of the way sunlight is scattered.",
    "The opposite of hot is cold.",
    "Cats like to sleep in the sun, and they purr when happy.",
    "Well, the sun rises in the east.",
)


def first_chunk(reply: str, min_clause_words: int, first_chunk_words: int) -> str:
    chunker = ClauseChunker(min_clause_words, first_chunk_words=first_chunk_words)
    for word in reply.split(" "):  # streamed as the LLM does: a word (and its space) per delta
        if clauses := chunker.push(word + " "):
            return clauses[0]
    return chunker.flush()[0]


def hear(tts: TTS, asr: ASREngine, text: str, *, head_first: bool = False) -> str:
    """What Whisper makes of ``text`` spoken alone, after and before a pause (as the listener
    hears a first chunk: after their own turn, and before the next chunk); ``head_first``:
    synthesized as a reply's first chunk is (``tts.head_first``), its head and its rest."""
    if head_first:
        parts = synthesize_head(tts, text)
        pcm = np.concatenate([parts.head, parts.rest() if parts.rest is not None else parts.head[:0]])
    else:
        pcm = tts.synthesize(text)
    audio = soxr.resample(pcm.astype(np.float32) / 32768.0, tts.sample_rate_hz, 16000, quality="HQ")
    return asr.transcribe(concat(silence(0.3), audio, silence(0.3))).text


#: each chunk is synthesized and heard this many times, and its word error rate is the median
#: of theirs: Piper's synthesis is random from run to run, and one in eight single runs over
#: these chunks heard two of them wrong at once ("This guy is blue", "That's like the sleet"),
#: enough to move the total from 7 % to 16 %. The mean of three still did, once in CI (17 %,
#: a Zen 5 EPYC, session 28: 3-7 % in eight other runs there); the median of three was 3.4 % in
#: each of those eight: one odd synthesis of a chunk no longer decides
HEARINGS = 3


def hearings(tts: TTS, asr: ASREngine, text: str, *, head_first: bool = False) -> list[str]:
    """What Whisper makes of :data:`HEARINGS` syntheses of ``text`` (:func:`hear`)."""
    return [hear(tts, asr, text, head_first=head_first) for _ in range(HEARINGS)]


def typical_error(text: str, heard: list[str]) -> float:
    """The median word error rate of the hearings of ``text``."""
    return statistics.median(word_error_rate(text, h) for h in heard)


def some_word_heard(text: str, heard: list[str]) -> bool:
    """Most hearings of ``text`` have at least one of its words (on a 2-core Zen 1 AVX2 EPYC
    one of three syntheses of "Bees make" was heard as "This may Connie.")."""
    return sum(bool(set(normalize(text).split()) & set(normalize(h).split())) for h in heard) * 2 > len(heard)


#: what an unset ``tts.first_chunk_words`` becomes: for a fast LLM and for a slow one
CHOSEN = sorted({choose_first_chunk_words(None, ms) for ms in (10.0, 60.0)})


def test_short_first_chunks_are_intelligible(piper: TTS, whisper: ASREngine) -> None:
    """Every first chunk either choice cuts (each distinct chunk heard :data:`HEARINGS` times)."""
    cfg = TTSConfig()
    assert cfg.first_chunk_words is None and CHOSEN == [2, 3]  # the default: chosen, short
    old = [first_chunk(r, cfg.min_clause_words, 0) for r in REPLIES]
    chunks: dict[str, None] = {}
    for first_words in CHOSEN:
        short = [first_chunk(r, cfg.min_clause_words, first_words) for r in REPLIES]
        # the rule made them shorter (fewer words in all, never more in one)
        assert sum(len(c.split()) for c in short) < sum(len(c.split()) for c in old)
        assert all(len(s.split()) <= len(o.split()) for s, o in zip(short, old, strict=True))
        chunks.update(dict.fromkeys(short))
    heard = {chunk: hearings(piper, whisper, chunk) for chunk in chunks}
    errors = {chunk: typical_error(chunk, texts) for chunk, texts in heard.items()}
    # Whisper hears every first chunk (some of its words, at least), and over all of them
    # the word error rate stays in the range of whole sentences (7 % measured for this
    # voice on 10 sentences; 3-7 % here: "Bees" is "Please" in most hearings; what varies
    # from synthesis to synthesis, such as "Cats like to sleep" heard as "That's like the
    # sleet", the median of three hearings leaves out)
    assert all(some_word_heard(c, heard[c]) for c in chunks), heard
    words = sum(len(normalize(c).split()) for c in chunks)
    total = sum(e * len(normalize(c).split()) for c, e in errors.items()) / words
    assert total <= 0.15, (total, heard)


def test_first_chunks_said_head_first_are_intelligible(piper: TTS, whisper: ASREngine) -> None:
    """A reply's first chunk is synthesized head first by default: the head and the rest,
    decoded apart and scaled as one, are heard as well as a chunk synthesized whole."""
    cfg = TTSConfig()
    assert cfg.head_first
    chunks = dict.fromkeys(first_chunk(r, cfg.min_clause_words, w) for w in CHOSEN for r in REPLIES)
    chunks.update(dict.fromkeys(REPLIES[:4]))  # whole sentences too: long enough to be cut
    cut = [c for c in chunks if synthesize_head(piper, c).rest is not None]
    assert len(cut) >= 4, cut
    heard = {chunk: hearings(piper, whisper, chunk, head_first=True) for chunk in chunks}
    assert all(some_word_heard(c, heard[c]) for c in chunks), heard
    words = sum(len(normalize(c).split()) for c in chunks)
    total = sum(typical_error(c, heard[c]) * len(normalize(c).split()) for c in chunks) / words
    # 7-11 % in eight runs, 7 % of it in every hearing: Whisper tiny.en writes "France is" as
    # "Francis" and "Bees" as "Please" in the whole sentences, said whole or head first alike
    # (20 hearings of each: WER 0.33 / 0.33 and 0.13 / 0.15; "Cats like to sleep" 0.09 / 0.15)
    assert total <= 0.15, (total, heard)
