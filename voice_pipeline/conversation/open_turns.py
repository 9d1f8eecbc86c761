"""The turns of one session not over yet, and whether the session is idle.

:class:`OpenTurns` is the session's bookkeeping of its :class:`~voice_pipeline.conversation.turn.Turn` s,
from the machine's ``BeginTurn`` or ``BeginReply`` until the turn is finished or dropped:
which turn's utterance gets the input (``capture``), which turns have a reply task
running, and the two signals a driver waits on (idle: no user turn and no reply; no
reply). It decides nothing: the session sets it as it carries out the machine's commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from voice_pipeline.conversation.turn import Turn


class OpenTurns:
    def __init__(self) -> None:
        self._turns: dict[int, Turn] = {}
        self.capture: Turn | None = None  # the turn whose utterance gets the input
        self._replying: set[int] = set()
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

    # ------------------------------------------------------------ a turn's course

    def add(self, turn: Turn, *, capture: bool) -> None:
        """A turn began (``capture``: the user's, its utterance gets the input from now on)."""
        self._turns[turn.turn_id] = turn
        if capture:
            self.capture = turn
        self._idle.clear()

    def listen(self, turn: Turn) -> None:
        """The user went on with ``turn``: its utterance gets the input again."""
        self.capture = turn
        self._idle.clear()

    def seal(self, turn_id: int) -> None:
        """Turn ``turn_id``'s utterance gets no more input."""
        if self.capture is not None and self.capture.turn_id == turn_id:
            self.capture = None

    def remove(self, turn_id: int) -> None:
        """The turn is over (finished or dropped)."""
        self._turns.pop(turn_id, None)

    # ------------------------------------------------------------ replies

    def reply_started(self, turn_id: int) -> None:
        self._replying.add(turn_id)
        self._no_reply.clear()

    def reply_over(self, turn_id: int) -> None:
        self._replying.discard(turn_id)
        if not self._replying:
            self._no_reply.set()

    @property
    def replies(self) -> int:
        """Reply tasks running."""
        return len(self._replying)

    @property
    def llm_idle(self) -> bool:
        """No reply and no speculative LLM request is running."""
        return not self._replying and not any(t.utterance.prefetching for t in self._turns.values())

    def said_over(self, turn: Turn) -> str:
        """What the reply ``turn`` was spoken over had said (by the time its words came)."""
        over = self.get(turn.spoken_over)
        return over.reply.text if over is not None and over.reply is not None else ""

    def winding_down_before(self, turn_id: int) -> list[asyncio.Task[None]]:
        """The tasks of the earlier replies cut by the user that have not ended yet."""
        turns = self._turns.values()
        return [t.reply_task for t in turns if t.turn_id < turn_id and t.winding_down and t.reply_task]

    # ------------------------------------------------------------ idle

    def settle(self, *, user_turn: bool) -> None:
        """Idle now if there is no user turn (``user_turn``: the machine has one) and no reply."""
        if not user_turn and not self._replying:
            self._idle.set()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_no_reply(self) -> None:
        await self._no_reply.wait()
