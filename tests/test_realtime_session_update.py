"""session.update refused at parsing: every unusable session field gets an error in the
protocol's shape with its ``param`` (table-driven; the merge is in test_realtime_session.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.errors import ErrorCode, ProtocolError

BAD_SESSIONS: list[tuple[str, dict[str, Any], ErrorCode, str]] = [
    ("session missing", {"type": "session.update"}, ErrorCode.MISSING_PARAMETER, "session"),
    (
        "session without type",
        {"type": "session.update", "session": {}},
        ErrorCode.MISSING_PARAMETER,
        "session.type",
    ),
    (
        "beta session field",
        {"type": "session.update", "session": {"type": "realtime", "modalities": ["text"]}},
        ErrorCode.UNKNOWN_PARAMETER,
        "session.modalities",
    ),
    (
        "transcription session",
        {"type": "session.update", "session": {"type": "transcription"}},
        ErrorCode.UNSUPPORTED,
        "session.type",
    ),
    (
        "both modalities",
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text", "audio"]}},
        ErrorCode.INVALID_VALUE,
        "session.output_modalities",
    ),
    (
        "unknown format",
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/opus"}}}},
        },
        ErrorCode.INVALID_VALUE,
        "session.audio.input.format.type",
    ),
    (
        "pcm at 16 kHz",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}},
            },
        },
        ErrorCode.INVALID_VALUE,
        "session.audio.output.format.rate",
    ),
    (
        "format as a beta string",
        {"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"format": "pcm16"}}}},
        ErrorCode.INVALID_TYPE,
        "session.audio.input.format",
    ),
    (
        "threshold out of range",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 1.0}}},
            },
        },
        ErrorCode.INVALID_VALUE,
        "session.audio.input.turn_detection.threshold",
    ),
    (
        "eagerness on server_vad",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "eagerness": "low"}}},
            },
        },
        ErrorCode.UNKNOWN_PARAMETER,
        "session.audio.input.turn_detection.eagerness",
    ),
    (
        "idle timeout",
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}},
            },
        },
        ErrorCode.UNSUPPORTED,
        "session.audio.input.turn_detection.idle_timeout_ms",
    ),
    (
        "French transcription",
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"transcription": {"language": "fr"}}}},
        },
        ErrorCode.UNSUPPORTED,
        "session.audio.input.transcription.language",
    ),
    (
        "custom voice",
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"output": {"voice": {"id": "voice_1"}}}},
        },
        ErrorCode.UNSUPPORTED,
        "session.audio.output.voice",
    ),
    (
        "speed out of range",
        {"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"speed": 3}}}},
        ErrorCode.INVALID_VALUE,
        "session.audio.output.speed",
    ),
    (
        "max tokens 0",
        {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": 0}},
        ErrorCode.INVALID_VALUE,
        "session.max_output_tokens",
    ),
    (
        "max tokens as words",
        {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": "lots"}},
        ErrorCode.INVALID_VALUE,
        "session.max_output_tokens",
    ),
    (
        "MCP tool",
        {
            "type": "session.update",
            "session": {"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]},
        },
        ErrorCode.UNSUPPORTED,
        "session.tools[0].type",
    ),
    (
        "tool without a name",
        {"type": "session.update", "session": {"type": "realtime", "tools": [{"type": "function"}]}},
        ErrorCode.INVALID_VALUE,
        "session.tools[0].name",
    ),
    (
        "logprobs",
        {
            "type": "session.update",
            "session": {"type": "realtime", "include": ["item.input_audio_transcription.logprobs"]},
        },
        ErrorCode.UNSUPPORTED,
        "session.include",
    ),
    (
        "prompt template",
        {"type": "session.update", "session": {"type": "realtime", "prompt": {"id": "pmpt_1"}}},
        ErrorCode.UNSUPPORTED,
        "session.prompt",
    ),
    (
        "truncation disabled",
        {"type": "session.update", "session": {"type": "realtime", "truncation": "disabled"}},
        ErrorCode.UNSUPPORTED,
        "session.truncation",
    ),
]


@pytest.mark.parametrize(("name", "event", "code", "param"), BAD_SESSIONS, ids=[b[0] for b in BAD_SESSIONS])
def test_bad_session_updates(name: str, event: dict[str, Any], code: ErrorCode, param: str) -> None:
    result = ce.parse_client_event(json.dumps(event))
    assert isinstance(result, ProtocolError), result
    assert (result.code, result.param) == (code, param), result.message
    assert 0 < len(result.message) <= 600
