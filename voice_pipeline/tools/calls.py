"""A reply's function calls, assembled from the LLM's streamed deltas (pure).

The LLM streams each call in pieces (:class:`llm.base.ToolCallDelta`): the first piece
of a call carries its ``call_id`` and ``name``, later pieces more ``arguments`` text;
``index`` tells parallel calls apart. :class:`CallAssembler` keeps them in the order
the model began them and says, per piece, what is new (for the transport's events).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llm.base import ToolCall, ToolCallDelta

_fallback_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class CallPiece:
    """What one delta added to a call (``index``: the call's place in the reply)."""

    index: int
    call_id: str
    name: str
    arguments_delta: str


@dataclass(slots=True)
class _Open:
    call_id: str
    name: str
    arguments: str = ""


class CallAssembler:
    """Deltas in, complete :class:`~llm.base.ToolCall` s out (in the order begun)."""

    def __init__(self) -> None:
        self._calls: dict[int, _Open] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def push(self, delta: ToolCallDelta) -> CallPiece:
        call = self._calls.get(delta.index)
        if call is None:
            call_id = delta.call_id or f"call_{next(_fallback_ids)}"
            call = self._calls[delta.index] = _Open(call_id, delta.name or "")
        elif delta.name and not call.name:
            call.name = delta.name
        call.arguments += delta.arguments
        return CallPiece(delta.index, call.call_id, call.name, delta.arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(c.call_id, c.name, c.arguments) for _, c in sorted(self._calls.items()))
