"""Split a streamed LLM reply into clauses that can be spoken one by one.

Pure and synchronous: feed text deltas with :meth:`ClauseChunker.push` as they
arrive, call :meth:`ClauseChunker.flush` at the end of the stream. Clauses come
back cleaned for speech (markdown markers and emoji removed, whitespace
collapsed; see :mod:`tts.text`). The result never depends on how the text was
cut into deltas: a decision that needs text which has not arrived yet waits for it.

Where a clause ends (on the cleaned text; the first rule met from the left wins):

* **Sentence end** -- a run of ``. ? ! …`` (optionally followed by closing quotes
  or brackets) followed by whitespace, always, whatever the clause's length:
  Piper speaks each sentence as its own chunk anyway, so merging short
  sentences would only delay audio. Runs of only ``.``/``…`` also wait for the
  next visible character and do not split before a lower-case letter
  (``approx. five``, ``well... maybe``, ``5 p.m. today``). A single ``.`` never
  splits after a title abbreviation (Mr. Mrs. Ms. Dr. St. Prof. Jr. Sr. Mt. vs.
  e.g. i.e. cf.) or a single upper-case initial (``J. R. R. Tolkien``).
  ``3.5``, ``e.g`` and ``wait...what`` never split: no whitespace follows.
* **Line break** -- always (list items and headings have no punctuation).
* **Clause mark** -- ``, ; : —`` (and the en dash) followed by whitespace, once the clause has
  enough words. Eager while the reply is young: the threshold is
  ``min_clause_words`` until ``later_clause_words`` words have been emitted in
  total, so the first audio comes fast; after that it is ``later_clause_words``
  (default ``max(min_clause_words, max_clause_words // 2)``), so later text is
  spoken in whole sentences with natural prosody -- the LLM runs far ahead of
  playback by then, splitting more would gain nothing -- and only long
  sentences are cut at a comma.
* **First phrase** -- only for the first clause of a reply (until a clause has
  been emitted) and only with ``first_phrase_split`` (the default): once the
  clause has ``min_clause_words`` words, before the next word that starts a
  phrase -- a verb auxiliary, preposition, conjunction or relative word, see
  :data:`PHRASE_STARTS` (matched lower-case, after opening quotes or brackets;
  a typographic apostrophe U+2019 reads as ``'``). ``The capital of France is Paris.`` gives ``The capital
  of France`` + ``is Paris.``: typical first sentences have no comma, and a
  short first clause is ready and synthesized sooner. Deciding needs the whole
  next word (the character after it), which costs about one LLM token.
* **First chunk** -- only for the first clause of a reply and only with
  ``first_chunk_words`` = N > 0 (``tts.first_chunk_words``, chosen from the LLM's speed
  when unset: 2 for a slow engine, else 3; :data:`DEFAULT_FIRST_CHUNK_WORDS` here): the
  first audio comes from the first few words. A clause mark ends it after any word
  (``Sure,``); from N words on (with fewer than :data:`DEFAULT_FIRST_CHUNK_WORDS`, once
  they have :data:`FIRST_CHUNK_MIN_LETTERS` letters) it ends before a word that starts a
  phrase (:data:`PHRASE_STARTS`, as the first-phrase rule: ``The capital of France`` +
  ``is Paris.``, ``Bees make honey`` + ``from flowers.`` with N = 3, ``A mosquito`` +
  ``has six legs.`` with N = 2; but never before ``of``, :data:`BINDS_BACK`, which belongs
  to the noun before it), or before a number (``The moon is approximately``
  + ``140,760,000 kilometers``); from 2N words on at any word boundary -- never after a
  word that leaves the phrase hanging (an article, pronoun, auxiliary, preposition or
  conjunction, see :data:`DANGLING`). Then, while the reply is young (fewer than
  ``later_clause_words`` words emitted), a clause also ends before a phrase start once it
  has twice the words of the clause before it (and at least 2N and ``min_clause_words``),
  its last word not hanging: chunks grow, so
  each is synthesized while the one before it plays (a 3-word first chunk followed by a
  25-word sentence without a comma left the listener waiting ~1 s on AVX2). Later chunks
  go by the rules above. 0 turns both off (the first clause then needs
  ``min_clause_words`` words, as any other while the reply is young).
* **Length** -- at the first word boundary after ``max_clause_words`` words.
* **Characters** -- a clause never holds more than ``max_clause_chars``
  characters (from its first visible one; default 200), so a run without
  whitespace (``100000000…``) is still spoken while it streams: once more text
  is pending, the clause is cut at its last whitespace, or, if it has none,
  right at the limit. Rules that would need text beyond the limit to decide are
  not waited for.

A clause without speakable content (no letter or digit) is never emitted on its
own: the punctuation joins the next clause, and :meth:`flush` drops a remainder
such as a lone ``"..."``; a character cut with nothing speakable before it
(``!!!!…``) is dropped too.
"""

