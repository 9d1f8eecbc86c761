"""Turn-taking decisions: a table of call sequences, no event loop."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from voice_pipeline.turns import BeginUserTurn, CancelReply, Command, Phase, StartReply, TurnTaker


@dataclass(frozen=True)
class Speech:
    """The VAD heard speech start; ``audible``: over a reply the user is hearing."""

    audible: bool = False


@dataclass(frozen=True)
class End:
    """The user's turn ended."""


@dataclass(frozen=True)
class Finished:
    """The reply of ``turn_id`` finished (completed, cancelled or failed)."""

    turn_id: int


@dataclass(frozen=True)
class Resumed:
    """The paused reply of ``turn_id`` resumed after a false interruption."""

    turn_id: int


Call = Speech | End | Finished | Resumed
Step = tuple[Call, list[Command], Phase]


def apply(taker: TurnTaker, call: Call) -> list[Command]:
    match call:
        case Speech(audible=audible):
            return taker.speech_started(reply_audible=audible)
        case End():
            return taker.end_of_turn()
        case Finished(turn_id=tid):
            return taker.reply_finished(tid)
        case Resumed(turn_id=tid):
            taker.reply_resumed(tid)
            return []
    raise AssertionError(call)  # pragma: no cover


LS, US, RE = Phase.LISTENING, Phase.USER_SPEAKING, Phase.RESPONDING

SCRIPTS: dict[str, tuple[bool, list[Step]]] = {
    "one turn": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Finished(1), [], LS),
        ],
    ),
    "two turns in a row": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Finished(1), [], LS),
            (Speech(), [BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            (Finished(2), [], LS),
        ],
    ),
    "speech before the reply is heard cancels it, then the new turn proceeds": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(), [CancelReply(1, "user speech before the reply was heard"), BeginUserTurn(2)], US),
            # the cancelled reply finishing later does not end the user's new turn
            (Finished(1), [], US),
            (End(), [StartReply(2)], RE),
            (Finished(2), [], LS),
        ],
    ),
    "speech before the reply is heard, again and again": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(), [CancelReply(1, "user speech before the reply was heard"), BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            (Finished(1), [], RE),  # late news of reply 1 does not end reply 2
            (Speech(), [CancelReply(2, "user speech before the reply was heard"), BeginUserTurn(3)], US),
            (End(), [StartReply(3)], RE),
            (Finished(2), [], RE),
            (Finished(3), [], LS),
        ],
    ),
    # speech over a reply the user hears is left to the barge-in logic (pause, then
    # confirm or resume): turn-taking cancels nothing
    "speech over an audible reply cancels nothing; the new turn's reply takes the floor": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(audible=True), [BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            # reply 1, cancelled once the interruption was confirmed, finishes later
            (Finished(1), [], RE),
            (Finished(2), [], LS),
        ],
    ),
    "false interruption: the paused reply resumes and has the floor again": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(audible=True), [BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            (Resumed(1), [], RE),
            (Finished(2), [], RE),  # the backchannel's turn ends without a reply
            # speech over the resumed reply, before it is audible again, cancels it
            (Speech(), [CancelReply(1, "user speech before the reply was heard"), BeginUserTurn(3)], US),
            (Finished(1), [], US),
            (End(), [StartReply(3)], RE),
            (Finished(3), [], LS),
        ],
    ),
    "resumed while the user speaks again keeps the user's floor": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(audible=True), [BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            (Speech(audible=True), [BeginUserTurn(3)], US),
            (Resumed(1), [], US),
            (End(), [StartReply(3)], RE),
        ],
    ),
    "resumed reply finishing goes back to listening": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(audible=True), [BeginUserTurn(2)], US),
            (End(), [StartReply(2)], RE),
            (Resumed(1), [], RE),
            (Finished(2), [], RE),
            (Finished(1), [], LS),
        ],
    ),
    "speech after the reply finished cancels nothing": (
        True,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Finished(1), [], LS),
            (Speech(), [BeginUserTurn(2)], US),
        ],
    ),
    "end of turn without a user turn does nothing": (
        True,
        [
            (End(), [], LS),
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (End(), [], RE),
        ],
    ),
    "finish of an unknown turn does nothing": (
        True,
        [
            (Finished(9), [], LS),
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Finished(2), [], RE),
            (Finished(1), [], LS),
            (Finished(1), [], LS),
        ],
    ),
    "interruptions disabled: speech does not cancel, the next reply supersedes": (
        False,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(), [BeginUserTurn(2)], US),
            (End(), [CancelReply(1, "superseded"), StartReply(2)], RE),
            (Finished(1), [], RE),
            (Finished(2), [], LS),
        ],
    ),
    "interruptions disabled: audible or not, speech does not cancel": (
        False,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(audible=True), [BeginUserTurn(2)], US),
            (End(), [CancelReply(1, "superseded"), StartReply(2)], RE),
        ],
    ),
    "interruptions disabled: reply finishing while the user speaks": (
        False,
        [
            (Speech(), [BeginUserTurn(1)], US),
            (End(), [StartReply(1)], RE),
            (Speech(), [BeginUserTurn(2)], US),
            (Finished(1), [], US),
            (End(), [StartReply(2)], RE),
        ],
    ),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_turn_taking(name: str) -> None:
    interrupt, steps = SCRIPTS[name]
    taker = TurnTaker(interrupt_on_speech=interrupt)
    assert taker.phase is LS
    for i, (call, commands, phase) in enumerate(steps):
        assert apply(taker, call) == commands, (i, call)
        assert taker.phase is phase, (i, call)


def test_turn_ids_and_bookkeeping() -> None:
    taker = TurnTaker()
    taker.speech_started()
    assert (taker.user_turn, taker.reply_turn) == (1, None)
    taker.end_of_turn()
    assert (taker.user_turn, taker.reply_turn) == (None, 1)
    taker.speech_started()
    assert (taker.user_turn, taker.reply_turn) == (2, None)
    taker.end_of_turn()
    taker.reply_finished(2)
    assert (taker.user_turn, taker.reply_turn) == (None, None)
