"""The turns of one session not over yet, and the signals a driver waits on.

:class:`OpenTurns` holds the session's :class:`~voice_pipeline.conversation.turn.Turn` s, from
the machine's ``BeginTurn`` or ``BeginReply`` until the turn is finished or dropped. It
keeps no turn state of its own: which turn's utterance gets the input, which turns have a
reply running and whether the user has a turn, it asks the machine (:class:`TurnView`).
What it owns are the two asyncio signals a driver waits on (idle: no user turn and no
reply; no reply), set from the machine's answers by :meth:`OpenTurns.settle`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Protocol

from voice_pipeline.conversation.turn import Turn


class TurnView(Protocol):
    """What the runtime reads of :class:`~voice_pipeline.turntaking.machine.TurnMachine`."""

    @property
    def user(self) -> int | None: ...
    @property
    def capturing(self) -> int | None: ...
    @property
    def replying(self) -> list[int]: ...
    def spoken_over(self, turn_id: int) -> int | None: ...


class OpenTurns:
    def __init__(self, machine: TurnView) -> None:
        self._machine = machine
        self._turns: dict[int, Turn] = {}
        self._idle = asyncio.Event()  # no user turn and no reply in progress
        self._idle.set()
        self._no_reply = asyncio.Event()
        self._no_reply.set()

    def __getitem__(self, turn_id: int) -> Turn:
        return self._turns[turn_id]

    def __len__(self) -> int:
        return len(self._turns)

    def __iter__(self) -> Iterator[Turn]:
        return iter(list(self._turns.values()))

    def get(self, turn_id: int | None) -> Turn | None:
        return self._turns.get(turn_id) if turn_id is not None else None

    @property
    def capture(self) -> Turn | None:
        """The turn whose utterance gets the input (the machine's unsealed turn)."""
        return self.get(self._machine.capturing)

    def add(self, turn: Turn) -> None:
        """A turn began."""
        self._turns[turn.turn_id] = turn

    def remove(self, turn_id: int) -> None:
        """The turn is over (finished or dropped)."""
        self._turns.pop(turn_id, None)

    # ------------------------------------------------------------ replies

    @property
    def replies(self) -> int:
        """Reply tasks running."""
        return len(self._machine.replying)

    @property
    def llm_idle(self) -> bool:
        """No reply and no speculative LLM request is running."""
        return not self._machine.replying and not any(t.utterance.prefetching for t in self._turns.values())

    def said_over(self, turn: Turn) -> str:
        """What the reply ``turn`` was spoken over had said (by the time its words came)."""
        over = self.get(self._machine.spoken_over(turn.turn_id))
        return over.reply.text if over is not None and over.reply is not None else ""

    def winding_down_before(self, turn_id: int) -> list[asyncio.Task[None]]:
        """The tasks of the earlier replies cut by the user that have not ended yet."""
        turns = self._turns.values()
        return [t.reply_task for t in turns if t.turn_id < turn_id and t.winding_down and t.reply_task]

    # ------------------------------------------------------------ idle

    def settle(self) -> None:
        """Signal what the machine says now (after each batch of its commands is carried out)."""
        replying = bool(self._machine.replying)
        _signal(self._no_reply, not replying)
        _signal(self._idle, not replying and self._machine.user is None)

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_no_reply(self) -> None:
        await self._no_reply.wait()


def _signal(event: asyncio.Event, on: bool) -> None:
    if on:
        event.set()
    else:
        event.clear()
