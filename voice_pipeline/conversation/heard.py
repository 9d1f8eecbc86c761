"""Map the samples a listener played back to the words they heard (pure).

Each spoken clause is known with its audio length. Whole clauses whose audio
was fully played were heard; inside the clause playing when playback stopped,
the heard part is taken in proportion to the played fraction of its audio,
measured in characters and rounded down to a whole word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpokenClause:
    text: str
    samples: int


def heard_text(clauses: Sequence[SpokenClause], played_samples: int) -> str:
    words: list[str] = []
    left = played_samples
    for clause in clauses:
        if left <= 0:
            break
        if left >= clause.samples:
            words.extend(clause.text.split())
            left -= clause.samples
            continue
        fraction = left / clause.samples if clause.samples else 1.0
        limit = int(len(clause.text) * fraction)
        # keep the words that end within the played part of the clause
        pos = 0
        for word in clause.text.split():
            pos = clause.text.index(word, pos) + len(word)
            if pos > limit:
                break
            words.append(word)
        break
    return " ".join(words)
