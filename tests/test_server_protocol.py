"""Wire protocol v1 without I/O: client frames in (table-driven), server messages out."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from voice_pipeline import events as ev
from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import ALL_STAGES
from voice_pipeline.ledger.records import BudgetBreach, TurnRecord, WorkAccount
from voice_pipeline.server.protocol import (
    Capabilities,
    ClientMessageError,
    ClientProtocol,
    ErrorCode,
    Interrupt,
    Playback,
    PttEnd,
    PttStart,
    Start,
    Stop,
    event_message,
    parse_audio,
    parse_message,
    ready_message,
)


def start(**fields: Any) -> str:
    return json.dumps({"type": "start", "version": 1, "sample_rate": 16000, "format": "pcm16", **fields})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (start(), Start(16000, 16000, Capabilities())),
        (start(output_sample_rate=24000), Start(16000, 24000, Capabilities())),
        (start(sample_rate=8000, output_sample_rate=48000), Start(8000, 48000, Capabilities())),
        (
            start(capabilities={"playback_reports": True, "echo_cancellation": True}),
            Start(16000, 16000, Capabilities(playback_reports=True, echo_cancellation=True)),
        ),
        ('{"type": "playback", "played": 0}', Playback(0)),
        ('{"type": "playback", "played": 4800, "cleared": 3}', Playback(4800, 3)),
        ('{"type": "interrupt"}', Interrupt()),
        ('{"type": "ptt.start"}', PttStart()),
        ('{"type": "ptt.end", "extra": 1}', PttEnd()),
        ('{"type": "stop"}', Stop()),
    ],
)
def test_good_messages(text: str, message: object) -> None:
    assert parse_message(text) == message


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("not json", ErrorCode.BAD_JSON),
        ("", ErrorCode.BAD_JSON),
        ("[1, 2]", ErrorCode.BAD_JSON),
        ('"start"', ErrorCode.BAD_JSON),
        ("{}", ErrorCode.UNKNOWN_TYPE),
        ('{"type": "dance"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": 7}', ErrorCode.UNKNOWN_TYPE),
        (start(version=2), ErrorCode.UNSUPPORTED_VERSION),
        (start(version=None), ErrorCode.UNSUPPORTED_VERSION),
        (start(sample_rate=7999), ErrorCode.BAD_FIELD),
        (start(sample_rate=48001), ErrorCode.BAD_FIELD),
        (start(sample_rate="16000"), ErrorCode.BAD_FIELD),
        (start(sample_rate=16000.0), ErrorCode.BAD_FIELD),
        (start(sample_rate=True), ErrorCode.BAD_FIELD),
        (start(output_sample_rate=96000), ErrorCode.BAD_FIELD),
        (start(format="opus"), ErrorCode.BAD_FIELD),
        (start(capabilities=[]), ErrorCode.BAD_FIELD),
        (start(capabilities={"playback_reports": "yes"}), ErrorCode.BAD_FIELD),
        ('{"type": "start", "version": 1}', ErrorCode.BAD_FIELD),
        ('{"type": "playback"}', ErrorCode.BAD_FIELD),
        ('{"type": "playback", "played": -1}', ErrorCode.BAD_FIELD),
        ('{"type": "playback", "played": 1.5}', ErrorCode.BAD_FIELD),
        ('{"type": "playback", "played": 1, "cleared": "x"}', ErrorCode.BAD_FIELD),
    ],
)
def test_bad_messages_raise_their_error_code(text: str, code: ErrorCode) -> None:
    with pytest.raises(ClientMessageError) as info:
        parse_message(text)
    assert info.value.code is code
    assert str(info.value)


def test_audio_frames() -> None:
    pcm = np.array([0, 1, -1, 32767, -32768], dtype=np.int16)
    assert np.array_equal(parse_audio(pcm.astype("<i2").tobytes(), 100), pcm)
    assert parse_audio(b"", 100).size == 0
    with pytest.raises(ClientMessageError) as info:
        parse_audio(b"\x00\x01\x02", 100)
    assert info.value.code is ErrorCode.BAD_AUDIO
    with pytest.raises(ClientMessageError) as info:
        parse_audio(b"\x00" * 102, 100)
    assert info.value.code is ErrorCode.FRAME_TOO_LARGE


def test_start_comes_first_and_once() -> None:
    proto = ClientProtocol(max_frame_bytes=640)
    for frame in ('{"type": "interrupt"}', '{"type": "playback", "played": 0}'):
        with pytest.raises(ClientMessageError) as info:
            proto.text(frame)
        assert info.value.code is ErrorCode.NOT_STARTED
    with pytest.raises(ClientMessageError) as info:
        proto.binary(b"\x00\x00")
    assert info.value.code is ErrorCode.NOT_STARTED
    with pytest.raises(ClientMessageError):
        proto.text(start(sample_rate=4000))  # a refused start leaves it unstarted
    assert proto.start is None
    assert isinstance(proto.text(start()), Start)
    with pytest.raises(ClientMessageError) as info:
        proto.text(start())
    assert info.value.code is ErrorCode.ALREADY_STARTED
    assert proto.binary(b"\x00\x00").tolist() == [0]
    assert proto.text('{"type": "stop"}') == Stop()


def record(turn_id: int = 2) -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        user_text="hi",
        assistant_text="Hello.",
        heard_text="Hello.",
        interrupted=False,
        marks_ns={"speech_end": 1_000_000_000, "first_audio_sent": 1_500_000_000},
        stages_ms={"voice_to_voice": 500.0},
        budgets_broken=(BudgetBreach("voice_to_voice", 900.0, 800.0),),
        work=WorkAccount(3, 1.0, 1.0, 6, 6),
        asr_decode_ms=100.0,
        asr_speculative=True,
    )


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ev.SpeechStarted(1, 0), {"type": "speech.started", "turn_id": 1}),
        (
            ev.TranscriptPartial(1, 0, "what is", "the"),
            {"type": "transcript.partial", "turn_id": 1, "committed": "what is", "tentative": "the"},
        ),
        (ev.TranscriptFinalized(1, 0, "Hi."), {"type": "transcript.final", "turn_id": 1, "text": "Hi."}),
        (ev.AssistantTextStreamed(1, 0, " Par"), {"type": "assistant.text", "turn_id": 1, "delta": " Par"}),
        (
            ev.ReplyResumed(1, 0, "backchannel"),
            {"type": "reply.resumed", "turn_id": 1, "reason": "backchannel"},
        ),
        (
            ev.ReplyInterrupted(1, 0, "barge-in"),
            {"type": "reply.interrupted", "turn_id": 1, "reason": "barge-in"},
        ),
        (
            ev.BudgetExceeded(1, 0, "asr_final", 170.04, 150.0),
            {
                "type": "budget.exceeded",
                "turn_id": 1,
                "stage": "asr_final",
                "duration_ms": 170.0,
                "budget_ms": 150.0,
            },
        ),
        (
            ev.TurnFailed(1, 0, "reply", "LLM down", True),
            {"type": "turn.failed", "turn_id": 1, "stage": "reply", "message": "LLM down", "retryable": True},
        ),
        (ev.EndpointDetected(1, 0, 0), None),
        (ev.ReplyPaused(1, 0), None),  # the transport's audio.clear says it
    ],
)
def test_events_to_messages(event: ev.Event, expected: dict[str, Any] | None) -> None:
    assert event_message(event, origin_ns=0) == expected


def test_turn_latency_carries_the_record_relative_to_the_session_start() -> None:
    msg = event_message(ev.TurnCompleted(2, 0, record()), origin_ns=500_000_000)
    assert msg is not None and msg["type"] == "turn.latency" and msg["turn_id"] == 2
    assert msg["record"]["marks"] == {"speech_end": 500.0, "first_audio_sent": 1000.0}
    assert msg["record"]["budgets_broken"][0]["stage"] == "voice_to_voice"
    json.dumps(msg)  # JSON-ready


def test_ready_lists_every_stage_budget() -> None:
    msg = ready_message("abc", Start(16000, 24000, Capabilities()), 4096, BudgetConfig())
    assert msg["output_sample_rate"] == 24000 and msg["input_sample_rate"] == 16000
    assert set(msg["budgets"]) == {s.name for s in ALL_STAGES}
    assert msg["budgets"]["voice_to_voice"] == BudgetConfig().voice_to_voice_ms
