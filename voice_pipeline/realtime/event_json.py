"""Server events as the JSON objects the client receives (pure).

:func:`encode` turns one :data:`~.server_events.ServerEvent` into its JSON
object under a given ``event_id``: an event's fields become the object's, with
items, responses (:func:`response_json`), content parts (:func:`part_json`),
audio (base64) and errors (:func:`error_json`) serialized as the openai SDK's
models expect (the tests validate every event against them). The events carry
no ``event_id`` themselves: :class:`ServerEventEncoder` stamps a fresh one on
each event as it is sent, and :func:`dumps` writes the compact JSON text.
"""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import fields
from typing import Any

from voice_pipeline.realtime.audio import format_json
from voice_pipeline.realtime.errors import ProtocolError
from voice_pipeline.realtime.ids import IdKind, Ids
from voice_pipeline.realtime.items import Item, OutputAudio, OutputText, item_json
from voice_pipeline.realtime.server_events import (
    InputTranscriptCompleted,
    InputTranscriptFailed,
    ResponseInfo,
    ResponseStatus,
    ServerEvent,
    SessionCreated,
    SessionUpdated,
    TurnLatencyMeasured,
)
from voice_pipeline.realtime.session_config import session_json
from voice_pipeline.realtime.wire import Json


def error_json(error: ProtocolError) -> Json:
    return {
        "type": str(error.type),
        "code": str(error.code),
        "message": error.message,
        "param": error.param,
        "event_id": error.event_id,
    }


def response_json(r: ResponseInfo) -> Json:
    details: Json | None = None
    if r.status is not ResponseStatus.IN_PROGRESS and r.status is not ResponseStatus.COMPLETED:
        details = {"type": str(r.status), "reason": None if r.reason is None else str(r.reason)}
        if r.error is not None:
            details["error"] = {
                "type": str(r.error.type),
                "code": str(r.error.code),
                "message": r.error.message,
            }
    usage: Json | None = None
    if r.usage is not None:
        u = r.usage
        usage = {
            "total_tokens": u.input_tokens + u.output_tokens,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "input_token_details": {
                "text_tokens": u.input_tokens,
                "audio_tokens": 0,
                "cached_tokens": u.cached_tokens,
            },
            "output_token_details": {"text_tokens": u.output_tokens, "audio_tokens": 0},
        }
    return {
        "object": "realtime.response",
        "id": r.id,
        "status": str(r.status),
        "status_details": details,
        "output": [item_json(i) for i in r.output],
        "conversation_id": r.conversation_id,
        "output_modalities": [str(r.output_modality)],
        "max_output_tokens": "inf" if r.max_output_tokens is None else r.max_output_tokens,
        "audio": {"output": {"format": format_json(r.output_format), "voice": r.voice}},
        "usage": usage,
        "metadata": None if r.metadata is None else dict(r.metadata),
    }


def part_json(part: OutputText | OutputAudio) -> Json:
    """A content part as response.content_part.* carry it (types "text" / "audio")."""
    if isinstance(part, OutputText):
        return {"type": "text", "text": part.text}
    return {"type": "audio", "transcript": part.transcript}


def _value(value: Any) -> Any:
    match value:
        case bytes():
            return base64.b64encode(value).decode("ascii")
        case ResponseInfo():
            return response_json(value)
        case ProtocolError():
            return error_json(value)
        case OutputText() | OutputAudio():
            return part_json(value)
        case enum.Enum():
            return str(value.value)
        case _ if isinstance(value, Item):
            return item_json(value)
    return value


def encode(event: ServerEvent, event_id: str) -> Json:
    """The event as the JSON object sent to the client."""
    out: Json = {"type": event.TYPE, "event_id": event_id}
    match event:
        case SessionCreated(session=cfg, session_id=sid) | SessionUpdated(session=cfg, session_id=sid):
            out["session"] = session_json(cfg, sid)
        case InputTranscriptCompleted():
            out |= {
                "item_id": event.item_id,
                "content_index": event.content_index,
                "transcript": event.transcript,
                "usage": {"type": "duration", "seconds": round(event.audio_seconds, 3)},
            }
        case InputTranscriptFailed():
            error = error_json(event.error)
            del error["event_id"]  # a transcription fails on its own: no client event caused it
            out |= {
                "item_id": event.item_id,
                "content_index": event.content_index,
                "error": error,
            }
        case TurnLatencyMeasured():
            out |= {"response_id": event.response_id, "item_id": event.item_id, "record": dict(event.record)}
        case _:
            out |= {f.name: _value(getattr(event, f.name)) for f in fields(event)}
    return out


def dumps(message: Json) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


class ServerEventEncoder:
    """Server events -> JSON text, each with a fresh ``event_...`` id from ``ids``."""

    def __init__(self, ids: Ids) -> None:
        self._ids = ids

    def encode(self, event: ServerEvent) -> Json:
        return encode(event, self._ids.new(IdKind.EVENT))

    def text(self, event: ServerEvent) -> str:
        return dumps(self.encode(event))
