"""A request's tools as the model and the server see them (pure: no engine, no I/O).

* :func:`effective_offer` checks a :class:`~llm.base.ToolOffer` (a named function must
  be one of the tools) and drops one that offers nothing (mode ``none``, no tools).
* :func:`openai_tools`, :func:`openai_tool_choice`, :func:`openai_messages`: the
  OpenAI chat-completions form (the remote engine's request body).
* :func:`template_messages`: the conversation for a Hugging Face chat template. A
  template that renders tools (:func:`chat_template_supports_tools`) gets the
  assistant's calls and the tool results in the HF/OpenAI form (``tool_calls`` with
  ``function: {name, arguments: <dict>}``, role ``tool`` with ``tool_call_id``); any
  other template (SmolLM2's) gets them as plain text, so the model can still use a
  result: the assistant's "I called get_weather with {...}." and a system message
  "get_weather returned: ...".
* :func:`constrained_schema`: the JSON schema that structured outputs holds a forced
  request to -- a named function: its arguments; ``required``: a list of one or more
  ``{"name", "arguments"}`` objects, each tool's arguments per its own schema (a tool
  that takes no arguments is called alone). :func:`known_reply`: a forced reply that
  has only one possible value (a named tool with no arguments), given without generating.
* :func:`tool_instruction`: what to tell a model whose template cannot render tools
  about the tool it is made to call (a system message after the conversation).
* :func:`plan_request` puts these together for an in-process engine: what to render,
  the schema to hold the reply to, and how to read the reply (:mod:`llm.toolcalls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from llm.base import ChatMessage, ToolCall, ToolMode, ToolOffer, ToolSpec
from llm.toolcalls import CallStream, NamedCallStream, ToolCallParser
from voice_pipeline.errors import EngineError

#: at most this many calls in one reply with ``tool_choice: required`` (structured outputs)
MAX_REQUIRED_CALLS: Final = 8


def chat_template_supports_tools(template: str | None) -> bool:
    """Does this Jinja chat template render the request's tools (``{% if tools %}`` etc.)?
    A template that never mentions ``tools`` drops them silently (SmolLM2-135M's)."""
    return template is not None and re.search(r"\btools\b", template) is not None


def effective_offer(offer: ToolOffer | None) -> ToolOffer | None:
    """The offer to act on: None when nothing is offered (no offer, mode ``none``, no tools).
    A named function that is not one of the tools, or two tools of one name, is a
    non-retryable :class:`EngineError` (a bad request)."""
    if offer is None:
        return None
    names = [t.name for t in offer.tools]
    if len(set(names)) != len(names):
        raise EngineError(f"two tools share a name: {names}", retryable=False)
    for tool in offer.tools:
        try:
            schema = json.loads(tool.parameters_json)
        except ValueError:
            schema = None
        if not isinstance(schema, dict):
            bad = tool.parameters_json[:100]
            raise EngineError(
                f"tool {tool.name}: parameters must be a JSON schema object, got {bad!r}", retryable=False
            )
    if offer.function is not None:
        if offer.function not in names:
            known = ", ".join(names) or "none"
            raise EngineError(
                f"tool_choice names the function {offer.function!r}, which is not one of the tools "
                f"offered ({known})",
                retryable=False,
            )
        return offer
    if offer.mode is ToolMode.NONE or not offer.tools:
        if offer.mode is ToolMode.REQUIRED:
            raise EngineError("tool_choice 'required' with no tools offered", retryable=False)
        return None
    return offer


def forced(offer: ToolOffer) -> bool:
    """Must the model call (a named function or ``required``)? Then structured outputs holds it."""
    return offer.function is not None or offer.mode is ToolMode.REQUIRED


def parameters(tool: ToolSpec) -> dict[str, Any]:
    """A tool's arguments schema as an object (a broken one, which :func:`effective_offer`
    refuses, counts as "any object")."""
    try:
        value = json.loads(tool.parameters_json)
    except ValueError:
        return {"type": "object"}
    return value if isinstance(value, dict) else {"type": "object"}


def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """``tools`` of an OpenAI chat request (and of ``apply_chat_template(tools=...)``)."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": parameters(t)},
        }
        for t in tools
    ]


def openai_tool_choice(offer: ToolOffer) -> str | dict[str, Any]:
    if offer.function is not None:
        return {"type": "function", "function": {"name": offer.function}}
    return str(offer.mode)


def takes_no_arguments(tool: ToolSpec) -> bool:
    """Do the tool's parameters admit only ``{}`` (an object schema with no properties and
    no other keys allowed -- unset ``additionalProperties`` counts as false, as in
    xgrammar's strict mode)? ``{"type": "object"}`` alone is "any object", not this."""
    schema = parameters(tool)
    return (
        schema.get("type") == "object"
        and "properties" in schema
        and not schema["properties"]
        and not schema.get("patternProperties")
        and not schema.get("required")
        and schema.get("additionalProperties", False) is False
    )


def _call_schema(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": parameters(tool)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _calls_schema(tools: Sequence[ToolSpec], most: int) -> dict[str, Any]:
    calls = [_call_schema(t) for t in tools]
    item = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "array", "items": item, "minItems": 1, "maxItems": most}


def constrained_schema(offer: ToolOffer) -> dict[str, Any]:
    """The JSON schema of a forced reply (see the module docstring). A call of a tool that
    takes no arguments (:func:`takes_no_arguments`) is alone in its reply: SmolLM2-135M,
    allowed a list of them, wrote ``{"name": "get_time", "arguments": {}}`` again and again
    until max_tokens (measured 2026-12-02: 7 copies in 96 tokens, the list never closed)."""
    if offer.function is not None:
        tool = next(t for t in offer.tools if t.name == offer.function)
        return parameters(tool)
    some = [t for t in offer.tools if not takes_no_arguments(t)]
    none = [t for t in offer.tools if takes_no_arguments(t)]
    if not none:
        return _calls_schema(some, MAX_REQUIRED_CALLS)
    if not some:
        return _calls_schema(none, 1)
    return {"anyOf": [_calls_schema(some, MAX_REQUIRED_CALLS), _calls_schema(none, 1)]}


def known_reply(offer: ToolOffer) -> str | None:
    """The whole reply of a forced request when it has only one possible value -- a named
    function, or ``required`` with one tool, that takes no arguments -- else None. The
    engine gives it without generating (nothing for the model to choose)."""
    if offer.function is not None:
        tool = next(t for t in offer.tools if t.name == offer.function)
        return "{}" if takes_no_arguments(tool) else None
    if offer.mode is ToolMode.REQUIRED and len(offer.tools) == 1 and takes_no_arguments(offer.tools[0]):
        return json.dumps([{"name": offer.tools[0].name, "arguments": {}}])
    return None


def tool_instruction(offer: ToolOffer) -> str:
    """Tells a model whose template cannot render tools what it is writing (forced calls)."""
    if offer.function is not None:
        tool = next(t for t in offer.tools if t.name == offer.function)
        return (
            f"You are calling the function {tool.name}: {tool.description.strip() or 'no description'}. "
            "Reply with only its arguments, a JSON object following this schema: "
            f"{json.dumps(parameters(tool))}"
        )
    lines = [
        f"- {t.name}: {t.description.strip() or 'no description'}; arguments: {json.dumps(parameters(t))}"
        for t in offer.tools
    ]
    return (
        "You must call one or more of these functions:\n"
        + "\n".join(lines)
        + '\nReply with only a JSON list of calls, like [{"name": "<function>", "arguments": {...}}].'
    )


def with_instruction(messages: Sequence[ChatMessage], instruction: str) -> list[ChatMessage]:
    """``messages`` and then ``instruction`` as a last system message: after the conversation,
    so the prompt still starts with the tokens a prefill put in the prefix cache."""
    return [*messages, ChatMessage("system", instruction)]


def _arguments_value(call: ToolCall) -> Any:
    """A call's arguments for a chat template: the parsed object, else the text as written."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def _call_names(messages: Sequence[ChatMessage]) -> dict[str, str]:
    return {c.call_id: c.name for m in messages for c in m.tool_calls}


def template_messages(messages: Sequence[ChatMessage], supports_tools: bool) -> list[dict[str, Any]]:
    """The conversation for ``tokenizer.apply_chat_template`` (see the module docstring)."""
    if supports_tools:
        out: list[dict[str, Any]] = []
        for m in messages:
            entry: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.call_id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments_value(c)},
                    }
                    for c in m.tool_calls
                ]
            if m.role == "tool":
                entry["tool_call_id"] = m.tool_call_id or ""
            out.append(entry)
        return out
    return [{"role": m.role, "content": m.content} for m in as_plain_text(messages)]


def as_plain_text(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Tool calls and results as plain messages, for a template that cannot render them."""
    names = _call_names(messages)
    out: list[ChatMessage] = []
    for m in messages:
        if m.tool_calls:
            said = " ".join(f"I called {c.name} with {c.arguments}." for c in m.tool_calls)
            out.append(ChatMessage("assistant", f"{m.content.strip()} {said}".strip()))
        elif m.role == "tool":
            name = names.get(m.tool_call_id or "", "the function")
            out.append(ChatMessage("system", f"{name} returned: {m.content}"))
        else:
            out.append(ChatMessage(m.role, m.content))
    return out


def openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation of an OpenAI chat request (arguments as JSON text)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            entry["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.role == "tool":
            entry["tool_call_id"] = m.tool_call_id or ""
        out.append(entry)
    return out


@dataclass(slots=True)
class ToolPlan:
    """How an in-process engine serves one request's tools (:func:`plan_request`)."""

    #: the conversation for ``apply_chat_template``
    conversation: list[dict[str, Any]]
    #: ``tools=`` for ``apply_chat_template`` (None: render none)
    tools: list[dict[str, Any]] | None = None
    #: the JSON schema structured outputs holds the reply to (a forced call)
    schema: dict[str, Any] | None = None
    #: reads the reply's text: text and calls (None: all text)
    calls: CallStream | None = None
    #: the reply's whole text when it is known without generating (:func:`known_reply`)
    reply: str | None = None


def plan_request(
    messages: Sequence[ChatMessage], offer: ToolOffer | None, supports_tools: bool, model: str = "the model"
) -> ToolPlan:
    """The plan of a request (see :class:`ToolPlan`). ``auto`` with a template that cannot
    render tools, and a bad offer (:func:`effective_offer`), are non-retryable
    :class:`EngineError`: the model could not choose to call a tool it was never shown."""
    offer = effective_offer(offer)
    if offer is None:
        # An answer with no tools offered (the round after a call): the calls and results as
        # plain text, even for a template that renders them. Qwen2.5-Coder-0.5B, given its
        # own tool rendering, echoed the call's JSON instead of answering; given plain text,
        # it answered in a sentence with the result's value (measured 2026-12-02, 2 of 2).
        return ToolPlan(template_messages(messages, False))
    if not forced(offer):
        if not supports_tools:
            raise EngineError(
                f"{model} cannot call tools by itself (tool_choice 'auto'): its chat template does not "
                "render tools. Use tool_choice 'required' or a named function (structured outputs, any "
                "model), or a model whose template renders tools (llm.model_path, e.g. Qwen2.5-Instruct)",
                retryable=False,
            )
        return ToolPlan(template_messages(messages, True), openai_tools(offer.tools), None, ToolCallParser())
    if not supports_tools:
        messages = with_instruction(messages, tool_instruction(offer))
    calls: CallStream = NamedCallStream(offer.function) if offer.function else ToolCallParser()
    tools = openai_tools(offer.tools) if supports_tools else None
    conversation = template_messages(messages, supports_tools)
    return ToolPlan(conversation, tools, constrained_schema(offer), calls, known_reply(offer))
