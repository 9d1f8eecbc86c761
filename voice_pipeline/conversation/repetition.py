"""Stop a reply that repeats itself, before the repeat is spoken.

A small model decoding greedily can fall into a loop: asked to "List the days of the week",
SmolLM2-135M said the week over and over until its token limit (25 s of speech), and it
sometimes says a sentence twice ("I'm sorry for any food-related issues." twice). vLLM's
``llm.repetition_penalty`` made that rare, but it penalizes the history too and changed a
follow-up's answer, so it is off by default; this guard holds whatever the engine or model.

Pure and synchronous. :meth:`RepetitionGuard.admit` sees each clause before it is spoken
(after :class:`tts.chunker.ClauseChunker` cut it), with every clause admitted before it, and
returns what of it may be spoken. A repeat is

* a run of ``run_words`` words (lower-cased, punctuation ignored) that the reply already
  said, or
* a sentence of at least :data:`MIN_SENTENCE_WORDS` words the reply already said, or said
  with one word more or less ("I'm so sorry for any food-related issues. I'm sorry for any
  food-related issues.").

The clause is then cut where the repeat begins, and the words that would leave the phrase
hanging are taken off its end (:data:`tts.chunker.DANGLING`: "..., but" is spoken "...,");
if nothing is left, or the repeat began in a clause already spoken, nothing of it is. From
then on the guard is ``stopped``: the reply ends there (its LLM request is aborted, its text
left unspoken). A loop is found once it has gone on for ``run_words`` words, so the part of
its second turn in clauses already spoken is heard ("Monday, ..., Sunday, Monday, ...,
Saturday,"), not its 25 s.

Seven words: on 364 replies of SmolLM2 to 40 everyday requests (greedy, and under repetition,
frequency and presence penalties) seven stopped the loops and the sentences said twice, and a
joke whose answer repeats the seven words of its question; six would also cut a reply about
the sky that says "is scattered at a different rate" of two colours (README, "A reply that
repeats itself").
"""

from __future__ import annotations

import re

from tts.chunker import DANGLING

__all__ = ["MIN_SENTENCE_WORDS", "RepetitionGuard"]

#: a repeated sentence shorter than this is not a loop ("No, no.", "Hello! Hello!")
MIN_SENTENCE_WORDS = 4

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?\u2026]+")


class RepetitionGuard:
    """Admits a reply's clauses, in order, until one repeats what the reply already said."""

    def __init__(self, run_words: int) -> None:
        if run_words < 0:
            raise ValueError("run_words must be >= 0 (0: off)")
        self.run_words = run_words
        #: a repeat was found: nothing after it is admitted
        self.stopped = False
        self._words: list[str] = []  # every word admitted, in order
        self._runs: set[tuple[str, ...]] = set()  # every run of run_words of them
        self._sentences: set[tuple[str, ...]] = set()  # every sentence finished
        self._sentence_start = 0  # index in _words of the sentence being said

    def admit(self, clause: str) -> str | None:
        """What of ``clause`` may be spoken: all of it, the part before a repeat, or None."""
        if self.stopped:
            return None
        if not self.run_words:
            return clause
        cut = self._repeat_at(clause)
        if cut is None:
            return clause
        self.stopped = True
        words = clause[:cut].split()
        while words and words[-1].lower().replace("\u2019", "'") in DANGLING:
            words.pop()
        kept = " ".join(words)
        return kept if _WORD.search(kept) else None

    def _repeat_at(self, clause: str) -> int | None:
        """Where in ``clause`` a repeat begins (0 if it began in an earlier clause), or None;
        the words up to the end of the clause are taken in either way."""
        first = len(self._words)
        offsets: list[int] = []
        found: int | None = None
        ends = {m.start() for m in _SENTENCE_END.finditer(clause)}
        for m in _WORD.finditer(clause):
            offsets.append(m.start())
            self._words.append(m.group().lower().replace("\u2019", "'"))
            n = len(self._words)
            if n >= self.run_words:
                run = tuple(self._words[n - self.run_words :])
                if found is None and run in self._runs:
                    found = self._offset(n - self.run_words, first, offsets)
                self._runs.add(run)
            if _ends_sentence(clause, m.end(), ends):
                sentence = tuple(self._words[self._sentence_start :])
                if found is None and len(sentence) >= MIN_SENTENCE_WORDS and self._said(sentence):
                    found = self._offset(self._sentence_start, first, offsets)
                self._sentences.add(sentence)
                self._sentence_start = n
        return found

    def _said(self, sentence: tuple[str, ...]) -> bool:
        """The reply said ``sentence`` before, or it with one word more or less."""
        return sentence in self._sentences or any(_one_word_apart(sentence, s) for s in self._sentences)

    @staticmethod
    def _offset(word: int, first: int, offsets: list[int]) -> int:
        return offsets[word - first] if word >= first else 0


def _one_word_apart(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One is the other with one word more, and the shorter has MIN_SENTENCE_WORDS or more."""
    long, short = (a, b) if len(a) > len(b) else (b, a)
    if len(long) != len(short) + 1 or len(short) < MIN_SENTENCE_WORDS:
        return False
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def _ends_sentence(clause: str, after_word: int, ends: set[int]) -> bool:
    """The word ending at ``after_word`` is followed (closing quotes or brackets aside) by a
    sentence end."""
    i = after_word
    while i < len(clause) and clause[i] in "\"')]\u201d\u2019":
        i += 1
    return i in ends
