"""RepetitionGuard: pure, no event loop. The replies are SmolLM2-135M's own (greedy, no
repetition penalty, session 34), cut into clauses as a reply cuts them."""

from __future__ import annotations

import pytest
from speech import repeated_run, words

from tts.chunker import ClauseChunker
from voice_pipeline.config import TTSConfig
from voice_pipeline.conversation.repetition import MIN_SENTENCE_WORDS, RepetitionGuard

DAYS = (
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday, "
    "Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Wednesday, Thursday, Friday, "
    "Saturday, Sunday, Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, "
    "Monday, Wednesday, Thursday, Friday, Saturday, Sunday, Tuesday, Wednesday, Thursday, "
    "Friday, Saturday, Sunday, Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, "
    "Sunday, Monday, Tuesday,"
)
PLANETS = (
    "The planets in the solar system are: Earth, Mars, Mercury, Venus, Earth's Moon, Mars, "
    "Mercury, Venus, Earth, Mars, Earth's Moon, Mercury, Venus, Earth, Mars, Earth's Moon, "
    "Mercury, Venus, Earth, Mars, Earth's Moon, Mercury, Venus, Earth, Mars, Earth's Moon, "
    "Mercury, Venus, Earth, Mars, Earth's Moon, Mercury, Venus, Earth, Mars, Earth's Moon, "
    "Mercury,"
)
DINNER = "I'm so sorry for any food-related issues. I'm sorry for any food-related issues."
JOKE = 'A: "What\'s a joke about a joke?"\n\nA: "What\'s a joke about a joke?"'  # with frequency_penalty 0.3
#: replies that say a few words twice, as people do, and no more
SKY = (
    "The sky blue is a result of the Earth's atmosphere scattering sunlight in a range of colors, "
    "primarily blue. This process is known as scattering. The blue light is scattered in all "
    "directions, but the blue light is scattered more than the other colors, resulting in the "
    "blue color of the sky."
)
LIFE = (
    "The meaning of life is a profound and universal question that has been pondered by "
    "philosophers and theologians throughout history. Some believe that it is a personal question "
    "that can be answered by faith alone, while others argue that it is a philosophical question "
    "that cannot be answered with certainty."
)


def speak(text: str, run_words: int = 7, delta: int = 5) -> tuple[list[str], RepetitionGuard]:
    """The clauses a reply speaks of ``text`` streamed in ``delta``-character pieces."""
    chunker, guard = ClauseChunker.of(TTSConfig()), RepetitionGuard(run_words)
    spoken: list[str] = []
    for i in range(0, len(text), delta):
        spoken += [c for c in map(guard.admit, chunker.push(text[i : i + delta])) if c is not None]
        if guard.stopped:
            return spoken, guard
    spoken += [c for c in map(guard.admit, chunker.flush()) if c is not None]
    return spoken, guard


@pytest.mark.parametrize("reply", [DAYS, PLANETS])
def test_a_loop_stops_before_it_goes_round_again(reply: str) -> None:
    spoken, guard = speak(reply)
    said = " ".join(spoken)
    assert guard.stopped
    assert repeated_run(said) is None, said
    assert len(said) < len(reply) // 2  # the loop's first turns, not its 25 s
    assert said.endswith(","), said  # on a whole item of the list


def test_the_days_are_said_once_before_the_loop_stops() -> None:
    said = " ".join(speak(DAYS)[0])
    days = words(said)
    assert days[:7] == "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split(), said


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (DINNER, "I'm so sorry for any food-related issues."),  # the second: one word less
        (JOKE, 'A: "What\'s a joke about a joke?"'),
        ("The cat sat on the mat. The cat sat on the mat again. Then it slept.", "The cat sat on the mat."),
    ],
)
def test_a_sentence_said_again_is_not_spoken(reply: str, said: str) -> None:
    spoken, guard = speak(reply, run_words=50)  # the sentence, not a run, finds these
    assert guard.stopped and " ".join(spoken) == said


@pytest.mark.parametrize(
    "reply",
    [
        SKY,
        LIFE,
        "Hello! Hello! No, no. Yes, yes, yes.",
        "The red light is scattered less. The blue light is scattered more.",  # one word changed
    ],
)
def test_words_said_twice_as_people_say_them_are_all_spoken(reply: str) -> None:
    spoken, guard = speak(reply)
    assert not guard.stopped
    assert words(" ".join(spoken)) == words(reply)


def test_a_repeat_inside_a_clause_keeps_the_part_before_it_without_a_hanging_word() -> None:
    guard = RepetitionGuard(4)
    assert guard.admit("The light is scattered in all directions,") is not None
    assert guard.admit("and it is bright, but the light is scattered more") == "and it is bright,"
    assert guard.stopped
    assert guard.admit("than the other colors.") is None  # nothing after the repeat


def test_a_repeat_that_began_in_a_clause_already_spoken_leaves_nothing_of_the_next() -> None:
    guard = RepetitionGuard(4)
    for clause in ("one two three four,", "five six one two"):
        assert guard.admit(clause) == clause  # "one two" alone is no run of four yet
    assert guard.admit("three four and more") is None and guard.stopped


def test_the_part_before_a_repeat_is_dropped_when_only_hanging_words_are_left() -> None:
    guard = RepetitionGuard(3)
    guard.admit("red green blue.")
    assert guard.admit("And the red green blue.") is None


def test_a_typographic_apostrophe_is_the_same_word() -> None:
    guard = RepetitionGuard(0 + 4)
    guard.admit("It\u2019s a lovely day today.")
    assert guard.admit("It's a lovely day again.") is None


def test_a_sentence_repeat_needs_min_sentence_words() -> None:
    short = " ".join(["word"] * (MIN_SENTENCE_WORDS - 1)) + "."
    guard = RepetitionGuard(50)
    assert guard.admit(short) == short and guard.admit(short) == short and not guard.stopped
    long = "the same four words."
    assert guard.admit(long) == long and guard.admit(long) is None and guard.stopped


def test_zero_turns_it_off_and_a_negative_length_is_refused() -> None:
    spoken, guard = speak(DAYS, run_words=0)
    assert not guard.stopped and words(" ".join(spoken)) == words(DAYS)
    with pytest.raises(ValueError, match="run_words"):
        RepetitionGuard(-1)


@pytest.mark.parametrize("delta", [1, 3, 17, 1000])
def test_what_is_spoken_does_not_depend_on_how_the_text_streamed(delta: int) -> None:
    for reply in (DAYS, PLANETS, DINNER, SKY):
        assert speak(reply, delta=delta)[0] == speak(reply, delta=5)[0]
