"""LocalAgreement-2: the streaming-ASR commit policy. Pure and synchronous.

The utterance so far is re-decoded from its start every few hundred ms. Each
decode yields a full *hypothesis* (a word list). A word is *committed* once two
consecutive hypotheses agree on it and on every word before it: the committed
words grow by the longest common prefix of the last two hypotheses beyond what
is already committed (Machacek et al. 2023, ufal ``whisper_streaming``'s
``HypothesisBuffer``). Committed words never change; the rest of the latest
hypothesis is *tentative* and may still change.

Words are compared normalized (:func:`normalize_word`: case folded, punctuation
dropped), so ``"France"`` agrees with ``"France?"``. The committed words keep the
spelling of the hypothesis in which they were first committed.

Whole-utterance re-decodes occasionally rewrite, split or merge a word that is
already committed (``"round-fark"`` -> ``"round fark"``). Each hypothesis is
therefore aligned to the committed words before it is compared
(:func:`resume_index`): where the last committed word reappears near its
expected position, the uncommitted rest starts after it.

No asyncio, no engine: :class:`asr.streaming.UtteranceTranscriber` drives this
live, tests drive it with word lists.
"""

from __future__ import annotations

from collections.abc import Sequence

#: how far (in words) from its expected position the last committed word is
#: searched for when a re-decode split or merged earlier words
_ALIGN_SLACK = 2


def normalize_word(word: str) -> str:
    """Case-folded ``word`` with everything but letters, digits and apostrophes dropped."""
    return "".join(c for c in word.casefold() if c.isalnum() or c == "'")


def resume_index(hypothesis: Sequence[str], committed: Sequence[str]) -> int:
    """Index in ``hypothesis`` where its not-yet-committed words start.

    ``len(committed)`` when the hypothesis starts with the committed words (the
    usual case); otherwise the position just after the last committed word if it
    occurs within ``_ALIGN_SLACK`` words of there (nearest first); otherwise
    ``len(committed)`` (positional), clipped to the hypothesis length.
    """
    n = len(committed)
    if n == 0:
        return 0
    norm = [normalize_word(w) for w in hypothesis]
    if norm[:n] == [normalize_word(w) for w in committed]:
        return n
    last = normalize_word(committed[-1])
    for delta in sorted(range(-_ALIGN_SLACK, _ALIGN_SLACK + 1), key=abs):
        end = n + delta  # candidate index just after the last committed word
        if 1 <= end <= len(norm) and norm[end - 1] == last:
            return end
    return min(n, len(hypothesis))


def agreed_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common prefix of two word lists, compared normalized."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if normalize_word(x) != normalize_word(y):
            break
        count += 1
    return count


class LocalAgreement:
    """Commit words two consecutive hypotheses of the same utterance agree on.

    Feed :meth:`update` the latest full hypothesis of the utterance so far; it
    returns the words committed by it (often none). :meth:`reset` starts a new
    utterance.
    """

    __slots__ = ("_committed", "_has_previous", "_latest_rest")

    def __init__(self) -> None:
        self._committed: list[str] = []
        self._has_previous = False
        #: the uncommitted rest of the latest hypothesis (relative to the
        #: committed words as they were when it arrived)
        self._latest_rest: tuple[str, ...] = ()

    @property
    def committed(self) -> tuple[str, ...]:
        return tuple(self._committed)

    @property
    def tentative(self) -> tuple[str, ...]:
        """The words of the latest hypothesis after the committed ones."""
        return self._latest_rest

    def update(self, words: Sequence[str]) -> tuple[str, ...]:
        """Take the latest hypothesis; return the words it newly commits."""
        hypothesis = tuple(words)
        rest = hypothesis[resume_index(hypothesis, self._committed) :]
        new: tuple[str, ...] = ()
        if self._has_previous:
            agreed = agreed_prefix(self._latest_rest, rest)
            new = rest[:agreed]
            self._committed.extend(new)
            rest = rest[agreed:]
        self._has_previous = True
        self._latest_rest = rest
        return new

    def reset(self) -> None:
        self._committed.clear()
        self._has_previous = False
        self._latest_rest = ()
