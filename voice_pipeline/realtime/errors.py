"""Errors of the Realtime protocol, in the protocol's own shape.

Every client event this server cannot carry out is answered with one ``error``
server event (:class:`ProtocolError`, serialized by
:func:`voice_pipeline.realtime.event_json.encode`) and the session goes on::

    {"type": "error", "event_id": "event_...",
     "error": {"type": "invalid_request_error", "code": "unknown_parameter",
               "message": "...", "param": "session.foo", "event_id": "<the client's event_id>"}}

Inside the package a refusal travels as :class:`RealtimeClientError` (a client
error: never a crash)::

    VoicePipelineError
    └── RealtimeClientError      ``.error`` is the ProtocolError to send back
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from voice_pipeline.errors import RemoteProtocolError
from voice_pipeline.errors import quote as quote  # the realtime modules quote values with it


class ErrorType(enum.StrEnum):
    INVALID_REQUEST = "invalid_request_error"
    SERVER = "server_error"


class ErrorCode(enum.StrEnum):
    # the event's shape: never for an event the openai SDK's own types can express
    INVALID_JSON = "invalid_json"
    INVALID_EVENT = "invalid_event"
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    UNKNOWN_PARAMETER = "unknown_parameter"
    MISSING_PARAMETER = "missing_required_parameter"
    INVALID_TYPE = "invalid_type"
    # a well-formed event with a value that cannot be used
    INVALID_VALUE = "invalid_value"
    INVALID_BASE64 = "invalid_base64"
    EVENT_TOO_LARGE = "event_too_large"
    #: valid in the API, not implemented by this server (the message says what is)
    UNSUPPORTED = "unsupported_value"
    #: tools requested from a model whose chat template cannot call them
    TOOLS_UNSUPPORTED = "tools_unsupported"
    # the conversation's and the session's state
    #: an item id that names no item (OpenAI's codes for retrieve, delete and truncate)
    RETRIEVE_NOT_FOUND = "item_retrieve_invalid_item_id"
    DELETE_NOT_FOUND = "item_delete_invalid_item_id"
    TRUNCATE_NOT_FOUND = "item_truncate_invalid_item_id"
    #: ... for a previous_item_id or a response's item reference
    ITEM_NOT_FOUND = "item_not_found"
    DUPLICATE_ITEM_ID = "duplicate_item_id"
    INPUT_BUFFER_EMPTY = "input_audio_buffer_commit_empty"
    NO_ACTIVE_RESPONSE = "response_cancel_not_active"
    RESPONSE_ALREADY_ACTIVE = "conversation_already_has_active_response"
    # this server's own failures (type server_error): a stage failed, or a bug
    SERVER_ERROR = "server_error"
    #: the model wrote a function call that is not usable as written: arguments that are not
    #: a JSON object, or a function the response did not offer (the item holds it as written)
    INVALID_FUNCTION_CALL = "invalid_function_call"
    #: the connection is refused (then closed): the session limit, the origin, a shutdown
    SESSION_LIMIT = "session_limit_reached"
    REFUSED = "connection_refused"


#: codes that say the event does not have the protocol's shape (field names, types, nesting)
SHAPE_CODES = frozenset(
    {
        ErrorCode.INVALID_JSON,
        ErrorCode.INVALID_EVENT,
        ErrorCode.UNKNOWN_EVENT_TYPE,
        ErrorCode.UNKNOWN_PARAMETER,
        ErrorCode.MISSING_PARAMETER,
        ErrorCode.INVALID_TYPE,
    }
)


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The ``error`` object of an ``error`` server event (the SDK's ``RealtimeError``)."""

    code: ErrorCode
    message: str
    #: the offending field as a dotted path (``session.audio.input.format``), if one is
    param: str | None = None
    #: the ``event_id`` of the client event that caused it, if it had one
    event_id: str | None = None
    type: ErrorType = ErrorType.INVALID_REQUEST

    def for_event(self, event_id: str | None) -> ProtocolError:
        return self if event_id is None else replace(self, event_id=event_id)


class RealtimeClientError(RemoteProtocolError):
    """A client event was refused; ``error`` is what the client is told. The session goes on."""

    def __init__(self, error: ProtocolError) -> None:
        super().__init__(error.message)
        self.error = error


def refuse(code: ErrorCode, message: str, param: str | None = None) -> RealtimeClientError:
    """The exception to raise for a refused client event (``raise refuse(...)``)."""
    return RealtimeClientError(ProtocolError(code, message, param))
