"""A Python function's JSON schema, from its type hints and docstring (pure).

The first paragraph of the docstring describes the tool; ``name: text`` lines under an
``Args:`` (or ``Arguments:`` / ``Parameters:``) heading describe its parameters. Hints
understood: ``str``, ``int``, ``float``, ``bool``, ``Literal[...]`` (an ``enum``),
``list[...]`` / ``tuple[X, ...]`` (an ``array``), ``X | None`` / ``Optional[X]`` (may be
null), and ``dict`` (an ``object``). A parameter without a default is ``required``.
Anything else is a :class:`SchemaError` naming the parameter: give the schema
explicitly then (``@tool(schema=...)``, :mod:`voice_pipeline.tools.registry`).

:func:`check_arguments` is the other direction: the model's JSON arguments checked
against such a schema (the subset written here), so a malformed call becomes an
error the LLM is told about, never a crash.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARGS_HEADINGS = ("args:", "arguments:", "parameters:", "params:")
_PARAM_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class SchemaError(ValueError):
    """The function's signature cannot be described as a JSON schema."""


def describe(doc: str | None) -> tuple[str, dict[str, str]]:
    """The docstring's first paragraph, and its ``Args:`` lines (name -> text)."""
    text = inspect.cleandoc(doc or "")
    paragraphs = re.split(r"\n\s*\n", text, maxsplit=1)
    first = paragraphs[0]
    if first.strip().lower() in _ARGS_HEADINGS:
        first = ""
    summary = " ".join(first.split())
    params: dict[str, str] = {}
    in_args, current = False, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower() in _ARGS_HEADINGS:
            in_args, current = True, ""
            continue
        if not in_args:
            continue
        if not stripped:
            current = ""
            continue
        if stripped.endswith(":") and not line.startswith((" ", "\t")):
            in_args = False  # the next section (Returns:, Raises:)
            continue
        match = _PARAM_LINE.match(line)
        if match and (line.startswith((" ", "\t")) or not current):
            current = match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current:  # a continuation line
            params[current] = f"{params[current]} {stripped}".strip()
    return summary, params


def type_schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one type hint (``where`` names it in a :class:`SchemaError`)."""
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        if None in kinds or len(kinds) != 1:
            raise SchemaError(f"{where}: Literal values must all be str, int, float or bool")
        return {"type": kinds.pop(), "enum": list(args)}
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise SchemaError(f"{where}: only X | None unions are supported; give a schema")
        inner = type_schema(rest[0], where)
        kind = inner.get("type")
        return {**inner, "type": [kind, "null"]} if isinstance(kind, str) else inner
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise SchemaError(f"{where}: a tuple must be tuple[X, ...]")
        return {"type": "array", "items": type_schema(args[0], where)} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    raise SchemaError(f"{where}: cannot describe the type {hint!r} in JSON; give a schema")


def function_schema(fn: Callable[..., Any], name: str) -> tuple[str, dict[str, Any]]:
    """``fn``'s description and the JSON schema of its parameters."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise SchemaError(f"{name}: cannot read its type hints: {exc}") from exc
    summary, docs = describe(fn.__doc__)
    props: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise SchemaError(f"{name}: parameter {param.name!r} is positional-only (calls pass names)")
        if param.name not in hints:
            raise SchemaError(f"{name}: parameter {param.name!r} has no type hint")
        prop = type_schema(hints[param.name], f"{name}: parameter {param.name!r}")
        if param.name in docs:
            prop["description"] = docs[param.name]
        props[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    schema["additionalProperties"] = False
    return summary, schema


def check_arguments(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments (JSON text) as keyword arguments; ValueError says what is wrong."""
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    _check(value, schema, "arguments")
    return value


def _check(value: Any, schema: dict[str, Any], where: str) -> None:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_is(value, k) for k in kinds):
        raise ValueError(f"{where}: expected {' or '.join(map(str, kinds))}, got {json.dumps(value)[:60]}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{where}: must be one of {json.dumps(schema['enum'])}")
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        props: dict[str, Any] = schema["properties"]
        for key in schema.get("required", ()):
            if key not in value:
                raise ValueError(f"{where}: {key!r} is missing")
        for key, item in value.items():
            if key in props:
                _check(item, props[key], f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                raise ValueError(f"{where}: unknown argument {key!r}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{where}[{i}]")


def _is(value: Any, kind: str) -> bool:
    match kind:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "array":
            return isinstance(value, list)
        case "object":
            return isinstance(value, dict)
    return True  # a type this checker does not know: accepted
