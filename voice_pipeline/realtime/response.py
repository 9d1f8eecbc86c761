"""One response's server events, in the GA order, with consistent ids (pure).

:func:`resolve_response` turns ``response.create``'s parameters and the
session's config into the response's :class:`ResponseSettings` (raising for
what this server cannot do). :class:`ResponseSequencer` is then fed the
response's life -- its creation, text or audio (with the transcript of each
clause as it starts), function-call arguments, and its end -- and returns the
server events to send for each step::

    created()            response.created
    first text or audio  response.output_item.added, conversation.item.added*,
                         response.content_part.added
    text(d)              response.output_text.delta
    audio(b, n, t)       response.output_audio_transcript.delta (when a clause of words starts),
                         response.output_audio.delta
    function_call(name)  (closes the open item) response.output_item.added, conversation.item.added*
    arguments(d)         response.function_call_arguments.delta
    close_call()         response.function_call_arguments.done, response.output_item.done,
                         conversation.item.done*
    finish, cancel,      response.output_text.done | (response.output_audio.done,
    incomplete, fail     response.output_audio_transcript.done), response.content_part.done,
                         response.output_item.done, conversation.item.done* (a function call:
                         response.function_call_arguments.done, output_item.done, item.done*),
                         then response.done (status, status_details, all output items, usage)

``*`` only when the response writes to the default conversation (``conversation:
"auto"``): its items are then added to the :class:`Conversation` as they start
and replaced by their final form as they end. ``output_index`` counts the
response's items, ``content_index`` is 0 (one part per message). Audio is
counted in wire samples: an item's clauses and their lengths are what
``conversation.item.truncate`` later cuts at.

Calling the steps out of order is a bug of the caller: :class:`ResponseSequenceError`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from voice_pipeline.conversation.heard import SpokenClause
from voice_pipeline.errors import LocalProtocolError
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.client_events import ConversationMode, ResponseParams
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError, refuse
from voice_pipeline.realtime.ids import IdKind, Ids
from voice_pipeline.realtime.items import (
    FunctionCall,
    Item,
    ItemReference,
    ItemStatus,
    Message,
    OutputAudio,
    OutputText,
    Role,
)
from voice_pipeline.realtime.server_events import (
    AudioDelta,
    AudioDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    ContentPartAdded,
    ContentPartDone,
    FunctionArgumentsDelta,
    FunctionArgumentsDone,
    ItemAdded,
    ItemDone,
    OutputItemAdded,
    OutputItemDone,
    ResponseCreated,
    ResponseDone,
    ResponseInfo,
    ResponseStatus,
    ServerEvent,
    StatusReason,
    TextDelta,
    TextDone,
    Usage,
)
from voice_pipeline.realtime.session_config import Modality, RealtimeSessionConfig, ServerProfile
from voice_pipeline.realtime.session_update import Unset, check_voice
from voice_pipeline.realtime.tools import FunctionTool, ToolChoice, check_tools


class ResponseSequenceError(LocalProtocolError):
    """A sequencer step called out of order (a bug of the caller, not the client's)."""


@dataclass(frozen=True, slots=True)
class ResponseSettings:
    """One response's effective settings: the session's, with response.create's overrides."""

    conversation: ConversationMode
    instructions: str
    output_modality: Modality
    output_format: AudioFormat
    voice: str
    #: None = "inf" (the server's cap)
    max_output_tokens: int | None
    tools: tuple[FunctionTool, ...]
    tool_choice: ToolChoice
    metadata: tuple[tuple[str, str], ...] | None = None
    #: the context instead of the default conversation (None: the conversation)
    input: tuple[Item | ItemReference, ...] | None = None


def resolve_response(
    params: ResponseParams, cfg: RealtimeSessionConfig, profile: ServerProfile
) -> ResponseSettings:
    fmt = cfg.output_format if params.output_format is None else params.output_format
    if fmt is not cfg.output_format:
        raise refuse(
            ErrorCode.UNSUPPORTED,
            f"a response's audio format must be the session's ({cfg.output_format}); "
            "change it with session.update",
            "response.audio.output.format",
        )
    voice = (
        cfg.voice
        if params.voice is None
        else check_voice(params.voice, profile, "response.audio.output.voice")
    )
    tools = cfg.tools if params.tools is None else params.tools
    choice = cfg.tool_choice if params.tool_choice is None else params.tool_choice
    check_tools(tools, choice, profile.tools_supported, profile.model, "response")
    max_tokens = (
        cfg.max_output_tokens if isinstance(params.max_output_tokens, Unset) else params.max_output_tokens
    )
    return ResponseSettings(
        conversation=params.conversation,
        instructions=cfg.instructions if params.instructions is None else params.instructions,
        output_modality=cfg.output_modality if params.output_modality is None else params.output_modality,
        output_format=fmt,
        voice=voice,
        max_output_tokens=max_tokens,
        tools=tools,
        tool_choice=choice,
        metadata=params.metadata,
        input=params.input,
    )


class _Phase(enum.Enum):
    NEW = 0
    CREATED = 1
    DONE = 2


@dataclass(slots=True)
class _Open:
    """The output item being generated."""

    item: Message | FunctionCall
    output_index: int
    previous_item_id: str | None
    text: str = ""  # text, audio transcript, or function arguments so far
    clauses: list[SpokenClause] | None = None


class ResponseSequencer:
    def __init__(self, settings: ResponseSettings, ids: Ids, conversation: Conversation | None) -> None:
        self.settings = settings
        self._ids = ids
        in_conversation = settings.conversation is ConversationMode.AUTO
        self._conversation = conversation if in_conversation else None
        self.response_id = ids.new(IdKind.RESPONSE)
        self._phase = _Phase.NEW
        self._open: _Open | None = None
        self._output: list[Item] = []
        self.status = ResponseStatus.IN_PROGRESS

    @property
    def done(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def open_item_id(self) -> str | None:
        """The output item being generated (None between items and once done)."""
        return None if self._open is None else self._open.item.id

    @property
    def output(self) -> tuple[Item, ...]:
        """The response's output items done so far."""
        return tuple(self._output)

    @property
    def item_ids(self) -> tuple[str, ...]:
        """Ids of the response's output items so far (the open one last)."""
        open_id = () if self._open is None else (self._open.item.id,)
        return tuple(i.id for i in self._output) + open_id

    def _info(self, reason: StatusReason | None = None, error: ProtocolError | None = None) -> ResponseInfo:
        s = self.settings
        return ResponseInfo(
            id=self.response_id,
            status=self.status,
            output_modality=s.output_modality,
            output_format=s.output_format,
            voice=s.voice,
            max_output_tokens=s.max_output_tokens,
            conversation_id=None if self._conversation is None else self._conversation.id,
            metadata=s.metadata,
            output=tuple(self._output),
            reason=reason,
            error=error,
        )

    def _need(self, phase: _Phase, step: str) -> None:
        if self._phase is not phase:
            raise ResponseSequenceError(f"{step}: the response is {self._phase.name.lower()}")

    def _new_item_id(self) -> str:
        return self._ids.new(IdKind.ITEM) if self._conversation is None else self._conversation.new_id()

    # ------------------------------------------------------------ steps

    def created(self) -> list[ServerEvent]:
        self._need(_Phase.NEW, "created")
        self._phase = _Phase.CREATED
        return [ResponseCreated(self._info())]

    def _start(self, item: Message | FunctionCall) -> list[ServerEvent]:
        events: list[ServerEvent] = []
        previous = None
        if self._conversation is not None:
            previous, evicted = self._conversation.add(item)
            events += evicted
        index = len(self._output)
        self._open = _Open(item, index, previous)
        events.append(OutputItemAdded(self.response_id, index, item))
        if self._conversation is not None:
            events.append(ItemAdded(item, previous))
        return events

    def _message(self, modality: Modality) -> tuple[_Open, list[ServerEvent]]:
        self._need(_Phase.CREATED, f"{modality} output")
        if self.settings.output_modality is not modality:
            raise ResponseSequenceError(f"{modality} output in a {self.settings.output_modality} response")
        if self._open is not None and isinstance(self._open.item, Message):
            return self._open, []
        events = self._close(ItemStatus.COMPLETED)
        item = Message(self._new_item_id(), Role.ASSISTANT, (), ItemStatus.IN_PROGRESS)
        events += self._start(item)
        assert self._open is not None
        part: OutputText | OutputAudio = OutputText("") if modality is Modality.TEXT else self._audio_part("")
        if modality is Modality.AUDIO:
            self._open.clauses = []
        events.append(ContentPartAdded(self.response_id, item.id, self._open.output_index, 0, part))
        return self._open, events

    def _audio_part(self, transcript: str, clauses: tuple[SpokenClause, ...] = ()) -> OutputAudio:
        return OutputAudio(transcript, clauses, self.settings.output_format.rate_hz)

    def text(self, delta: str) -> list[ServerEvent]:
        """More reply text (text modality)."""
        current, events = self._message(Modality.TEXT)
        current.text += delta
        events.append(TextDelta(self.response_id, current.item.id, current.output_index, 0, delta))
        return events

    def audio(self, data: bytes, samples: int, transcript: str | None = None) -> list[ServerEvent]:
        """Reply audio (wire bytes, and the ``samples`` of the output rate they add to the
        item's audio); a ``transcript`` starts a new clause: the text spoken from this audio
        on (``""``: audio without words, a fixed phrase)."""
        current, events = self._message(Modality.AUDIO)
        assert current.clauses is not None
        rid, iid, index = self.response_id, current.item.id, current.output_index
        if transcript is not None or not current.clauses:
            current.clauses.append(SpokenClause(transcript or "", 0))
        if transcript:
            delta = transcript if not current.text else " " + transcript
            current.text += delta
            events.append(AudioTranscriptDelta(rid, iid, index, 0, delta))
        last = current.clauses[-1]
        current.clauses[-1] = SpokenClause(last.text, last.samples + samples)
        if data:
            events.append(AudioDelta(rid, iid, index, 0, data))
        return events

    def late_audio(self, data: bytes) -> list[ServerEvent]:
        """More audio of the response's last audio message after the response is done (its
        reply resumed after a false interruption while playing): further deltas of that item."""
        self._need(_Phase.DONE, "late audio")
        for index in range(len(self._output) - 1, -1, -1):
            item = self._output[index]
            if isinstance(item, Message) and any(isinstance(p, OutputAudio) for p in item.content):
                return [AudioDelta(self.response_id, item.id, index, 0, data)] if data else []
        return []

    def function_call(self, name: str, call_id: str | None = None) -> list[ServerEvent]:
        """The model calls ``name``; its arguments follow with :meth:`arguments`."""
        self._need(_Phase.CREATED, "function_call")
        events = self._close(ItemStatus.COMPLETED)
        call = call_id or self._ids.new(IdKind.CALL)
        events += self._start(FunctionCall(self._new_item_id(), call, name, "", ItemStatus.IN_PROGRESS))
        return events

    def arguments(self, delta: str) -> list[ServerEvent]:
        self._need(_Phase.CREATED, "arguments")
        if self._open is None or not isinstance(self._open.item, FunctionCall):
            raise ResponseSequenceError("arguments outside a function call")
        self._open.text += delta
        item = self._open.item
        return [
            FunctionArgumentsDelta(self.response_id, item.id, self._open.output_index, item.call_id, delta)
        ]

    def close_call(self) -> list[ServerEvent]:
        """The open function call is complete (its arguments are all written)."""
        self._need(_Phase.CREATED, "close_call")
        if self._open is None or not isinstance(self._open.item, FunctionCall):
            raise ResponseSequenceError("close_call outside a function call")
        return self._close(ItemStatus.COMPLETED)

    def _close(self, status: ItemStatus) -> list[ServerEvent]:
        current, self._open = self._open, None
        if current is None:
            return []
        rid, index = self.response_id, current.output_index
        events: list[ServerEvent] = []
        final: Item
        match current.item:
            case FunctionCall() as call:
                final = replace(call, arguments=current.text, status=status)
                events.append(
                    FunctionArgumentsDone(rid, call.id, index, call.call_id, call.name, current.text)
                )
            case Message() as msg if current.clauses is not None:
                part = self._audio_part(current.text, tuple(current.clauses))
                final = replace(msg, content=(part,), status=status)
                events += [
                    AudioDone(rid, msg.id, index, 0),
                    AudioTranscriptDone(rid, msg.id, index, 0, current.text),
                    ContentPartDone(rid, msg.id, index, 0, part),
                ]
            case Message() as msg:
                text = OutputText(current.text)
                final = replace(msg, content=(text,), status=status)
                events += [
                    TextDone(rid, msg.id, index, 0, current.text),
                    ContentPartDone(rid, msg.id, index, 0, text),
                ]
        self._output.append(final)
        events.append(OutputItemDone(rid, index, final))
        if self._conversation is not None and final.id in self._conversation:  # (the client may delete it)
            self._conversation.replace(final)
            events.append(ItemDone(final, current.previous_item_id))
        return events

    def _end(
        self,
        status: ResponseStatus,
        usage: Usage | None,
        reason: StatusReason | None = None,
        error: ProtocolError | None = None,
    ) -> list[ServerEvent]:
        self._need(_Phase.CREATED, str(status))
        events = self._close(
            ItemStatus.COMPLETED if status is ResponseStatus.COMPLETED else ItemStatus.INCOMPLETE
        )
        self._phase = _Phase.DONE
        self.status = status
        return [*events, ResponseDone(replace(self._info(reason, error), usage=usage))]

    def finish(self, usage: Usage | None = None) -> list[ServerEvent]:
        """The reply is complete."""
        return self._end(ResponseStatus.COMPLETED, usage)

    def cancel(self, reason: StatusReason, usage: Usage | None = None) -> list[ServerEvent]:
        """Cut off: the user spoke (``TURN_DETECTED``) or the client cancelled (``CLIENT_CANCELLED``)."""
        return self._end(ResponseStatus.CANCELLED, usage, reason)

    def incomplete(self, usage: Usage | None = None) -> list[ServerEvent]:
        """The reply hit ``max_output_tokens``."""
        return self._end(ResponseStatus.INCOMPLETE, usage, StatusReason.MAX_OUTPUT_TOKENS)

    def fail(self, error: ProtocolError, usage: Usage | None = None) -> list[ServerEvent]:
        """A stage failed (the error says which and whether a retry can help)."""
        return self._end(ResponseStatus.FAILED, usage, error=error)
