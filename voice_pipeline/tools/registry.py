"""The server-side tools of a config (``dialogue.tools``): imported, described, ready to call.

Each entry is ``package.module:function``. :func:`load_tools` imports it and builds its
:class:`llm.base.ToolSpec`: the JSON schema from the function's type hints and docstring
(:mod:`voice_pipeline.tools.schema`), or the one given with the :func:`tool` decorator
(or a ``__tool_schema__`` attribute: the parameters' schema as a dict)::

    from voice_pipeline.tools import tool

    @tool(cancel_on_interruption=False, timeout_s=30)
    async def book_table(restaurant: str, people: int) -> str:
        \"\"\"Book a table.

        Args:
            restaurant: the restaurant's name
            people: how many people
        \"\"\"

A plain function runs in a worker thread, an ``async def`` as a coroutine on the loop.
Whatever it returns is given to the LLM as text (a ``str`` as it is, anything else as
JSON). Anything wrong with an entry is a :class:`~voice_pipeline.errors.ConfigError`
naming it, raised at start (``voice-pipeline serve`` / ``run`` preflight).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from llm.base import ToolMode, ToolOffer, ToolSpec
from voice_pipeline.errors import ConfigError
from voice_pipeline.tools.schema import SchemaError, describe, function_schema

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ToolOptions:
    """What :func:`tool` attached to a function (``__voice_tool__``)."""

    schema: dict[str, Any] | None = None
    description: str | None = None
    name: str | None = None
    cancel_on_interruption: bool = True
    timeout_s: float | None = None


def tool(
    *,
    schema: dict[str, Any] | None = None,
    description: str | None = None,
    name: str | None = None,
    cancel_on_interruption: bool = True,
    timeout_s: float | None = None,
) -> Callable[[F], F]:
    """Mark a function as a tool and say how it runs.

    ``schema``: its parameters' JSON schema (else built from the type hints);
    ``cancel_on_interruption``: a barge-in cancels the call (True) or lets it finish, its
    result still entering the history (False); ``timeout_s``: overrides
    ``dialogue.tool_timeout_s``."""
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")
    options = ToolOptions(schema, description, name, cancel_on_interruption, timeout_s)

    def mark(fn: F) -> F:
        fn.__voice_tool__ = options  # type: ignore[attr-defined]
        return fn

    return mark


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool: how the model sees it and how it runs."""

    spec: ToolSpec
    fn: Callable[..., Any]
    parameters: dict[str, Any]
    is_async: bool
    cancel_on_interruption: bool = True
    timeout_s: float | None = None
    entry: str = ""


class ToolRegistry:
    """A config's tools by name (the names are what the model calls)."""

    def __init__(self, tools: tuple[Tool, ...]) -> None:
        self.tools = tools
        self._by_name = {t.spec.name: t for t in tools}

    def __bool__(self) -> bool:
        return bool(self.tools)

    def get(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    def offer(self, choice: str) -> ToolOffer:
        """The offer of a reply's first round (``dialogue.tool_choice``)."""
        return ToolOffer(tuple(t.spec for t in self.tools), ToolMode(choice))


def load_tool(entry: str) -> Tool:
    """Import and describe one ``package.module:function`` entry (ConfigError if it cannot)."""
    where = f"dialogue.tools: {entry!r}"
    module_name, sep, attr = entry.partition(":")
    if not (sep and module_name and attr):
        raise ConfigError(f"{where} is not 'package.module:function'")
    try:
        module = importlib.import_module(module_name.strip())
    except Exception as exc:  # ImportError, or the module raised on import
        raise ConfigError(f"{where}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    fn: Any = module
    for part in attr.strip().split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ConfigError(f"{where}: {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise ConfigError(f"{where}: {attr!r} is a {type(fn).__name__}, not a function")
    options: ToolOptions = getattr(fn, "__voice_tool__", None) or ToolOptions()
    name = str(options.name or getattr(fn, "__name__", attr.split(".")[-1]))
    explicit = options.schema if options.schema is not None else getattr(fn, "__tool_schema__", None)
    if explicit is None:
        try:
            description, schema = function_schema(fn, name)
        except SchemaError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    elif not isinstance(explicit, dict) or explicit.get("type", "object") != "object":
        raise ConfigError(f"{where}: its schema must be a JSON object schema (a dict)")
    else:
        description, schema = describe(fn.__doc__)[0], explicit
    try:
        parameters_json = json.dumps(schema, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: its schema is not JSON: {exc}") from exc
    spec = ToolSpec(name, options.description or description or name, parameters_json)
    target = fn.func if isinstance(fn, functools.partial) else fn
    is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an object with an async __call__
    )
    return Tool(spec, fn, schema, is_async, options.cancel_on_interruption, options.timeout_s, entry)


@functools.lru_cache(maxsize=16)
def load_tools(entries: tuple[str, ...]) -> ToolRegistry:
    """The tools of ``dialogue.tools`` (imported once per distinct list)."""
    tools = tuple(load_tool(e) for e in entries)
    seen: dict[str, str] = {}
    for t in tools:
        if t.spec.name in seen:
            raise ConfigError(
                f"dialogue.tools: {seen[t.spec.name]!r} and {t.entry!r} are both named {t.spec.name!r}"
            )
        seen[t.spec.name] = t.entry
    return ToolRegistry(tools)
