"""What enters the history when a turn ends (pure: voice_pipeline.conversation.history.admits)."""

from __future__ import annotations

import pytest

from voice_pipeline.conversation.history import admits
from voice_pipeline.turntaking.bargein import InterruptionKind

K = InterruptionKind


@pytest.mark.parametrize(
    ("user_text", "asked", "interruption", "failed", "heard", "expected"),
    [
        ("What time is it?", True, None, False, "It is noon.", True),  # a plain turn
        ("Stop, tell me more", True, K.WORDS, False, "", True),  # words over a reply
        ("", True, None, False, "Hello.", False),  # no words
        ("Hi", False, None, False, "Hello.", False),  # an out-of-band reply: not asked
        ("uh-huh", True, K.BACKCHANNEL, False, "", False),  # not meant for the assistant
        ("Hi", True, None, True, "", False),  # failed, nothing heard: never answered
        ("Hi", True, None, True, "Let me", True),  # failed after some of it was heard
    ],
)
def test_a_turn_enters_the_history_only_if_meant_asked_and_answered(
    user_text: str,
    asked: bool,
    interruption: InterruptionKind | None,
    failed: bool,
    heard: str,
    expected: bool,
) -> None:
    assert admits(user_text, asked=asked, interruption=interruption, failed=failed, heard=heard) is expected


def test_every_interruption_but_words_is_kept_out() -> None:
    kept = {k for k in InterruptionKind if admits("x", asked=True, interruption=k, failed=False, heard="")}
    assert kept == {InterruptionKind.WORDS}
