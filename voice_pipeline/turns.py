"""Turn-taking decisions (pure): who has the floor, and what to do about it.

The session feeds it what the VAD decided and what the reply did; it answers
with commands the asyncio runtime carries out. No clock, no asyncio.

Phases::

    LISTENING --speech started--> USER_SPEAKING --end of turn--> RESPONDING
        ^                              ^                            |
        |                              +------ speech started ------+  (CancelReply: barge-in)
        +-------------------------- reply finished -----------------+

Speech over a reply the user can hear does not cancel it here: the barge-in
logic (:mod:`voice_pipeline.bargein`) pauses it and then confirms or resumes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Phase(enum.StrEnum):
    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    RESPONDING = "responding"


@dataclass(frozen=True, slots=True)
class BeginUserTurn:
    turn_id: int


@dataclass(frozen=True, slots=True)
class StartReply:
    turn_id: int


@dataclass(frozen=True, slots=True)
class CancelReply:
    turn_id: int
    reason: str


Command = BeginUserTurn | StartReply | CancelReply


class TurnTaker:
    def __init__(self, *, interrupt_on_speech: bool = True) -> None:
        self.phase = Phase.LISTENING
        self.interrupt_on_speech = interrupt_on_speech
        self._next_id = 1
        self.user_turn: int | None = None  # the user turn being spoken
        self.reply_turn: int | None = None  # the reply in progress

    def speech_started(self, *, reply_audible: bool = False) -> list[Command]:
        """User speech began. A reply nobody has heard yet is cancelled at once; one
        the user is hearing is left to the barge-in logic (pause, then confirm or resume)."""
        cmds: list[Command] = []
        if self.reply_turn is not None and self.interrupt_on_speech and not reply_audible:
            cmds.append(CancelReply(self.reply_turn, "user speech before the reply was heard"))
            self.reply_turn = None
        self.user_turn = self._next_id
        self._next_id += 1
        self.phase = Phase.USER_SPEAKING
        cmds.append(BeginUserTurn(self.user_turn))
        return cmds

    def end_of_turn(self) -> list[Command]:
        if self.user_turn is None:
            return []
        turn, self.user_turn = self.user_turn, None
        cmds: list[Command] = []
        if self.reply_turn is not None and not self.interrupt_on_speech:
            cmds.append(CancelReply(self.reply_turn, "superseded"))
        # otherwise a reply still alive was spoken over: the new turn's words decide its fate
        self.reply_turn = turn
        self.phase = Phase.RESPONDING
        cmds.append(StartReply(turn))
        return cmds

    def reply_resumed(self, turn_id: int) -> None:
        """A paused reply goes on after a false interruption: it has the floor again."""
        self.reply_turn = turn_id
        self.phase = Phase.RESPONDING if self.user_turn is None else self.phase

    def reply_finished(self, turn_id: int) -> list[Command]:
        if self.reply_turn == turn_id:
            self.reply_turn = None
            if self.user_turn is None:
                self.phase = Phase.LISTENING
        return []
