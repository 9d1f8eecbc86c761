"""Function calls in a model's streamed text, told apart from its spoken text (pure).

A model offered tools (``tool_choice: auto``) answers with text, with calls, or both.
Two written forms of a call are accepted:

* Hermes tags (Qwen2.5, Hermes, many fine-tunes), one tag per call, several for
  parallel calls::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

* bare JSON at the start of the reply, or right after another call, with no tags
  (Qwen2.5-Coder-0.5B-Instruct writes this): one object, several objects one after the
  other, or a list of them::

      {"name": "get_weather", "arguments": {"city": "Paris"}}
      [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]

  (``"parameters"`` is taken for ``"arguments"``, and ``{"function": {...}}`` for the
  object inside it; a Markdown fence around them, ```` ```json ````, is dropped.)

:class:`ToolCallParser` is fed the reply's text piece by piece and returns what it has
decided: plain text at once, calls when each is complete. Text that may still turn into
a call is held until that is decided -- a tail that may be the start of ``<tool_call>``,
and a reply (or the text after a call) that starts with ``{`` or ``[`` until that JSON
value closes (is it a call?) or cannot be one (``{`` not followed by ``"``, ``[`` by
``{``)::

    START --"{" or "["--> BARE --value closed: a call--> (call) START
      |                     '---closed, not a call / cannot be one--> TEXT
      |--"<tool_call>"--> TAG --"</tool_call>"--> (call) START
      '--other text--> TEXT --"<tool_call>"--> TAG
                        (TEXT holds a tail that may begin "<tool_call>")

Each call comes out whole, as one :class:`~llm.base.ToolCallDelta` (its id, its name,
all its arguments). The arguments are the model's JSON as text: an object is written
out again (``json.dumps``), a string is taken as the JSON text it carries. A call the
model wrote wrong (a broken JSON value, a tag never closed, max_tokens reached inside
it) is salvaged, never raised: its name if one is written (else ``""``) and its
arguments *as written*, so the caller can report them (``json.loads`` fails). Blank
text between and after calls is dropped.

The JSON scanning and the salvage of broken calls live in :mod:`llm.calljson`.
:class:`NamedCallStream` is the same interface for a request forced to call one
function (structured outputs make the whole reply the arguments JSON): its text is
streamed as that call's arguments. :class:`ToolCallCollector` joins the deltas of a
reply into :class:`~llm.base.ToolCall` objects.
"""

from __future__ import annotations

import enum
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from llm.base import ToolCall, ToolCallDelta
from llm.calljson import (
    CLOSE_TAG,
    NAME_KEY,
    calls_in_json,
    close_tag_at,
    json_value_end,
    may_be_call,
    salvage_calls,
)

OPEN_TAG: Final = "<tool_call>"
FENCE: Final = "```"
#: the language tags of a Markdown fence that may hold bare JSON calls
FENCE_LANGUAGES: Final = frozenset({"", "json", "tool_call", "tool_code"})


def new_call_id() -> str:
    """A fresh call id, ``call_`` and 24 random hex digits (unique in practice)."""
    return f"call_{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one :meth:`ToolCallParser.feed` decided: text to pass on, and complete calls."""

    text: str = ""
    calls: tuple[ToolCallDelta, ...] = ()


