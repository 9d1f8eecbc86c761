"""The input audio buffer's server events (pure): speech, commits, clears, transcription.

:class:`InputSequencer` is told what happened to the user's audio and returns
the server events, in the GA order, with the user item's id consistent across
them::

    speech_started(ms)   input_audio_buffer.speech_started (allocates the item id)
    speech_stopped(ms)   input_audio_buffer.speech_stopped
    commit()             input_audio_buffer.committed, conversation.item.added, conversation.item.done
    transcript_delta     conversation.item.input_audio_transcription.delta
    transcript_completed conversation.item.input_audio_transcription.completed (the item's transcript set)
    clear()              input_audio_buffer.cleared

Times are ms on the input audio timeline: ms of audio the client appended since
the session started (``audio_start_ms`` includes the prefix padding, like the
VAD's pre-roll). A manual commit (``input_audio_buffer.commit``) of less than
:data:`MIN_COMMIT_MS` of audio is refused with ``input_audio_buffer_commit_empty``,
as OpenAI's server does.
"""

from __future__ import annotations

from typing import Final

from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError, refuse
from voice_pipeline.realtime.items import InputAudio, ItemStatus, Message, Role
from voice_pipeline.realtime.server_events import (
    InputCleared,
    InputCommitted,
    InputTranscriptCompleted,
    InputTranscriptDelta,
    InputTranscriptFailed,
    ItemAdded,
    ItemDone,
    ServerEvent,
    SpeechStarted,
    SpeechStopped,
)

MIN_COMMIT_MS: Final = 100.0


class InputSequencer:
    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation
        #: ms appended since the last commit or clear
        self.buffered_ms = 0.0
        #: the id the item of the speech in progress will get (set by speech_started)
        self.pending_item_id: str | None = None

    def appended(self, ms: float) -> None:
        self.buffered_ms += ms

    def speech_started(self, audio_start_ms: int) -> list[ServerEvent]:
        if self.pending_item_id is None:
            self.pending_item_id = self._conversation.new_id()
        return [SpeechStarted(audio_start_ms, self.pending_item_id)]

    def speech_stopped(self, audio_end_ms: int) -> list[ServerEvent]:
        if self.pending_item_id is None:  # a stop without a start: give it an item anyway
            self.pending_item_id = self._conversation.new_id()
        return [SpeechStopped(audio_end_ms, self.pending_item_id)]

    def check_commit(self) -> None:
        """Raise ``input_audio_buffer_commit_empty`` if the buffer holds under 100 ms."""
        if self.buffered_ms < MIN_COMMIT_MS:
            raise refuse(
                ErrorCode.INPUT_BUFFER_EMPTY,
                f"buffer too small: at least {MIN_COMMIT_MS:.0f} ms of audio is needed, "
                f"the buffer has {self.buffered_ms:.2f} ms",
            )

    def commit(self, *, manual: bool = False) -> list[ServerEvent]:
        """The buffer becomes a user audio item (transcript to come). ``manual``: the client's
        ``input_audio_buffer.commit``, refused if the buffer holds under 100 ms."""
        if manual:
            self.check_commit()
        item_id = self.pending_item_id or self._conversation.new_id()
        self.pending_item_id = None
        self.buffered_ms = 0.0
        item = Message(item_id, Role.USER, (InputAudio(None),), ItemStatus.COMPLETED)
        previous, evicted = self._conversation.add(item)
        return [
            *evicted,
            InputCommitted(item_id, previous),
            ItemAdded(item, previous),
            ItemDone(item, previous),
        ]

    def clear(self) -> list[ServerEvent]:
        self.pending_item_id = None
        self.buffered_ms = 0.0
        return [InputCleared()]

    def transcript_delta(self, item_id: str, delta: str) -> list[ServerEvent]:
        return [InputTranscriptDelta(item_id, 0, delta)]

    def transcript_completed(self, item_id: str, transcript: str, audio_seconds: float) -> list[ServerEvent]:
        """The final transcript: also the item's (if it is still in the conversation)."""
        if item_id in self._conversation:
            self._conversation.set_transcript(item_id, 0, transcript)
        return [InputTranscriptCompleted(item_id, 0, transcript, audio_seconds)]

    def transcript_failed(self, item_id: str, error: ProtocolError) -> list[ServerEvent]:
        return [InputTranscriptFailed(item_id, 0, error)]