from __future__ import annotations

import copy

from tts.text import StreamCleaner, is_speakable, normalize_space
from voice_pipeline.config import TTSConfig

__all__ = [
    "BINDS_BACK",
    "DANGLING",
    "DEFAULT_FIRST_CHUNK_WORDS",
    "PHRASE_STARTS",
    "ClauseChunker",
]

_SENTENCE_END = frozenset(".?!…")
_CLAUSE_MARKS = frozenset(",;:—\u2013")
_CLOSERS = frozenset("\"')]}»”\u2019")
_OPENERS = "\"'([{«“\u2018"
_NO_SPLIT_AFTER = frozenset(
    {"mr", "mrs", "ms", "dr", "st", "prof", "jr", "sr", "mt", "vs", "e.g", "i.e", "cf"}
)
#: words before which the first clause of a reply may end (see the module doc)
PHRASE_STARTS = frozenset(
    {
        # verbs and auxiliaries: "The capital of France | is Paris."
        *"am is are was were has have had do does did".split(),
        *"can could will would shall should may might must".split(),
        *"isn't aren't wasn't weren't hasn't haven't hadn't don't doesn't didn't".split(),
        *"can't couldn't won't wouldn't shouldn't mustn't".split(),
        # prepositions: "The first man to walk | on the Moon"
        *"of in on at to for with from by about into after before since until".split(),
        # conjunctions and relative words: "Paris is a city | that ..."
        *"and but or so because if unless while although though".split(),
        *"which that who whom whose where when".split(),
    }
)
#: words a short first chunk never ends on: they announce what follows ("The capital of |")
DANGLING = frozenset(
    {
        *PHRASE_STARTS,
        *"a an the my your his her its our their this these those some any no not very".split(),
        *"i you he she we they it there".split(),  # "It | is", "There | are"
        *"like than as".split(),  # prepositions too: "Cats like | to sleep" was heard "That's why"
    }
)
#: phrase starts a short first chunk never ends before: "of" binds to the noun before it.
#: Piper's ``The capital`` + ``of France is Paris.`` was heard by Whisper as "The capital of
#: Francis Paris" 8 times in 8 (once in CI as "The capital, a France's Paris"), cut
#: ``The capital of France`` + ``is Paris.`` it was heard right 8 times in 8
BINDS_BACK = frozenset({"of"})
#: the first chunk's words when neither the config nor the engine's speed chose them
DEFAULT_FIRST_CHUNK_WORDS = 3
#: a first chunk of fewer words than that also needs this many letters (and digits): two short
#: words alone are hard to hear (Whisper heard Piper's ``The sky`` as "This guy" and ``The moon``
#: as "The man" 3 times in 5; ``The capital``, ``Water boils`` it hears)
FIRST_CHUNK_MIN_LETTERS = 8
#: characters that continue a word (besides letters and digits): "isn't", "in-depth"
_WORD_JOINERS = frozenset("'\u2019-")
#: what :meth:`ClauseChunker.tentative` supposes comes next: a plain word boundary ("Xq" is
#: capitalized, so a sentence end splits before it, and it starts no phrase and no number)
_PROBE_WORD = "Xq"
_PROBE = f" {_PROBE_WORD} x"


def _word_count(text: str) -> int:
    return sum(1 for token in text.split() if is_speakable(token))


