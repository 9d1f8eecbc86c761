"""The JSON of function calls a model writes (pure): where a value ends, whether text
may still become a call, which calls a complete value holds, and what a broken one
meant (:func:`salvage_calls`). Used by :class:`llm.toolcalls.ToolCallParser`."""

from __future__ import annotations

import json
import re
from typing import Final

#: closes a Hermes call: ``<tool_call>{...}</tool_call>``
CLOSE_TAG: Final = "</tool_call>"

NAME_KEY = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
ARGS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def json_value_end(text: str, start: int) -> int | None:
    """End (exclusive) of the JSON object/array/string beginning at ``text[start]``, or None
    if it has not closed yet. Brackets inside strings are skipped; the value is not checked."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth <= 0:
                return i + 1
    return None


def may_be_call(text: str) -> bool:
    """Could ``text`` (starting with ``{`` or ``[``) still become a call or a list of calls?"""
    rest = text[1:].lstrip()
    if not rest:
        return True
    if text[0] == "[":
        return rest[0] == "{" and may_be_call(rest)
    return rest[0] == '"'


def _arguments_text(value: object) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value  # the OpenAI form: the arguments' JSON as a string
    return json.dumps(value, ensure_ascii=False)


def _call_parts(value: object) -> tuple[str, str] | None:
    """(name, arguments JSON) of a parsed call object, None if it is not one."""
    if not isinstance(value, dict):
        return None
    inner = value.get("function")
    if isinstance(inner, dict) and "name" in inner:
        value = inner
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None
    if not set(value) <= {"name", "arguments", "parameters", "id", "type"}:
        return None
    args = value.get("arguments", value.get("parameters"))
    return name, _arguments_text(args)


def calls_in_json(text: str) -> list[tuple[str, str]] | None:
    """The calls of a complete JSON text (one call object or a list of them), None if it
    is not valid JSON or not calls."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    parts = [_call_parts(item) for item in items]
    if not items or any(p is None for p in parts):
        return None
    return [p for p in parts if p is not None]


def salvage_calls(text: str) -> list[tuple[str, str]]:
    """The calls of text that is not valid JSON: each ``"name": "..."`` with the
    ``"arguments"`` value after it as written (a truncated value as far as it goes).
    Text with no name at all is one call named ``""`` whose arguments are the text."""
    found: list[tuple[str, str]] = []
    pos = 0
    while (name_match := NAME_KEY.search(text, pos)) is not None:
        try:
            name = json.loads(f'"{name_match.group(1)}"')
        except ValueError:
            name = name_match.group(1)
        pos = name_match.end()
        args_match = ARGS_KEY.search(text, pos)
        following = NAME_KEY.search(text, pos)
        if args_match is None or (following is not None and following.start() < args_match.start()):
            found.append((name, "{}"))
            continue
        start = args_match.end()
        opened = text[start : start + 1] in ("{", "[", '"')
        end = json_value_end(text, start) if opened else None
        if end is None and opened:
            raw = text[start:].rstrip()  # cut short: as far as it was written
            pos = len(text)
        elif end is None:  # a bare scalar or junk: up to the next , } or ]
            stop = re.search(r"[,}\]]", text[start:])
            raw = text[start : start + stop.start() if stop else len(text)].strip()
            pos = start + max(len(raw), 1)
        else:
            raw = text[start:end]
            pos = end
            if raw.startswith('"'):
                try:
                    decoded = json.loads(raw)
                    raw = decoded if isinstance(decoded, str) else raw
                except ValueError:
                    pass
        found.append((name, raw))
    if not found:
        found.append(("", text.strip()))
    return found


def close_tag_at(text: str) -> int:
    """Where ``</tool_call>`` is in ``text``, outside JSON strings (-1: not there)."""
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "<" and text.startswith(CLOSE_TAG, i):
            return i
    return -1
