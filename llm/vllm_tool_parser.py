"""A vLLM tool-call parser plugin that reads both forms of :mod:`llm.toolcalls`.

vLLM's own ``hermes`` parser sees only calls inside ``<tool_call>`` tags;
Qwen2.5-Coder-0.5B-Instruct often writes the bare JSON object instead. This parser
accepts both (and parallel calls, and malformed ones passed through as written) by
running :class:`llm.toolcalls.ToolCallParser`. Start a server with::

    python -m vllm.entrypoints.openai.api_server --model <folder> \\
        --enable-auto-tool-choice \\
        --tool-parser-plugin llm.vllm_tool_parser --tool-call-parser voice_pipeline

(``--tool-parser-plugin`` takes this module's name when the project is installed in the
server's environment, else the path of this file.) Importing this module registers the
parser (that is what a plugin is for); it is imported only by vLLM's server, never by
the project itself. Streaming: each call is sent whole in one delta when the model has
closed it; text that may be a call is held until that is decided. What is still held
when the stream ends (a call cut short by ``max_tokens``) is not sent by a streamed
reply -- vLLM gives a classic parser no end-of-stream call -- but a non-streamed reply
(:meth:`VoicePipelineToolParser.extract_tool_calls`) salvages it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager

from llm.toolcalls import ToolCallParser, parse_tool_calls

#: the name to pass to ``--tool-call-parser``
PARSER_NAME = "voice_pipeline"


class VoicePipelineToolParser(ToolParser):
    """Hermes ``<tool_call>`` tags and bare JSON calls (see the module docstring)."""

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self._stream = ToolCallParser()

    def adjust_request(self, request: Any) -> Any:
        request = super().adjust_request(request)
        if request.tools and request.tool_choice != "none":
            # a model may mark <tool_call> as a special token: keep it in the text
            request.skip_special_tokens = False
        return request

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        text, calls = parse_tool_calls(model_output)
        return ExtractedToolCallInformation(
            tools_called=bool(calls),
            tool_calls=[
                ToolCall(
                    id=c.call_id, type="function", function=FunctionCall(name=c.name, arguments=c.arguments)
                )
                for c in calls
            ],
            content=text if text.strip() else None,
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> DeltaMessage | None:
        parsed = self._stream.feed(delta_text)
        for delta in parsed.calls:  # what vLLM's serving layer reads back from a parser
            self.current_tool_id += 1
            self.prev_tool_call_arr.append({"name": delta.name, "arguments": delta.arguments})
            self.streamed_args_for_tool.append(delta.arguments)
        if not parsed.text and not parsed.calls:
            return None
        return DeltaMessage(
            content=parsed.text or None,
            tool_calls=[
                DeltaToolCall(
                    index=d.index,
                    id=d.call_id,
                    type="function",
                    function=DeltaFunctionCall(name=d.name, arguments=d.arguments),
                )
                for d in parsed.calls
            ],
        )


ToolParserManager.register_module(PARSER_NAME, module=VoicePipelineToolParser)
