"""One response as the bridge keeps it while its reply runs (pure).

:class:`ResponseState` is a response's :class:`~.response.ResponseSequencer`
with how its reply went (its playback, a cancel by the client, a failure, a
truncation asked for while it was generated), and the server events that follow
from the reply's course beyond the sequencer's own steps:

=======================  ================================================================
``text``, ``clause``     the reply's text (text responses), a clause's words as its audio
                         is next (audio responses)
``audio_deltas``         reply audio -> ``response.output_audio.delta`` events of at most
                         :data:`DELTA_MS` each, with the samples each carries
``audio_written``        ``output_audio_buffer.started`` (once)
``stop_audio``           ``output_audio_buffer.cleared`` (once, if its audio started)
``superseded``           the user's turn went on: ``stop_audio``, ``response.done``
                         ``cancelled`` (``turn_detected``) if still active
``truncate_open``        ``conversation.item.truncate`` of the item being generated: kept
                         for its end (``turn_completed`` cuts it)
``generated``            the calls' ``.done`` events, ``response.done`` ``completed`` /
                         ``incomplete`` (the token limit)
``turn_completed``       ``response.done`` if still open (``cancelled``, ``failed`` or
                         ``completed``), the heard cut (``conversation.item.truncated``),
                         ``output_audio_buffer.stopped``
=======================  ================================================================

:func:`reply_options` is what the session is asked for a response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from voice_pipeline import events as ev
from voice_pipeline.audio import Int16
from voice_pipeline.conversation.steering import ReplyOptions
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.realtime.audio import PCM_RATE_HZ, OutputEncoder
from voice_pipeline.realtime.calls import ResponseCalls
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError, refuse
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import Message, OutputAudio
from voice_pipeline.realtime.response import ResponseSequencer, ResponseSettings
from voice_pipeline.realtime.server_events import (
    AudioDelta,
    OutputAudioCleared,
    OutputAudioStarted,
    OutputAudioStopped,
    ServerEvent,
    StatusReason,
    Usage,
)
from voice_pipeline.realtime.session_config import Modality
from voice_pipeline.realtime.tools import tool_offer

#: the rate reply audio reaches the transport at (each response encodes it to its format)
OUTPUT_RATE_HZ = PCM_RATE_HZ
#: longest audio in one response.output_audio.delta
DELTA_MS = 200


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

    @classmethod
    def start(
        cls, settings: ResponseSettings, ids: Ids, conversation: Conversation, prompt_tokens: int
    ) -> ResponseState:
        """A new response (its reply audio arrives at :data:`OUTPUT_RATE_HZ`)."""
        seq = ResponseSequencer(settings, ids, conversation)
        return cls(seq, OutputEncoder(settings.output_format, OUTPUT_RATE_HZ), prompt_tokens)

    @property
    def text_only(self) -> bool:
        return self.seq.settings.output_modality is Modality.TEXT

    def usage(self, output: int, prompt: int | None, cached: int | None) -> Usage:
        """The response's usage: the engine's own prompt figures when it gave them, else the
        estimate from the rendered request."""
        return Usage(self.prompt_tokens if prompt is None else prompt, output, cached or 0)

    def text(self, text: str) -> list[ServerEvent]:
        """The reply's text as it streams (a text response's deltas)."""
        return self.seq.text(text) if self.text_only and not self.seq.done else []

    def clause(self, text: str, samples: int) -> list[ServerEvent]:
        """A synthesized clause's words (``samples`` long at :data:`OUTPUT_RATE_HZ`), as its
        audio is next."""
        if self.text_only or self.seq.done:
            return []
        rate = self.seq.settings.output_format.rate_hz
        return self.seq.audio(b"", round(samples * rate / OUTPUT_RATE_HZ), text)

    def audio_deltas(self, pcm: Int16) -> list[tuple[ServerEvent, int]]:
        """Reply audio at :data:`OUTPUT_RATE_HZ` -> its events, each with the samples (at that
        rate) it carries (a delta's share, 0 for the others); nothing if the response has
        no audio (text only, or cleared)."""
        if self.text_only or self.cleared or not len(pcm):
            return []
        fmt = self.seq.settings.output_format
        wire = self.encoder.encode(np.asarray(pcm, dtype=np.int16))
        step = fmt.bytes_per_sample * fmt.rate_hz * DELTA_MS // 1000
        out: list[tuple[ServerEvent, int]] = []
        for start in range(0, len(wire), step):
            data = wire[start : start + step]
            # this chunk's share of the samples, by byte position (sums to len(pcm) exactly)
            samples = (min(start + step, len(wire)) * len(pcm)) // len(wire) - (start * len(pcm)) // len(wire)
            events = self.seq.late_audio(data) if self.seq.done else self.seq.audio(data, 0)
            out += [(e, samples if isinstance(e, AudioDelta) else 0) for e in events]
        return out

    def audio_written(self) -> list[ServerEvent]:
        """Its audio is being written to the socket (its playback starts)."""
        if self.audio_started:
            return []
        self.audio_started = True
        return [OutputAudioStarted(self.seq.response_id)]

    def stop_audio(self) -> list[ServerEvent]:
        """Its audio is to stop (the user spoke over it, or the client cleared it)."""
        if not self.audio_started or self.cleared:
            return []
        self.cleared = True
        return [OutputAudioCleared(self.seq.response_id)]

    def superseded(self) -> list[ServerEvent]:
        """The user's turn went on (the words it answered were not the turn's end): its audio
        stops, and the response is cancelled (``turn_detected``) if still active."""
        events = self.stop_audio()
        if not self.seq.done:
            events += self.seq.cancel(StatusReason.TURN_DETECTED, Usage(self.prompt_tokens, 0))
        return events

    def truncate_open(self, item_id: str, content_index: int, audio_end_ms: int) -> bool:
        """``conversation.item.truncate`` of the audio item it is generating: whether it is
        (then it is cut when done)."""
        if self.seq.open_item_id != item_id or self.text_only:
            return False
        if content_index != 0:
            raise refuse(ErrorCode.INVALID_VALUE, "the item has 1 content part(s)", "content_index")
        self.truncate_ms = audio_end_ms
        return True

    def generated(self, event: ev.ReplyGenerated) -> list[ServerEvent]:
        """The reply was generated (to its token limit, or not); playback may go on."""
        if self.seq.done:
            return []
        usage = self.usage(event.output_tokens, event.prompt_tokens, event.cached_tokens)
        events = self.calls.flush()
        return events + (self.seq.incomplete(usage) if event.token_limit else self.seq.finish(usage))

    def turn_completed(self, record: TurnRecord, conversation: Conversation) -> list[ServerEvent]:
        """The turn it answered is over (``record``: the ledger's): the response ends if it
        has not, its audio item is cut to what was heard, its playback has stopped."""
        events: list[ServerEvent] = []
        if not self.seq.done:
            usage = self.usage(record.work.llm_tokens, record.llm_prompt_tokens, record.llm_cached_tokens)
            if record.interrupted:
                reason = StatusReason.CLIENT_CANCELLED if self.by_client else StatusReason.TURN_DETECTED
                events += self.seq.cancel(reason, usage)
            elif self.failed is not None:
                events += self.seq.fail(self.failed, usage)
            else:
                events += self.calls.flush() + self.seq.finish(usage)
        events += self._cut_to_heard(record, conversation)
        if self.audio_started and not self.cleared:
            events.append(OutputAudioStopped(self.seq.response_id))
        return events

    def _cut_to_heard(self, record: TurnRecord, conversation: Conversation) -> list[ServerEvent]:
        """An interrupted reply's audio item is cut to what the listener heard: where the
        client said (conversation.item.truncate), else at the server's playout estimate."""
        if self.truncated_by_client or (self.truncate_ms is None and not record.interrupted):
            return []
        heard_ms = round(record.work.audio_heard_s * 1000) if self.truncate_ms is None else self.truncate_ms
        for item in self.seq.output:
            if not isinstance(item, Message) or item.id not in conversation:
                continue
            for part in item.content:
                if isinstance(part, OutputAudio):
                    return conversation.truncate(item.id, 0, min(heard_ms, part.duration_ms))
        return []