class ClauseChunker:
    """Turns a stream of text deltas into speakable clauses (rules in the module doc)."""

    def __init__(
        self,
        min_clause_words: int,
        max_clause_words: int = 40,
        *,
        later_clause_words: int | None = None,
        first_phrase_split: bool = True,
        max_clause_chars: int = 200,
        first_chunk_words: int = DEFAULT_FIRST_CHUNK_WORDS,
    ) -> None:
        if min_clause_words < 1:
            raise ValueError("min_clause_words must be >= 1")
        if max_clause_words < min_clause_words:
            raise ValueError("max_clause_words must be >= min_clause_words")
        if later_clause_words is None:
            later_clause_words = max(min_clause_words, max_clause_words // 2)
        if later_clause_words < min_clause_words:
            raise ValueError("later_clause_words must be >= min_clause_words")
        if max_clause_chars < 1:
            raise ValueError("max_clause_chars must be >= 1")
        if first_chunk_words < 0:
            raise ValueError("first_chunk_words must be >= 0 (0: no short first chunk)")
        self._min_words = min_clause_words
        self._max_words = max_clause_words
        self._later_words = later_clause_words
        self._first_phrase_split = first_phrase_split
        self._max_chars = max_clause_chars
        self._first_words = first_chunk_words
        self._cleaner = StreamCleaner()
        self._buf = ""  # cleaned text of the clause being built (and lookahead)
        self._pos = 0  # next index of _buf to examine
        self._words_emitted = 0  # in this reply; 0 until its first clause is emitted
        self._last_words = 0  # words of the clause emitted last (in this reply)

    @classmethod
    def of(cls, tts: TTSConfig) -> ClauseChunker:
        """How every reply cuts its text into chunks for TTS (and a speculative reply its
        first chunk, synthesized ahead: the same cut, so the reply finds it)."""
        first = DEFAULT_FIRST_CHUNK_WORDS if tts.first_chunk_words is None else tts.first_chunk_words
        return cls(tts.min_clause_words, first_chunk_words=first)

    def push(self, delta: str) -> list[str]:
        """Feed the next text delta; returns the clauses it completed (maybe none)."""
        self._buf += self._cleaner.feed(delta)
        return self._drain(final=False)

    def tentative(self) -> str | None:
        """The clause :meth:`push` would complete next if the text so far were followed by a
        plain word boundary (a space and a capitalized word that starts no phrase), else None.

        A clause that ends at punctuation, before a number or after 2N words is only known once
        the next token shows what follows; this says what it will be if that is an ordinary
        boundary, so its synthesis can start one token early (a reply's first chunk,
        :mod:`voice_pipeline.conversation.early_chunk`). Pure: the chunker is unchanged.
        """
        probe = copy.deepcopy(self)
        clause = next(iter(probe.push(_PROBE)), None)
        return None if clause is None or _PROBE_WORD in clause else clause  # it must end before

    def flush(self, *, unfinished: bool = True) -> list[str]:
        """End of the stream: the remaining clauses, if they have speakable content.
        ``unfinished=False`` (a stream that was cut off): the text after the last clause is
        dropped unless it ends a sentence ("Zephyr was a master of" is not spoken)."""
        self._buf += self._cleaner.flush()
        clauses = self._drain(final=True)
        rest = normalize_space(self._buf)
        self._buf, self._pos = "", 0
        ends = rest.rstrip("".join(_CLOSERS)).endswith(tuple(_SENTENCE_END))
        if is_speakable(rest) and (unfinished or ends):
            clauses.append(rest)
        self._words_emitted = self._last_words = 0
        return clauses

    # ------------------------------------------------------------ internals

    def _drain(self, *, final: bool) -> list[str]:
        clauses: list[str] = []
        while True:
            end = self._next_boundary(final=final)
            if end is None:
                return clauses
            clause = normalize_space(self._buf[:end])
            self._buf = self._buf[end:]
            self._pos = 0
            if is_speakable(clause):  # only a character cut can give an unspeakable one
                self._last_words = _word_count(clause)
                self._words_emitted += self._last_words
                clauses.append(clause)

    def _next_boundary(self, *, final: bool) -> int | None:
        """End index of the first complete clause in ``_buf``, or None (advances ``_pos``)."""
        s = self._buf
        limit = len(s) - len(s.lstrip()) + self._max_chars  # index of the first char too many
        if len(s) <= limit:
            return self._scan(len(s), final=final)
        # Too long: look no further than the limit; what stays undecided there is cut.
        end = self._scan(limit + 1, final=False)
        return self._char_cut(limit) if end is None else end

    def _scan(self, n: int, *, final: bool) -> int | None:
        """Like :meth:`_next_boundary`, on ``_buf[:n]`` (``final``: nothing follows it)."""
        s = self._buf
        i = self._pos
        while i < n:
            ch = s[i]
            if ch in _SENTENCE_END or ch in _CLAUSE_MARKS:
                decision = self._at_punctuation(i, n, final=final)
                if decision is None:  # needs text that has not arrived yet
                    self._pos = i
                    return None
                if decision > 0:
                    return decision
                i = -decision  # no split: continue after the punctuation run
                continue
            if ch == "\n" and is_speakable(s[:i]):
                return i + 1
            if ch.isspace():
                words = _word_count(s[:i])
                if words >= self._max_words:
                    return i
                first_ends = self._first_chunk_ends(i, n, words, final=final)
                if first_ends is None:
                    self._pos = i
                    return None
                if first_ends:
                    return i
                if words >= self._min_words and self._first_phrase_split and self._words_emitted == 0:
                    starts = self._phrase_starts_after(i, n, final=final)
                    if starts is None:
                        self._pos = i
                        return None
                    if starts:
                        return i
            i += 1
        self._pos = i
        return None

    def _at_punctuation(self, i: int, n: int, *, final: bool) -> int | None:
        """Split index (> 0), or -(index to resume at) for no split, or None if undecided."""
        s = self._buf
        run_chars = _SENTENCE_END if s[i] in _SENTENCE_END else _CLAUSE_MARKS
        j = i
        while j < n and s[j] in run_chars:
            j += 1
        run = s[i:j]
        while j < n and s[j] in _CLOSERS:
            j += 1
        if j == n:
            return -j if final else None
        if not s[j].isspace() or not is_speakable(s[:i]):
            return -j
        if run_chars is _CLAUSE_MARKS:
            return j if _word_count(s[:j]) >= self._clause_mark_words() else -j
        if run == "." and _is_abbreviation(s, i):
            return -j
        if set(run) <= {".", "…"}:  # maybe an abbreviation or a pause: look at what follows
            k = j
            while k < n and s[k].isspace():
                k += 1
            if "\n" in s[j:k]:
                return j
            if k == n:
                return -j if final else None
            if s[k].islower():
                return -j
        return j

    def _phrase_starts_after(self, i: int, n: int, *, final: bool, first: bool = False) -> bool | None:
        """True if the word after the whitespace at ``i`` is in PHRASE_STARTS (and, for the
        short ``first`` chunk, not in BINDS_BACK); None if undecided."""
        s = self._buf
        k = self._next_word_start(i, n)
        if k is None:  # the line break ends the clause anyway
            return False
        end = k
        while end < n and (s[end].isalnum() or s[end] in _WORD_JOINERS):
            end += 1
        if end == n and not final:  # the word may go on
            return None
        word = s[k:end].lower().replace("\u2019", "'")
        return word in PHRASE_STARTS and not (first and word in BINDS_BACK)

    def _first_chunk_ends(self, i: int, n: int, words: int, *, final: bool) -> bool | None:
        """True if the short first chunk, or a growing one after it, ends at the whitespace
        at ``i`` (``words`` before it; see the module doc). None: the next word has not
        arrived whole yet."""
        if not self._first_words:
            return False
        if self._words_emitted:  # a growing chunk while the reply is young
            grown = max(self._min_words, 2 * self._last_words, 2 * self._first_words)
            if self._words_emitted >= self._later_words or words < grown or self._last_word(i) in DANGLING:
                return False
            return self._phrase_starts_after(i, n, final=final)
        if words < self._first_words or (
            words < DEFAULT_FIRST_CHUNK_WORDS
            and sum(c.isalnum() for c in self._buf[:i]) < FIRST_CHUNK_MIN_LETTERS
        ):
            return False
        if self._last_word(i) in DANGLING:
            return False
        if words >= 2 * self._first_words or self._number_after(i, n):
            return True
        return self._phrase_starts_after(i, n, final=final, first=True)

    def _number_after(self, i: int, n: int) -> bool:
        """True if the word after the whitespace at ``i`` starts with a digit: a number takes
        the LLM a token per digit or two and Piper several words to speak, so a first chunk
        that waited for it came late (``The moon is approximately`` + ``140,760,000 ...``)."""
        k = self._next_word_start(i, n)
        return k is not None and k < n and self._buf[k].isdigit()

    def _next_word_start(self, i: int, n: int) -> int | None:
        """Where the word after the whitespace at ``i`` starts, past any opening quotes or
        brackets (``n``: it has not arrived yet); None if a line break comes first."""
        s = self._buf
        k = i
        while k < n and s[k].isspace():
            if s[k] == "\n":
                return None
            k += 1
        while k < n and s[k] in _OPENERS:
            k += 1
        return k

    def _last_word(self, i: int) -> str:
        """The word that ends at ``i``, lower-case, without quotes or brackets."""
        start = i
        while start > 0 and not self._buf[start - 1].isspace():
            start -= 1
        return self._buf[start:i].strip(_OPENERS + "".join(_CLOSERS)).lower().replace("\u2019", "'")

    def _char_cut(self, limit: int) -> int:
        """Where a clause reaching index ``limit`` is cut: its last whitespace, else the limit."""
        s = self._buf
        start = len(s) - len(s.lstrip())
        for i in range(limit, start, -1):
            if s[i].isspace():
                return i
        return limit

    def _clause_mark_words(self) -> int:
        if self._first_words and self._words_emitted == 0:
            return 1  # the short first chunk ends at any clause mark
        if self._words_emitted < self._later_words:
            return self._min_words
        return self._later_words


def _is_abbreviation(s: str, dot: int) -> bool:
    """True if the ``.`` at ``dot`` ends a title abbreviation or an initial."""
    start = dot
    while start > 0 and not s[start - 1].isspace():
        start -= 1
    token = s[start:dot].lstrip(_OPENERS)
    if token.lower() in _NO_SPLIT_AFTER:
        return True
    return len(token) == 1 and token.isalpha() and token.isupper() and token != "I"
