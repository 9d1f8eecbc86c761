"""One response as the bridge keeps it while its reply runs (:class:`ResponseState`),
and what the session is asked for it (:func:`reply_options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from voice_pipeline.conversation.steering import ReplyOptions
from voice_pipeline.realtime.audio import OutputEncoder
from voice_pipeline.realtime.calls import ResponseCalls
from voice_pipeline.realtime.errors import ProtocolError
from voice_pipeline.realtime.response import ResponseSequencer, ResponseSettings
from voice_pipeline.realtime.server_events import Usage
from voice_pipeline.realtime.session_config import Modality
from voice_pipeline.realtime.tools import tool_offer


def reply_options(settings: ResponseSettings) -> ReplyOptions:
    """The reply a response asks for: spoken or text, its token limit, its tools."""
    return ReplyOptions(
        speak=settings.output_modality is Modality.AUDIO,
        max_tokens=settings.max_output_tokens,
        tools=tool_offer(settings.tools, settings.tool_choice),
    )


@dataclass(slots=True)
class ResponseState:
    """One response and how its reply went."""

    seq: ResponseSequencer
    encoder: OutputEncoder
    prompt_tokens: int
    audio_started: bool = False  # its first audio was written to the socket
    cleared: bool = False  # output_audio_buffer.cleared was sent
    by_client: bool = False  # cancelled by response.cancel / output_audio_buffer.clear
    failed: ProtocolError | None = None
    #: the client's conversation.item.truncate of the item while it was being generated
    truncate_ms: int | None = None
    truncated_by_client: bool = False
    calls: ResponseCalls = field(init=False)

    def __post_init__(self) -> None:
        offered = frozenset(t.name for t in self.seq.settings.tools)
        self.calls = ResponseCalls(self.seq, offered)

    @property
    def text_only(self) -> bool:
        return self.seq.settings.output_modality is Modality.TEXT


def usage_of(r: ResponseState, output: int, prompt: int | None, cached: int | None) -> Usage:
    """The response's usage: the engine's own prompt figures when it gave them, else the
    estimate from the rendered request."""
    return Usage(r.prompt_tokens if prompt is None else prompt, output, cached or 0)
