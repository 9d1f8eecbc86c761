"""Twilio Media Streams (bidirectional ``<Connect><Stream>``), the wire protocol without I/O.

:class:`TwilioProtocol` decodes one call's text frames in order into the typed
events below and raises :class:`TwilioMessageError` for anything unusable; the
connection logs it and goes on, unless the error is ``fatal`` (then it closes
the stream with the error's message as the reason). The builders at the end
make the messages the server sends: ``media``, ``mark`` and ``clear``, each
with the stream's ``streamSid``.

Inbound messages: ``connected``, ``start``, ``media``, ``dtmf``, ``mark``, ``stop``
(https://www.twilio.com/docs/voice/media-streams/websocket-messages).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from voice_pipeline.errors import RemoteProtocolError
from voice_pipeline.errors import quote as _quote

ENCODING = "audio/x-mulaw"
RATE_HZ = 8000
FRAME_BYTES = 160  # 20 ms of 8 kHz µ-law
MAX_PAYLOAD_BYTES = 8000  # one second of audio in one media message is already abnormal


class TwilioMessageError(RemoteProtocolError):
    """The caller's last message was not usable; ``fatal`` = the stream cannot go on."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass(frozen=True, slots=True)
class Connected:
    protocol: str


@dataclass(frozen=True, slots=True)
class StreamStarted:
    stream_sid: str
    call_sid: str
    tracks: tuple[str, ...]
    custom_parameters: dict[str, str]


@dataclass(frozen=True, slots=True)
class MediaReceived:
    payload: bytes  # µ-law, 8 kHz mono
    track: str
    chunk: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class DtmfReceived:
    digit: str


@dataclass(frozen=True, slots=True)
class MarkPlayed:
    name: str


@dataclass(frozen=True, slots=True)
class StreamStopped:
    pass


TwilioEvent = Connected | StreamStarted | MediaReceived | DtmfReceived | MarkPlayed | StreamStopped


def _obj(msg: dict[str, Any], key: str) -> dict[str, Any]:
    value = msg.get(key)
    if not isinstance(value, dict):
        raise TwilioMessageError(f"'{key}' must be an object")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise TwilioMessageError(f"'{key}' must be a non-empty string")
    return value


def _int(obj: dict[str, Any], key: str) -> int:
    """Twilio sends numbers as strings ("chunk": "1"); accept both, default 0."""
    value = obj.get(key, 0)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # None/[]; "x", NaN, 5000 digits; Infinity
        raise TwilioMessageError(f"'{key}' must be an integer") from None


class TwilioProtocol:
    """One call's inbound messages, in order. ``stream_sid`` is set by ``start``."""

    def __init__(self) -> None:
        self.stream_sid: str | None = None
        self.stopped = False

    def receive(self, text: str) -> TwilioEvent:
        try:
            msg = json.loads(text)
        except (ValueError, RecursionError):  # also a number of 5000 digits, or "[[[[..." too deep
            raise TwilioMessageError("not JSON") from None
        try:
            return self._receive(msg)
        except RecursionError:  # str() of a value nested almost as deep as json.loads allows
            raise TwilioMessageError("a value nested too deep") from None

    def _receive(self, msg: Any) -> TwilioEvent:
        if not isinstance(msg, dict):
            raise TwilioMessageError("not a JSON object")
        event = msg.get("event")
        if event == "connected":
            return Connected(str(msg.get("protocol", "")))
        if event == "start":
            return self._start(msg)
        if event not in ("media", "dtmf", "mark", "stop"):
            raise TwilioMessageError(f"unknown event {_quote(event)}")
        if self.stream_sid is None:
            raise TwilioMessageError(f"'{event}' before 'start'")
        if msg.get("streamSid") != self.stream_sid:
            raise TwilioMessageError(f"'{event}' for another stream ({_quote(msg.get('streamSid'))})")
        match event:
            case "media":
                return self._media(_obj(msg, "media"))
            case "dtmf":
                return DtmfReceived(_str(_obj(msg, "dtmf"), "digit"))
            case "mark":
                return MarkPlayed(_str(_obj(msg, "mark"), "name"))
            case _:
                self.stopped = True
                return StreamStopped()

    def _start(self, msg: dict[str, Any]) -> StreamStarted:
        if self.stream_sid is not None:
            raise TwilioMessageError("a second 'start'")
        start = _obj(msg, "start")
        sid = msg.get("streamSid") or start.get("streamSid")
        if not isinstance(sid, str) or not sid:
            raise TwilioMessageError("'start' without a streamSid", fatal=True)
        fmt = start.get("mediaFormat", {})
        if not isinstance(fmt, dict) or (
            fmt.get("encoding"),
            _int(fmt, "sampleRate"),
            _int(fmt, "channels"),
        ) != (ENCODING, RATE_HZ, 1):
            raise TwilioMessageError(
                f"unsupported mediaFormat {_quote(fmt)}: need {ENCODING} {RATE_HZ} Hz mono", fatal=True
            )
        tracks = start.get("tracks", ["inbound"])
        params = start.get("customParameters", {})
        if not isinstance(tracks, list) or not isinstance(params, dict):
            raise TwilioMessageError("'tracks' must be a list and 'customParameters' an object", fatal=True)
        self.stream_sid = sid
        return StreamStarted(
            stream_sid=sid,
            call_sid=str(start.get("callSid", "")),
            tracks=tuple(str(t) for t in tracks),
            custom_parameters={str(k): str(v) for k, v in params.items()},
        )

    def _media(self, media: dict[str, Any]) -> MediaReceived:
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise TwilioMessageError("'media.payload' must be a base64 string")
        if len(payload) > MAX_PAYLOAD_BYTES * 4 // 3 + 4:
            raise TwilioMessageError(f"'media.payload' over {MAX_PAYLOAD_BYTES} bytes")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise TwilioMessageError("'media.payload' is not valid base64") from None
        track = media.get("track", "inbound")
        return MediaReceived(data, str(track), _int(media, "chunk"), _int(media, "timestamp"))


# ---------------------------------------------------------------- server -> Twilio


def media_message(stream_sid: str, payload: bytes) -> str:
    b64 = base64.b64encode(payload).decode("ascii")
    return json.dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": b64}})


def mark_message(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    return json.dumps({"event": "clear", "streamSid": stream_sid})
