"""Running a round of tool calls beside the reply (the thin asyncio side of the loop).

:class:`ToolBox` is one session's tools and settings (``dialogue.tools`` ...), given to
each reply; :class:`RoundRunner` runs one round's calls concurrently, each under its
timeout, and emits a :class:`~voice_pipeline.events.ToolResult` per call.

Ownership (structured cancellation): a call whose tool lets barge-in cancel it
(``cancel_on_interruption=True``, the default) is a task of the round's
:class:`asyncio.TaskGroup`, inside the reply's task: cancelling the reply cancels it.
A call that must finish is a task of the session's scope (``ToolBox.spawn``: the
session cancels and awaits it on close); the round only waits for it. If the reply is
cancelled meanwhile, its result still lands: :meth:`ToolRound.finish` (the turn not yet
remembered) and ``ToolBox.on_late`` (the history's tool message is replaced).

A plain function runs in a worker thread; at its timeout the round stops waiting for it
(a thread cannot be stopped), its late return value is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from llm.base import ToolCall, ToolOffer
from voice_pipeline import events as ev
from voice_pipeline.dialogue_config import DialogueConfig
from voice_pipeline.tools.loop import CANCELLED, Failure, ToolOutcome, ToolRound, error_outcome, output_text
from voice_pipeline.tools.registry import Tool, ToolRegistry, load_tools
from voice_pipeline.tools.schema import check_arguments

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


@dataclass(frozen=True, slots=True)
class ToolBox:
    """A session's server-side tools, how they run, and where late results go."""

    registry: ToolRegistry
    choice: str  # dialogue.tool_choice
    timeout_s: float
    filler_after_ms: int
    filler_text: str
    max_rounds: int
    #: the session's scope: owns the calls that outlive a barge-in
    spawn: Spawn
    #: a detached call's result, after its reply was cancelled: (call_id, output)
    on_late: Callable[[str, str], None]

    @classmethod
    def of(cls, d: DialogueConfig, spawn: Spawn, on_late: Callable[[str, str], None]) -> ToolBox | None:
        """The tools of ``dialogue`` (None without any); ConfigError if one cannot be loaded."""
        if not d.tools:
            return None
        return cls(
            load_tools(d.tools), d.tool_choice, d.tool_timeout_s, d.tool_filler_after_ms,
            d.tool_filler_text, d.tool_max_rounds, spawn, on_late,
        )  # fmt: skip

    def offer(self) -> ToolOffer:
        return self.registry.offer(self.choice)

    def new_round(self, calls: tuple[ToolCall, ...], text: str = "") -> ToolRound:
        cancellable = tuple(
            (t := self.registry.get(c.name)) is None or t.cancel_on_interruption for c in calls
        )
        return ToolRound(calls, cancellable, text)


async def execute(call: ToolCall, tool: Tool | None, timeout_s: float, names: str) -> ToolOutcome:
    """Run one call; every failure is an outcome the LLM is told, never an exception
    (but cancellation, which is re-raised)."""
    if tool is None:
        return error_outcome(f"there is no tool named {call.name!r} (the tools: {names})", Failure.NO_TOOL)
    try:
        kwargs = check_arguments(call.arguments, tool.parameters)
    except ValueError as exc:
        return error_outcome(f"malformed arguments: {exc}", Failure.ARGUMENTS)
    limit = tool.timeout_s or timeout_s
    try:
        async with asyncio.timeout(limit):
            if tool.is_async:
                value = await tool.fn(**kwargs)
            else:
                value = await asyncio.to_thread(tool.fn, **kwargs)
    except TimeoutError:
        return error_outcome(f"timed out after {limit:g} s", Failure.TIMEOUT)
    except Exception as exc:  # the tool's own failure: the LLM is told, the session goes on
        log.warning("tool %s failed", call.name, exc_info=True)
        return error_outcome(f"the tool failed: {type(exc).__name__}: {exc}", Failure.RAISED)
    return ToolOutcome(output_text(value))


class RoundRunner:
    """Runs one :class:`ToolRound` (see the module docstring for who owns which call)."""

    def __init__(
        self, box: ToolBox, rnd: ToolRound, turn_id: int, emit: Callable[[ev.Event], None],
        clock: Callable[[], int],
    ) -> None:  # fmt: skip
        self._box = box
        self._round = rnd
        self._turn_id = turn_id
        self._emit = emit
        self._clock = clock

    async def run(self, on_slow: Callable[[], Awaitable[None]]) -> None:
        """Run every call; ``on_slow`` once if they are not all done after
        ``filler_after_ms``. Cancelled (barge-in): the round is abandoned."""
        box, rnd = self._box, self._round
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = []
                for i, call in enumerate(rnd.calls):
                    name = f"tool-{self._turn_id}-{call.call_id}"
                    if rnd.cancellable[i]:
                        tasks.append(tg.create_task(self._one(i), name=name))
                    else:
                        tasks.append(box.spawn(self._one(i), name))
                if box.filler_after_ms > 0:
                    _, pending = await asyncio.wait(tasks, timeout=box.filler_after_ms / 1000)
                    if pending:
                        await on_slow()
                await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for i in rnd.abandon():  # cancelled before they even started
                self._result(i, ToolOutcome("", CANCELLED))
            raise

    async def _one(self, index: int) -> None:
        box, rnd = self._box, self._round
        call = rnd.calls[index]
        names = ", ".join(t.spec.name for t in box.registry.tools)
        try:
            outcome = await execute(call, box.registry.get(call.name), box.timeout_s, names)
        except asyncio.CancelledError:
            rnd.cancel(index)
            self._result(index, ToolOutcome("", CANCELLED))
            raise
        rnd.finish(index, outcome)
        self._result(index, outcome)
        if rnd.abandoned:  # its reply is gone: the result goes to the history directly
            box.on_late(call.call_id, outcome.output)

    def _result(self, index: int, outcome: ToolOutcome) -> None:
        call = self._round.calls[index]
        self._emit(
            ev.ToolResult(
                self._turn_id, self._clock(), call.call_id, call.name, outcome.output, outcome.error
            )
        )