class CallStream(Protocol):
    """What an engine runs a reply's text through when the request offered tools."""

    @property
    def calls(self) -> list[ToolCall]:
        """The complete calls so far."""
        ...

    def feed(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed: ...


class _State(enum.Enum):
    START = "start"  # nothing decided yet (the reply's start, or just after a call)
    TEXT = "text"
    TAG = "tag"  # inside <tool_call> ... </tool_call>
    BARE = "bare"  # a JSON value that may be a call


class ToolCallParser:
    """Splits a streamed reply into text and function calls (see the module docstring).

    ``feed()`` each new piece of text, ``finish()`` once at the end; each returns what
    was decided since the last call. ``new_id`` makes the call ids (tests pass a counter).
    """

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._state = _State.START
        self._buf = ""  # text not yet decided (START, TAG, BARE) or held (TEXT: a tag's start)
        self._index = 0
        self._finished = False
        self._fence = ""  # an opening ``` fence held with the JSON after it
        self._in_fence = False  # calls were read inside a fence: drop the closing one
        #: every complete call so far, in order
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> Parsed:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self._buf += text
        out_text: list[str] = []
        out_calls: list[ToolCallDelta] = []
        while self._step(out_text, out_calls):
            pass
        return Parsed("".join(out_text), tuple(out_calls))

    def finish(self) -> Parsed:
        """The end of the reply: decide what is still held (a call cut short is salvaged)."""
        if self._finished:
            return Parsed()
        self._finished = True
        buf, self._buf = self._buf, ""
        calls: list[ToolCallDelta] = []
        text = ""
        match self._state:
            case _State.START:
                text = "" if self.calls else buf
            case _State.TEXT:
                text = buf
            case _State.TAG:
                body = buf[: len(buf) - _partial_tag_len(buf, CLOSE_TAG)]
                self._emit(self._calls_of(body.strip()), calls)
            case _State.BARE:
                body = buf.strip()
                if NAME_KEY.search(body):
                    self._emit(salvage_calls(body.removesuffix(FENCE)), calls)
                else:
                    text = self._fence + buf
        return Parsed(text, tuple(calls))

    # ------------------------------------------------------------ internals

    def _step(self, out_text: list[str], out_calls: list[ToolCallDelta]) -> bool:
        """Advance on the buffer once; True if the state changed (so step again)."""
        buf = self._buf
        if self._state is _State.START:
            stripped = buf.lstrip()
            if not stripped:
                return False
            if stripped[0] == "`":
                fenced = self._fence_step(buf, stripped)
                if fenced is not None:
                    return fenced
            if stripped[0] in "{[":  # (a next call in the same fence, if any)
                self._buf = buf if not self.calls else stripped
                return self._move(_State.BARE)
            self._in_fence = False
            if stripped.startswith(OPEN_TAG):
                self._buf = stripped[len(OPEN_TAG) :]
                return self._move(_State.TAG)
            if OPEN_TAG.startswith(stripped):
                return False  # may be the start of a tag
            if self.calls:
                self._buf = stripped  # no blank text between a call and what follows
            return self._move(_State.TEXT)
        if self._state is _State.TEXT:
            at = buf.find(OPEN_TAG)
            if at >= 0:
                out_text.append(buf[:at])
                self._buf = buf[at + len(OPEN_TAG) :]
                return self._move(_State.TAG)
            keep = _partial_tag_len(buf, OPEN_TAG)
            out_text.append(buf[: len(buf) - keep])
            self._buf = buf[len(buf) - keep :]
            return False
        if self._state is _State.TAG:
            at = close_tag_at(buf)
            if at < 0:
                return False
            self._emit(self._calls_of(buf[:at].strip()), out_calls)
            self._buf = buf[at + len(CLOSE_TAG) :]
            return self._move(_State.START)
        # BARE
        begin = len(buf) - len(buf.lstrip())
        body = buf[begin:]
        if not may_be_call(body):
            return self._not_a_call()
        end = json_value_end(buf, begin)
        if end is None:
            return False
        calls = calls_in_json(buf[begin:end])
        if calls is None:  # JSON, but not calls: plain text
            return self._not_a_call()
        self._emit(calls, out_calls)
        self._buf = buf[end:]
        self._fence = ""  # a closing fence is dropped (self._in_fence)
        return self._move(_State.START)

    def _fence_step(self, buf: str, stripped: str) -> bool | None:
        """START on a backtick: a Markdown fence around bare JSON calls (```json ... ```).
        True/False as :meth:`_step`; None: not a fence of calls (go on as without one)."""
        if self._in_fence:  # the fence that closes calls just read: dropped
            if len(stripped) < len(FENCE) and FENCE.startswith(stripped):
                return False
            if stripped.startswith(FENCE):
                self._in_fence = False
                self._buf = stripped[len(FENCE) :]
                return True
            return None
        if len(stripped) < len(FENCE) and FENCE.startswith(stripped):
            return False
        if not stripped.startswith(FENCE):
            return None
        newline = stripped.find("\n")
        if newline < 0:
            return False if len(stripped) <= 16 else None  # the fence's language tag comes first
        body = stripped[newline + 1 :].lstrip()
        if stripped[len(FENCE) : newline].strip().lower() not in FENCE_LANGUAGES:
            return None
        if not body:
            return False
        if body[0] not in "{[":
            return None
        self._fence, self._buf, self._in_fence = buf[: len(buf) - len(body)], body, True
        return self._move(_State.BARE)

    def _not_a_call(self) -> bool:
        """BARE that is no call: the held text (and a fence before it) is plain text."""
        self._buf, self._fence, self._in_fence = self._fence + self._buf, "", False
        return self._move(_State.TEXT)

    def _move(self, state: _State) -> bool:
        self._state = state
        return True

    @staticmethod
    def _calls_of(body: str) -> list[tuple[str, str]]:
        calls = calls_in_json(body)
        return calls if calls is not None else salvage_calls(body)

    def _emit(self, calls: Iterable[tuple[str, str]], out: list[ToolCallDelta]) -> None:
        for name, arguments in calls:
            call = ToolCall(self._new_id(), name, arguments)
            self.calls.append(call)
            out.append(ToolCallDelta(self._index, call.call_id, name, arguments))
            self._index += 1


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper start of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def parse_tool_calls(text: str, new_id: Callable[[], str] = new_call_id) -> tuple[str, list[ToolCall]]:
    """A whole reply at once: (its text, its calls)."""
    parser = ToolCallParser(new_id)
    first, last = parser.feed(text), parser.finish()
    return first.text + last.text, parser.calls


class NamedCallStream:
    """The reply of a request forced to call ``name`` (structured outputs): all its text
    is that call's arguments, streamed as they come (same interface as the parser)."""

    def __init__(self, name: str, new_id: Callable[[], str] = new_call_id) -> None:
        self.name = name
        self.call_id = new_id()
        self._arguments: list[str] = []
        self._started = False

    def feed(self, text: str) -> Parsed:
        if not text:
            return Parsed()
        self._arguments.append(text)
        first, self._started = not self._started, True
        delta = ToolCallDelta(0, self.call_id if first else None, self.name if first else None, text)
        return Parsed("", (delta,))

    def finish(self) -> Parsed:
        if self._started:
            return Parsed()
        self._started = True  # an empty reply is still the one call, with no arguments
        return Parsed("", (ToolCallDelta(0, self.call_id, self.name, ""),))

    @property
    def calls(self) -> list[ToolCall]:
        return [ToolCall(self.call_id, self.name, "".join(self._arguments))] if self._started else []


class ToolCallCollector:
    """Joins the :class:`~llm.base.ToolCallDelta` of a reply into complete calls, by index."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._args: dict[int, list[str]] = {}

    def add(self, delta: ToolCallDelta) -> None:
        if delta.call_id is not None:
            self._ids[delta.index] = delta.call_id
        if delta.name is not None:
            self._names[delta.index] = delta.name
        self._args.setdefault(delta.index, []).append(delta.arguments)

    def add_all(self, deltas: Iterable[ToolCallDelta]) -> None:
        for delta in deltas:
            self.add(delta)

    def calls(self) -> list[ToolCall]:
        """The calls so far, by index (a call whose id never came gets a new one)."""
        for index in self._args:
            self._ids.setdefault(index, new_call_id())
        return [
            ToolCall(self._ids[i], self._names.get(i, ""), "".join(self._args[i])) for i in sorted(self._args)
        ]


def arguments_object(arguments: str) -> dict[str, Any] | None:
    """A call's arguments as a JSON object, None if they are not one (malformed)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
