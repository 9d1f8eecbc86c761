"""Function tools of the Realtime protocol: parsed, checked against the model, serialized.

A model chooses by itself whether to call a tool (``tool_choice: "auto"``) only
if its chat template renders the tools: vLLM passes the request's ``tools`` to the
template, and a template that never mentions ``tools`` drops them silently
(SmolLM2-135M-Instruct's is such a template). :func:`chat_template_supports_tools`
tells from the template. A forced call (``"required"`` or a named function) works
with any model: the engine constrains the reply to the arguments' JSON schema
(vLLM's structured outputs). So with a model that cannot call tools, tools with
``tool_choice: "auto"`` are refused with ``tools_unsupported`` and a message naming
the model and the fix (:func:`check_tools`); ``"none"`` never offers them.

:func:`tool_offer` is what the LLM is given for a response (:class:`llm.base.ToolOffer`).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from llm.base import ToolMode, ToolOffer, ToolSpec
from voice_pipeline.realtime.errors import ErrorCode, quote, refuse
from voice_pipeline.realtime.wire import Fields, Json, element

MAX_TOOLS: Final = 64
_TOOL_KEYS = frozenset({"type", "name", "description", "parameters"})
_MCP_TOOL_KEYS = frozenset(
    {
        "type",
        "server_label",
        "server_url",
        "server_description",
        "connector_id",
        "authorization",
        "headers",
        "allowed_tools",
        "allowed_callers",
        "require_approval",
        "defer_loading",
        "tunnel_id",
    }
)
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolChoiceMode(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True)
class ToolChoiceFunction:
    name: str


ToolChoice = ToolChoiceMode | ToolChoiceFunction


@dataclass(frozen=True, slots=True)
class FunctionTool:
    name: str
    description: str
    #: the JSON schema of the arguments, as compact JSON text (kept immutable)
    parameters_json: str

    @property
    def parameters(self) -> Json:
        value = json.loads(self.parameters_json)
        return value if isinstance(value, dict) else {}


def chat_template_supports_tools(template: str) -> bool:
    """Does this Jinja chat template render the request's tools (``{% if tools %}`` etc.)?"""
    return re.search(r"\btools\b", template) is not None


def _tool(value: Any, path: str) -> FunctionTool:
    if isinstance(value, dict) and value.get("type") == "mcp":
        element(value, path, _MCP_TOOL_KEYS)
        raise refuse(ErrorCode.UNSUPPORTED, "MCP tools are not supported by this server", f"{path}.type")
    f = element(value, path, _TOOL_KEYS)
    if f.get("type") not in (None, "function"):
        raise refuse(
            ErrorCode.INVALID_VALUE, f'\'{f.param("type")}\' must be "function" or "mcp"', f.param("type")
        )
    name = f.text("name", max_chars=64)
    if name is None or not _NAME.match(name):
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f"'{f.param('name')}' must be 1-64 letters, digits, '_' or '-', got {quote(name)}",
            f.param("name"),
        )
    params = f.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise refuse(
            ErrorCode.INVALID_VALUE, "'parameters' must be a JSON schema (an object)", f.param("parameters")
        )
    return FunctionTool(
        name, f.text("description") or "", json.dumps(params or {}, separators=(",", ":"), ensure_ascii=False)
    )


def parse_tools(f: Fields) -> tuple[FunctionTool, ...] | None:
    """``tools`` of a session or a response (None: absent)."""
    values = f.array("tools", max_items=MAX_TOOLS)
    if values is None:
        return None
    tools = tuple(_tool(v, f"{f.param('tools')}[{i}]") for i, v in enumerate(values))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise refuse(ErrorCode.INVALID_VALUE, "tool names must be unique", f.param("tools"))
    return tools


def parse_tool_choice(f: Fields) -> ToolChoice | None:
    value = f.get("tool_choice")
    if value is None:
        return None
    if isinstance(value, str):
        return ToolChoiceMode(f.required_choice("tool_choice", tuple(ToolChoiceMode)))
    choice = f.obj("tool_choice", frozenset({"type", "name", "server_label"}))
    assert choice is not None
    kind = choice.required_choice("type", ("function", "mcp"))
    if kind == "mcp":
        choice.required_text("server_label", max_chars=256)
        raise refuse(
            ErrorCode.UNSUPPORTED, "MCP tools are not supported by this server", choice.param("type")
        )
    if choice.has("server_label"):
        raise refuse(
            ErrorCode.UNKNOWN_PARAMETER, "'server_label' is for MCP tools", choice.param("server_label")
        )
    return ToolChoiceFunction(choice.required_text("name", max_chars=64))


def check_tools(
    tools: Sequence[FunctionTool], choice: ToolChoice, supported: bool, model: str, path: str
) -> None:
    """Raise unless ``tools`` and ``choice`` can be used with this model (``supported``: its
    chat template renders tools, so it can choose a call by itself)."""
    if not supported and tools and choice is ToolChoiceMode.AUTO:
        raise refuse(
            ErrorCode.TOOLS_UNSUPPORTED,
            f"the model served here ({model}) cannot call tools by itself: its chat template has "
            'no tool support, so tool_choice "auto" cannot be honoured; force a call with '
            'tool_choice "required" or {"type": "function", "name": ...} (the reply is then '
            'constrained to the arguments\' schema), use "none", or send "tools": []',
            f"{path}.tools",
        )
    if isinstance(choice, ToolChoiceFunction) and choice.name not in {t.name for t in tools}:
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f"tool_choice names an unknown tool {quote(choice.name)}",
            f"{path}.tool_choice",
        )
    if choice is ToolChoiceMode.REQUIRED and not tools:
        raise refuse(ErrorCode.INVALID_VALUE, 'tool_choice "required" needs tools', f"{path}.tool_choice")


def tool_json(tool: FunctionTool) -> Json:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }


def tool_choice_json(choice: ToolChoice) -> str | Json:
    if isinstance(choice, ToolChoiceFunction):
        return {"type": "function", "name": choice.name}
    return str(choice)


def tool_offer(tools: Sequence[FunctionTool], choice: ToolChoice) -> ToolOffer | None:
    """What the LLM is offered for a response (None: no tools, or ``tool_choice: "none"``)."""
    if not tools or choice is ToolChoiceMode.NONE:
        return None
    specs = tuple(ToolSpec(t.name, t.description, t.parameters_json) for t in tools)
    if isinstance(choice, ToolChoiceFunction):
        return ToolOffer(specs, ToolMode.REQUIRED, choice.name)
    return ToolOffer(specs, ToolMode.REQUIRED if choice is ToolChoiceMode.REQUIRED else ToolMode.AUTO)
