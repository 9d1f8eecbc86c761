"""ClauseChunker: pure, table-driven, no event loop."""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import pytest

from tts.chunker import ClauseChunker
from tts.text import clean_for_speech, is_speakable

FORTY_FIVE = " ".join(f"w{i}" for i in range(45))
LONG_REPLY = (
    "The capital of France, as you may know, is Paris. "
    "It has been the capital for a very long time and it is also the largest city. "
    "Paris is known for art, food, fashion and the Eiffel Tower, which was built in 1889 "
    "for the World Fair, and it attracts millions of visitors every single year, "
    "especially in spring and summer."
)

# (text, expected clauses) with min_clause_words=4, max_clause_words=40
CASES: list[tuple[str, list[str]]] = [
    # first phrase: the first clause ends before a phrase start once it has 4 words
    ("The capital of France is Paris.", ["The capital of France", "is Paris."]),
    ("A week has 7 days.", ["A week has 7 days."]),  # "days" starts no phrase
    (
        "The sky on a clear day is a deep shade of blue.",
        ["The sky on a clear day", "is a deep shade of blue."],
    ),
    ("Paris is in France.", ["Paris is in France."]),  # "in" comes after only 2 words
    (
        "The capital of France is Paris. The capital of Italy is Rome.",
        ["The capital of France", "is Paris.", "The capital of Italy is Rome."],  # first only
    ),
    ("The capital of France, in short, is Paris.", ["The capital of France,", "in short, is Paris."]),
    ("The capital of France is, of course, Paris.", ["The capital of France", "is, of course, Paris."]),
    ("The capital city of France isn't Lyon.", ["The capital city of France", "isn't Lyon."]),
    ("The capital city of France doesn\u2019t move.", ["The capital city of France", "doesn\u2019t move."]),
    ("This is a small city (which I like).", ["This is a small city", "(which I like)."]),
    ('He wrote a book "about cats" once.', ["He wrote a book", '"about cats" once.']),
    ("We wrote a long in-depth report.", ["We wrote a long in-depth report."]),
    ("It was a great issue today.", ["It was a great issue today."]),  # "is" is only a prefix
    ("It was a great ISSUE TODAY OR NOT.", ["It was a great ISSUE TODAY", "OR NOT."]),
    ("The capital of France is", ["The capital of France", "is"]),  # the stream's end ends "is"
    ("The capital of France \nis Paris.", ["The capital of France", "is Paris."]),
    ("Mr. Smith met Dr. Jones and Mrs. Brown.", ["Mr. Smith met Dr. Jones", "and Mrs. Brown."]),
    # sentence ends, clause marks, cleaning
    ("Sure! The capital of France is Paris.", ["Sure!", "The capital of France is Paris."]),
    (
        "The capital of France, a large country, is Paris.",
        ["The capital of France,", "a large country, is Paris."],
    ),
    ("Hi, Paris is big.", ["Hi, Paris is big."]),
    (
        "Pi is about 3.14 and e is 2.72. Nice.",
        ["Pi is about 3.14", "and e is 2.72.", "Nice."],
    ),
    ("The answer is 3.5 not 3. Right.", ["The answer is 3.5 not 3.", "Right."]),
    (
        "Sure. Mr. Smith met Dr. Jones and Mrs. Brown on Main St. today. They talked.",
        ["Sure.", "Mr. Smith met Dr. Jones and Mrs. Brown on Main St. today.", "They talked."],
    ),
    ("Apple vs. Google is old news. Yes.", ["Apple vs. Google is old news.", "Yes."]),
    (
        "Fruits, e.g. apples, i.e. food, etc. are good. Yes.",
        ["Fruits, e.g. apples, i.e. food,", "etc. are good.", "Yes."],
    ),
    ("Bring snacks etc. Then go.", ["Bring snacks etc.", "Then go."]),
    ("J. R. R. Tolkien wrote it. Read it.", ["J. R. R. Tolkien wrote it.", "Read it."]),
    ("So do I. Then we go.", ["So do I.", "Then we go."]),
    ("We meet at 3:30 p.m. today. Bye.", ["We meet at 3:30 p.m. today.", "Bye."]),
    ("It is in the U.S. Many agree.", ["It is in the U.S.", "Many agree."]),
    (
        "Wait...what? Well... maybe. Hmm… Okay.",
        ["Wait...what?", "Well... maybe.", "Hmm…", "Okay."],
    ),
    ("Really?! Yes!!! Fine.", ["Really?!", "Yes!!!", "Fine."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("It is big (really big!) and old.", ["It is big (really big!)", "and old."]),
    ("(See Dr. Who.) Next one.", ["(See Dr. Who.)", "Next one."]),
    ("About 1,000 people came: all of them.", ["About 1,000 people came:", "all of them."]),
    ("One two three; four five six.", ["One two three; four five six."]),
    ("One two three four; five six.", ["One two three four;", "five six."]),
    (
        "It was late — very late — and dark.",
        ["It was late — very late —", "and dark."],
    ),
    ("Paris—the capital—is big.", ["Paris—the capital—is big."]),
    (
        "**Paris** is the *capital*. Use `print` here.",
        ["Paris is the capital.", "Use print here."],
    ),
    ("**Note:** it is fine.", ["Note: it is fine."]),
    (
        "Here are some:\n- Paris\n- London\n1. Rome\n2) Berlin\n* Madrid",
        ["Here are some:", "Paris", "London", "Rome", "Berlin", "Madrid"],
    ),
    ("# Title\n## Sub title\nSome text here.", ["Title", "Sub title", "Some text here."]),
    ("> Quoted words here.", ["Quoted words here."]),
    ("-5 degrees today.\n2024 was warm.", ["-5 degrees today.", "2024 was warm."]),
    ("1.5 liters is enough.", ["1.5 liters is enough."]),
    ("Great job 🎉! Have fun 😀.", ["Great job!", "Have fun."]),
    ("Flags 🇫🇷 and hearts ❤️ here.", ["Flags and hearts here."]),
    ("Paris is nice.\n\nLondon is too.", ["Paris is nice.", "London is too."]),
    ("Hello there", ["Hello there"]),
    ("one two three four,", ["one two three four,"]),
    ("... Hello there.", ["... Hello there."]),
    ("Hello. ...", ["Hello."]),
    ("Hello. 🎉", ["Hello."]),
    ("", []),
    ("   \n ", []),
    ("...!?", []),
    ("🎉🎉", []),
    (FORTY_FIVE, [" ".join(FORTY_FIVE.split()[:40]), " ".join(FORTY_FIVE.split()[40:])]),
    (
        LONG_REPLY,
        [
            "The capital of France,",  # eager while < 20 words have been emitted
            "as you may know,",
            "is Paris.",
            "It has been the capital for a very long time and it is also the largest city.",
            # later: sentences, cut at a clause mark only past 20 words
            "Paris is known for art, food, fashion and the Eiffel Tower, which was built "
            "in 1889 for the World Fair,",
            "and it attracts millions of visitors every single year, especially in spring and summer.",
        ],
    ),
]


def OldRules(*args: Any, **kwargs: Any) -> ClauseChunker:
    """A chunker without the short first chunk (``first_chunk_words=0``): the clause rules
    the tables below describe, before the first-chunk rule is layered on them."""
    return ClauseChunker(*args, first_chunk_words=0, **kwargs)


def run(chunker: ClauseChunker, deltas: list[str]) -> list[str]:
    out: list[str] = []
    for delta in deltas:
        out.extend(chunker.push(delta))
    out.extend(chunker.flush())
    return out


def whole(text: str) -> list[str]:
    return [text]


def chars(text: str) -> list[str]:
    return list(text)


def words(text: str) -> list[str]:
    return re.findall(r"\s+|\S+", text)


def words_with_space(text: str) -> list[str]:
    return re.findall(r"\s*\S+\s*|\s+", text)


def random_splits(text: str, seed: int) -> list[str]:
    if len(text) < 2:
        return [text]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


SPLITTERS = [
    chars,
    words,
    words_with_space,
    *[(lambda t, s=seed: random_splits(t, s)) for seed in range(5)],
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_clauses(text: str, expected: list[str]) -> None:
    assert run(OldRules(4), whole(text)) == expected


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_any_split_of_the_deltas_gives_the_same_clauses(text: str, expected: list[str]) -> None:
    for split in SPLITTERS:
        assert run(OldRules(4), split(text)) == expected, split(text)


def _no_space(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_nothing_lost_or_duplicated(text: str, expected: list[str]) -> None:
    joined = " ".join(run(OldRules(1, 3), chars(text)))
    cleaned = clean_for_speech(text)
    if is_speakable(cleaned.rsplit(maxsplit=1)[-1] if cleaned else ""):
        assert _no_space(joined) == _no_space(cleaned)
    else:  # a non-speakable tail ("...", an emoji) is dropped, nothing else
        assert _no_space(cleaned).startswith(_no_space(joined))


def test_clauses_arrive_as_soon_as_they_are_complete() -> None:
    chunker = OldRules(4)
    assert chunker.push("The capital of France") == []
    assert chunker.push(",") == []  # the whitespace has not arrived
    assert chunker.push(" is") == ["The capital of France,"]
    assert chunker.push(" Paris") == []
    assert chunker.push("!") == []
    assert chunker.push(" ") == ["is Paris!"]
    assert chunker.push("It costs 3.") == []
    assert chunker.push("5 euros. ") == []  # "." waits for the next visible character
    assert chunker.push("Then") == ["It costs 3.5 euros."]
    assert chunker.push(" more.\n") == ["Then more."]  # a line break decides at once
    assert chunker.flush() == []


def test_first_clause_is_eager_later_ones_prefer_sentences() -> None:
    chunker = OldRules(3, 40, later_clause_words=6)
    text = "Yes, it is. Sure, fine, ok then, one two three four five, six seven."
    assert run(chunker, [text]) == [
        "Yes, it is.",  # one word before the comma: below min_clause_words
        "Sure, fine, ok then,",  # eager: 3 words emitted so far, < later_clause_words
        "one two three four five, six seven.",  # 7 words emitted: needs 6 words now
    ]


def test_min_clause_words_is_respected_for_clause_marks() -> None:
    text = "One two, three four, five six."
    assert run(OldRules(2), [text]) == ["One two,", "three four,", "five six."]
    assert run(OldRules(3), [text]) == ["One two, three four,", "five six."]
    assert run(OldRules(10), [text]) == [text]


def test_force_split_at_max_words_waits_for_the_word_to_end() -> None:
    chunker = OldRules(1, 3)
    assert chunker.push("one two thr") == []
    assert chunker.push("ee") == []
    assert chunker.push(" fo") == ["one two three"]
    assert chunker.flush() == ["fo"]


@pytest.mark.parametrize(
    ("tail", "spoken"),
    [
        ("He was a master of", []),  # cut off mid-sentence: not spoken
        ("and", []),
        ('He said "yes."', ['He said "yes."']),  # a whole sentence, closing quote and all
        ("Really?", ["Really?"]),
    ],
)
def test_a_cut_off_stream_drops_its_unfinished_tail(tail: str, spoken: list[str]) -> None:
    first = "The dragon flew over the hills."
    chunker = ClauseChunker(4)
    assert chunker.push(f"{first} {tail}") == [first]
    assert chunker.flush(unfinished=False) == spoken
    assert chunker.push(f"{first} {tail}") == [first]
    assert chunker.flush() == [tail]  # a stream that ended by itself says all of it


def test_chunker_is_reusable_after_flush() -> None:
    chunker = OldRules(4)
    assert run(chunker, ["- Paris, the capital city of France, is big"]) == [
        "Paris, the capital city",  # first phrase
        "of France, is big",
    ]
    assert run(chunker, ["1. Rome, the capital of Italy, is old, as you know"]) == [
        "Rome, the capital of Italy,",  # a new reply: eager again
        "is old, as you know",
    ]
    assert run(chunker, ["The capital of Italy is Rome."]) == ["The capital of Italy", "is Rome."]


def test_first_phrase_split_waits_for_the_whole_next_word() -> None:
    chunker = OldRules(4)
    assert chunker.push("The capital of France") == []
    assert chunker.push(" i") == []
    assert chunker.push("s") == []  # "is" or "island"?
    assert chunker.push(" Paris") == ["The capital of France"]
    assert chunker.push(". The capital of Italy is") == ["is Paris."]
    assert chunker.push(" Rome") == []  # only the first clause of a reply
    assert chunker.flush() == ["The capital of Italy is Rome"]

    chunker = OldRules(4)
    assert chunker.push("The capital of France is") == []
    assert chunker.push(",") == ["The capital of France"]  # punctuation ends the word too
    assert chunker.push(" of course,") == []
    assert chunker.flush() == ["is, of course,"]


def test_first_phrase_split_can_be_disabled() -> None:
    chunker = OldRules(4, first_phrase_split=False)
    for text in [
        "The capital of France is Paris.",
        "Pi is about 3.14 and e is 2.72.",
        "Mr. Smith met Dr. Jones and Mrs. Brown on Main St. today.",
    ]:
        assert run(chunker, [text]) == [text]


def test_first_phrase_split_needs_min_clause_words() -> None:
    text = "One is two three is four five."
    assert run(OldRules(1), [text]) == ["One", "is two three is four five."]
    assert run(OldRules(2), [text]) == ["One is two three", "is four five."]
    assert run(OldRules(4), [text]) == ["One is two three", "is four five."]
    assert run(OldRules(5), [text]) == [text]


# (max_clause_chars, text, expected clauses) with min_clause_words=4
CHAR_LIMIT_CASES: list[tuple[int, str, list[str]]] = [
    (200, "1" * 450, ["1" * 200, "1" * 200, "1" * 50]),  # the default limit
    (10, "The value is 100000000000000000000000.", ["The value", "is", "1000000000", "0000000000", "0000."]),
    (10, "One 100000000000000000000000", ["One", "1000000000", "0000000000", "0000"]),
    (20, "aaaa bbbb cccc dddd eeee ffff.", ["aaaa bbbb cccc dddd", "eeee ffff."]),
    (19, "aaaa bbbb cccc dddd eeee ffff.", ["aaaa bbbb cccc dddd", "eeee ffff."]),  # exactly 19
    (18, "aaaa bbbb cccc dddd eeee ffff.", ["aaaa bbbb cccc", "dddd eeee ffff."]),
    (10, "   \n  12345678901234", ["1234567890", "1234"]),  # counted from the first visible char
    (10, "Hmm" + "." * 30 + " ok", ["Hmm.......", "... ok"]),  # unspeakable cuts are dropped
    (10, "!" * 25 + "Yes sir.", ["!!!!!Yes", "sir."]),
    # "..." after "sir" would need the 11th character to decide: cut at the whitespace instead
    (10, "Yes, sir... I mean ok.", ["Yes,", "sir...", "I mean ok."]),
    (40, "Yes. " + "x" * 100, ["Yes.", "x" * 40, "x" * 40, "x" * 20]),
]


@pytest.mark.parametrize(("max_chars", "text", "expected"), CHAR_LIMIT_CASES)
def test_max_clause_chars(max_chars: int, text: str, expected: list[str]) -> None:
    for split in [whole, *SPLITTERS]:
        assert run(OldRules(4, max_clause_chars=max_chars), split(text)) == expected, split(text)


def test_text_without_whitespace_is_spoken_while_it_streams() -> None:
    chunker = OldRules(4, max_clause_chars=10)
    assert [chunker.push("0") for _ in range(10)] == [[]] * 10
    assert chunker.push("0") == ["0" * 10]  # the 11th character: the clause is too long
    assert chunker.push("0" * 20) == ["0" * 10, "0" * 10]
    assert chunker.flush() == ["0"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**bold** and `code`", "bold and code"),
        ("- item\n  - nested", "item nested"),
        ("10) ten\n100. hundred\n1000. thousand", "ten hundred 1000. thousand"),
        ("C# is #1", "C# is #1"),
        ("Smile 😀 👍🏽 ok", "Smile ok"),
        ("a\u200db", "ab"),
    ],
)
def test_clean_for_speech(text: str, expected: str) -> None:
    assert clean_for_speech(text) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_clause_words": 0}, "min_clause_words"),
        ({"min_clause_words": 5, "max_clause_words": 4}, "max_clause_words"),
        ({"min_clause_words": 5, "later_clause_words": 4}, "later_clause_words"),
        ({"min_clause_words": 1, "max_clause_chars": 0}, "max_clause_chars"),
        ({"min_clause_words": 1, "first_chunk_words": -1}, "first_chunk_words"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClauseChunker(**kwargs)


_VOCAB = (
    "Paris|is|the|capital|of|France|Mr.|Dr.|e.g.|J.|3.5|3.|1,000|p.m.|U.S.|wait...what|"
    'well...|…|Yes!|Why?|ok,|so;|note:|—|(see|it)|"Stop."|**bold**|`code`|🎉|\n|\n- |'
    "\n1. |\n# |  |-5|#1|etc.|I.|and|which|(which|isn't|in-depth|that\u2019s|Is|is,|"
    "100000000000000000|wait...........|!!!!!!!!!!!!"
).split("|")


@pytest.mark.parametrize("first", [0, 2, 3])
@pytest.mark.parametrize("seed", range(40))
def test_random_texts_are_split_the_same_whatever_the_deltas(seed: int, first: int) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(_VOCAB) for _ in range(rng.randint(1, 60)))
    expected = run(ClauseChunker(3, 12, first_chunk_words=first), [text])
    for split in SPLITTERS:
        got = run(ClauseChunker(3, 12, first_chunk_words=first), split(text))
        assert got == expected, (text, split(text))
    assert all(is_speakable(clause) for clause in expected)
    joined = _no_space(" ".join(expected))
    cleaned = _no_space(clean_for_speech(text))
    assert cleaned.startswith(joined)
    assert not is_speakable(cleaned[len(joined) :])


def _alnum(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


@pytest.mark.parametrize("first", [0, 3])
@pytest.mark.parametrize("seed", range(40))
def test_random_texts_with_a_small_char_limit(seed: int, first: int) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(_VOCAB) for _ in range(rng.randint(1, 60)))
    chunker = {"max_clause_chars": 15, "first_chunk_words": first}
    expected = run(ClauseChunker(2, 12, **chunker), [text])
    for split in SPLITTERS:
        assert run(ClauseChunker(2, 12, **chunker), split(text)) == expected, (text, split(text))
    assert all(is_speakable(clause) and len(clause) <= 15 for clause in expected)
    # only unspeakable text may be dropped (a tail, or a cut of symbols only)
    assert _alnum(" ".join(expected)) == _alnum(clean_for_speech(text))


# ------------------------------------------------------------ the short first chunk

#: (first_chunk_words, reply, clauses) with min_clause_words 4, as the reply builds it
FIRST_CHUNK_CASES = [
    # before a phrase start once it has N words
    (3, "The capital of France is Paris, a city.", ["The capital of France", "is Paris, a city."]),
    (3, "Bees make honey from the nectar of flowers.", ["Bees make honey", "from the nectar of flowers."]),
    # ... but never before "of": it belongs to the noun before it
    (2, "The capital of France is Paris.", ["The capital of France", "is Paris."]),
    (2, "One member of the band is Paul.", ["One member of the band", "is Paul."]),
    # fewer than 3 words need 8 letters: two short words alone are hard to hear
    (2, "A spider has eight legs.", ["A spider has eight", "legs."]),
    (2, "A mosquito has six legs.", ["A mosquito", "has six legs."]),
    (2, "The sky is blue because of it.", ["The sky is blue", "because of it."]),
    # never after a word that leaves the phrase hanging
    (2, "Cats like to sleep in the sun.", ["Cats like to sleep", "in the sun."]),
    # at any clause mark, whatever the words
    (3, "Sure, I can help with that. What now?", ["Sure,", "I can help with that.", "What now?"]),
    (3, "Well; maybe.", ["Well;", "maybe."]),
    # from 2N words on, at a word boundary that leaves nothing hanging
    (2, "I am a voice assistant.", ["I am a voice", "assistant."]),
    (2, "It is a very long way to the top.", ["It is a very long", "way to the top."]),
    (2, "Seven big red apples sit there.", ["Seven big red apples", "sit there."]),
    (3, "Seven big red apples sit there and wait.", ["Seven big red apples sit there", "and wait."]),
    # before a number (a token per digit or two, several spoken words), unless the last word hangs
    (
        3,
        "The moon is approximately 140,760,000 kilometers away from Earth.",
        ["The moon is approximately", "140,760,000 kilometers away from Earth."],
    ),
    (
        3,
        "The moon is 384,400 kilometers away from Earth.",
        ["The moon is 384,400 kilometers away", "from Earth."],
    ),
    (3, "It is 5 pm now.", ["It is 5 pm now."]),
    # a short sentence ends it first, as always
    (3, "I am a voice assistant.", ["I am a voice assistant."]),
    (3, "Yes. Paris is the capital of France.", ["Yes.", "Paris is the capital of France."]),
    # then chunks grow: a long sentence is cut before a phrase start at twice the last chunk
    (
        3,
        "A good name for a cat could be Mocha or Cocoa to reflect their natural color and the term Mocha.",
        [
            "A good name",
            "for a cat could be Mocha",
            "or Cocoa to reflect their natural color and the term Mocha.",
        ],
    ),
    (2, "I see. Paris is big and old and in France.", ["I see.", "Paris is big and old", "and in France."]),
    # not at 2N words yet, or the last word would hang: no growing cut
    (3, "Okay. I can help with that today.", ["Okay.", "I can help with that today."]),
    # only the first chunks are short: later clauses go by clause, as before
    (3, "Hi there. One two, three four, five six.", ["Hi there.", "One two, three four,", "five six."]),
    # 0: the old rule (first clause by min_clause_words and the first-phrase split)
    (0, "Sure, I can help with that.", ["Sure, I can help", "with that."]),
    (0, "Bees make honey from the nectar of flowers.", ["Bees make honey from the nectar", "of flowers."]),
]


@pytest.mark.parametrize(("first", "text", "expected"), FIRST_CHUNK_CASES)
def test_the_first_chunk_is_short(first: int, text: str, expected: list[str]) -> None:
    assert run(ClauseChunker(4, first_chunk_words=first), whole(text)) == expected
    for split in SPLITTERS:
        assert run(ClauseChunker(4, first_chunk_words=first), split(text)) == expected, split(text)


def test_the_first_chunk_waits_for_the_whole_next_word_only() -> None:
    chunker = ClauseChunker(4, first_chunk_words=3)
    assert chunker.push("Bees make honey") == []
    assert chunker.push(" fr") == []  # "fr..." may be "from" or "fresh"
    assert chunker.push("om the") == ["Bees make honey"]
    assert chunker.flush() == ["from the"]


def test_every_reply_gets_its_own_short_first_chunk() -> None:
    chunker = ClauseChunker(4, first_chunk_words=3)
    assert run(chunker, whole("Bees make honey from flowers.")) == ["Bees make honey", "from flowers."]
    assert run(chunker, whole("Cats like milk from a bowl.")) == ["Cats like milk", "from a bowl."]


def test_the_default_comes_from_the_config() -> None:
    """Built from a config whose first chunk is unset (chosen from the LLM's speed where the
    engines are known), or with no value at all, the chunker uses its default."""
    from tts.chunker import DEFAULT_FIRST_CHUNK_WORDS
    from voice_pipeline.config import TTSConfig

    text = "A mosquito has six legs."
    fixed = run(ClauseChunker(4, first_chunk_words=DEFAULT_FIRST_CHUNK_WORDS), whole(text))
    assert run(ClauseChunker(4), whole(text)) == fixed
    assert run(ClauseChunker.of(TTSConfig(min_clause_words=4)), whole(text)) == fixed
    assert run(ClauseChunker.of(TTSConfig(first_chunk_words=2)), whole(text)) != fixed


# ------------------------------------------------------------ tentative: the next cut, guessed

#: (tokens as an LLM streams them, the first chunk, the tokens after which ``tentative``
#: already names it -- before the token that cuts it arrives)
GUESSED = [
    (["Sure", ",", " here", "'s", " one", "."], "Sure,", 2),
    (["The", " capital", " of", " France", " is", " Paris", "."], "The capital of France", 4),
    (["We", " make", " things", "."], "We make things.", 4),
    (["The", " moon", " is", " approximately", " ", "1", "4"], "The moon is approximately", 4),
    (["Hello", "!", " How", " can", " I", " help", "?"], "Hello!", 2),
]


@pytest.mark.parametrize(("tokens", "first", "known_after"), GUESSED)
def test_the_first_chunk_is_guessed_a_token_before_it_is_cut(
    tokens: list[str], first: str, known_after: int
) -> None:
    chunker = ClauseChunker(4, first_chunk_words=2)
    for i, token in enumerate(tokens, start=1):
        cut = chunker.push(token)
        if i < known_after:
            assert cut == [] and chunker.tentative() in (None, first), i
        elif i == known_after:
            assert cut == [] and chunker.tentative() == first  # not cut yet, but guessed
        else:
            assert cut in ([], [first])
            if cut:
                break
    else:
        cut = chunker.flush()
    assert cut[0] == first


def test_tentative_leaves_the_chunker_as_it_was() -> None:
    text = "The capital of France is Paris. It is a lovely city, with many museums."
    probed, plain = ClauseChunker(4, first_chunk_words=2), ClauseChunker(4, first_chunk_words=2)
    out_probed, out_plain = [], []
    for token in chars(text):
        probed.tentative()
        out_probed += probed.push(token)
        out_plain += plain.push(token)
    assert out_probed + probed.flush() == out_plain + plain.flush()


@pytest.mark.parametrize(
    "tokens",
    [["The", " capital"], ["The", " capital", " of"], ["Dr", "."], ["It", " is", " the"], []],
)
def test_nothing_is_guessed_where_no_ordinary_boundary_would_cut(tokens: list[str]) -> None:
    """Too few words, a dangling last word, or an abbreviation: the probe word would join the
    chunk, so there is no guess (never a chunk with the probe's word in it)."""
    chunker = ClauseChunker(4, first_chunk_words=2)
    for token in tokens:
        chunker.push(token)
    assert chunker.tentative() is None


def test_a_guess_can_be_wrong_and_the_cut_then_differs() -> None:
    chunker = ClauseChunker(4, first_chunk_words=2)
    for token in ["It", " costs", " 3", "."]:
        chunker.push(token)
    assert chunker.tentative() == "It costs 3."  # if a word followed ...
    assert chunker.push("5") == [] and chunker.push(" dollars") == []  # ... but it was 3.5
    assert chunker.tentative() == "It costs 3.5 dollars"
