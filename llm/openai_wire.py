"""The OpenAI-compatible chat completions wire format, as pure functions (no I/O).

What :class:`llm.remote.RemoteVLLM` sends and reads: the JSON bodies of a streamed
reply (:func:`stream_body`) and of a one-token prefill (:func:`prefill_body`), and the
server-sent events of a reply, parsed line by line by :func:`parse_sse_line` into an
:class:`SSEChunk` (text, tool-call deltas, finish reason, usage) or the :data:`DONE`
sentinel. Malformed events and ``error`` events raise :class:`EngineError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from llm.base import ChatMessage, ToolCallDelta, ToolOffer
from llm.toolprompt import as_plain_text, openai_messages, openai_tool_choice, openai_tools
from voice_pipeline.errors import EngineError

# ---------------------------------------------------------------- requests


def stream_body(
    model: str,
    messages: Sequence[ChatMessage],
    offer: ToolOffer | None,
    *,
    max_tokens: int,
    temperature: float,
    top_p: float,
    repetition_penalty: float = 1.0,
) -> dict[str, Any]:
    """The body of a streamed chat completion, with vLLM's cumulative usage on every chunk;
    ``offer`` (already :func:`llm.toolprompt.effective_offer`) goes as ``tools`` and
    ``tool_choice``; a ``repetition_penalty`` other than 1.0 as vLLM's extra parameter."""
    body: dict[str, Any] = {
        "model": model,
        # an answer with no tools offered: earlier calls and results as plain text, as
        # in process (llm.toolprompt.plan_request), which any chat template renders
        "messages": openai_messages(messages if offer is not None else as_plain_text(messages)),
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
    }
    if repetition_penalty != 1.0:
        body["repetition_penalty"] = repetition_penalty
    if offer is not None:
        body.update(tools=openai_tools(offer.tools), tool_choice=openai_tool_choice(offer))
    return body


def prefill_body(model: str, messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """The body of a non-streamed one-token completion on a prompt prefix: vLLM's
    ``add_generation_prompt: false`` and, for a final user message (not empty),
    ``continue_final_message: true``."""
    return {
        "model": model,
        "messages": openai_messages(as_plain_text(messages)),
        "max_tokens": 1,
        "temperature": 0.0,
        "add_generation_prompt": False,
        "continue_final_message": messages[-1].role == "user",
    }


# ---------------------------------------------------------------- server-sent events


@dataclass(frozen=True, slots=True)
class SSEChunk:
    """One parsed ``data:`` event of a chat completion stream."""

    text: str
    #: cumulative completion tokens reported by the server, if it sent usage
    completion_tokens: int | None
    finish_reason: str | None
    #: the prompt's tokens, and those of them from the server's prefix cache
    #: (``usage.prompt_tokens_details.cached_tokens``: vLLM sends it when started with
    #: ``--enable-prompt-tokens-details``), if the server said
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    #: ``choices[0].delta.tool_calls``: function calls being streamed
    tool_calls: tuple[ToolCallDelta, ...] = ()


class SSEDone:
    """The ``data: [DONE]`` sentinel."""


DONE: Final = SSEDone()


def parse_sse_line(line: str) -> SSEChunk | SSEDone | None:
    """Parse one line of an SSE stream; ``None`` for lines that carry no event.

    Raises :class:`EngineError` for malformed JSON or an ``error`` event.
    """
    if not line.startswith("data:"):
        return None  # blank separators, ":" comments, event:/id: fields
    payload = line[5:].strip()
    if not payload:
        return None
    if payload == "[DONE]":
        return DONE
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise EngineError(f"malformed event from the LLM server: {payload[:200]!r}", retryable=True) from exc
    if not isinstance(data, dict):
        raise EngineError(f"unexpected event from the LLM server: {payload[:200]!r}", retryable=True)
    if "error" in data:
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        retryable = not (isinstance(code, int) and 400 <= code < 500)
        raise EngineError(f"the LLM server failed the request: {message}", retryable=retryable)
    text = ""
    finish_reason = None
    calls: tuple[ToolCallDelta, ...] = ()
    choices = data.get("choices") or []
    if choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta") or {}
        text = delta.get("content") or ""
        finish_reason = choices[0].get("finish_reason")
        calls = _tool_call_deltas(delta.get("tool_calls"))
    usage = data.get("usage")
    tokens, prompt, cached = usage_counts(usage)
    return SSEChunk(text, tokens, finish_reason, prompt, cached, calls)


def _tool_call_deltas(value: object) -> tuple[ToolCallDelta, ...]:
    """``delta.tool_calls`` of a chunk (entries that are not objects are skipped)."""
    if not isinstance(value, list):
        return ()
    out = []
    for position, entry in enumerate(value):
        if not isinstance(entry, dict):
            continue
        index = entry.get("index")
        function = entry.get("function")
        function = function if isinstance(function, dict) else {}
        call_id, name, arguments = entry.get("id"), function.get("name"), function.get("arguments")
        out.append(
            ToolCallDelta(
                index if isinstance(index, int) and not isinstance(index, bool) else position,
                call_id if isinstance(call_id, str) else None,
                name if isinstance(name, str) else None,
                arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(out)


def usage_counts(usage: object) -> tuple[int | None, int | None, int | None]:
    """(completion_tokens, prompt_tokens, cached prompt tokens) of a ``usage`` object."""
    if not isinstance(usage, dict):
        return None, None, None

    def number(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    details = usage.get("prompt_tokens_details")
    cached = number(details.get("cached_tokens")) if isinstance(details, dict) else None
    return number(usage.get("completion_tokens")), number(usage.get("prompt_tokens")), cached
