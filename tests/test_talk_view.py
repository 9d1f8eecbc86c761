"""The talk client's pure parts: screen updates, latency line, playout queue, device choice."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest
from test_server_protocol import record

from clients.audio_io import NO_INPUT, AudioDeviceError, Player, pick_device, wire_rate
from clients.talkview import GREEN, RED, Line, Status, TurnView, latency_line, level_meter
from voice_pipeline import cli
from voice_pipeline.wire.server_messages import from_json

RECORD = dataclasses.replace(
    record(1),
    stages_ms={"endpointing": 2.0, "asr_final": 90.0, "llm_first_token": 400.0, "voice_to_voice": 700},
)

BUDGETS = {"endpointing": 350.0, "asr_final": 150.0, "llm_first_token": 150.0, "voice_to_voice": 800.0}


def test_latency_line_names_every_stage_and_flags_the_broken_budget() -> None:
    plain = latency_line(RECORD, BUDGETS, colour=False)
    assert plain == (
        "latency: endpoint 2 ms | asr 90 ms | llm first token 400 ms (over 150) | tts first audio - "
        "| total 700 ms"
    )
    coloured = latency_line(RECORD, BUDGETS, colour=True)
    assert f"{RED}llm first token 400 ms" in coloured and f"{GREEN}asr 90 ms" in coloured


def test_turn_view_partial_then_final_then_streamed_reply_then_latency() -> None:
    view = TurnView(BUDGETS, colour=False)
    events: list[tuple[dict[str, Any], list[Line | Status]]] = [
        ({"type": "speech.started", "turn_id": 1}, []),
        (
            {"type": "transcript.partial", "turn_id": 1, "committed": "what is", "tentative": "the"},
            [Status("you: what is the")],
        ),
        (
            {"type": "transcript.final", "turn_id": 1, "text": "What is the time?"},
            [Line("you: What is the time?")],
        ),
        ({"type": "assistant.text", "turn_id": 1, "delta": " It is"}, [Status("assistant: It is")]),
        ({"type": "assistant.text", "turn_id": 1, "delta": " noon."}, [Status("assistant: It is noon.")]),
        (
            {"type": "turn.latency", "turn_id": 1, "record": RECORD.as_dict()},
            [
                Line("assistant: It is noon."),
                Line(latency_line(RECORD, BUDGETS, colour=False)),
            ],
        ),
    ]
    for obj, expected in events:
        assert view.event(from_json(obj)) == expected, obj


def test_turn_view_marks_an_interrupted_reply() -> None:
    view = TurnView({}, colour=False)
    view.event(from_json({"type": "assistant.text", "turn_id": 3, "delta": "Once upon"}))
    assert view.event(
        from_json({"type": "reply.interrupted", "turn_id": 3, "reason": "explicit interrupt"})
    ) == [Line("assistant: Once upon [interrupted: explicit interrupt]")]


def test_turn_view_shows_tool_calls_and_results_and_the_tool_stage() -> None:
    view = TurnView({"tool": 1000.0}, colour=False)
    call = {"type": "tool.call", "turn_id": 2, "call_id": "c1", "name": "get_weather",
            "arguments": '{"city":\n "Paris"}'}  # fmt: skip
    assert view.event(from_json(call)) == [Line('  -> tool get_weather({"city": "Paris"})')]
    result = {"type": "tool.result", "turn_id": 2, "call_id": "c1", "name": "get_weather",
              "output": "x" * 200, "error": None}  # fmt: skip
    assert view.event(from_json(result)) == [Line("  <- tool get_weather: " + "x" * 97 + "...")]
    failed = {**result, "output": '{"error": "timed out after 10 s"}', "error": "timed out after 10 s"}
    assert view.event(from_json(failed)) == [Line("  <- tool get_weather: failed: timed out after 10 s")]
    with_tool = dataclasses.replace(RECORD, stages_ms={**RECORD.stages_ms, "tool": 1500.0})
    assert "| tool 1500 ms (over 1000) |" in latency_line(with_tool, {"tool": 1000.0}, colour=False)
    assert "tool" not in latency_line(RECORD, BUDGETS, colour=False)  # no tool, no column


@pytest.mark.parametrize(("peak", "db"), [(1.0, "0 dB"), (0.001, "-60 dB"), (0.0, "-60 dB")])
def test_level_meter(peak: float, db: str) -> None:
    meter = level_meter(peak, width=10)
    assert meter.endswith(db) and len(meter.split("]")[0]) == 11


def test_player_plays_in_order_and_clears_one_turn() -> None:
    player = Player()
    player.add(1, np.ones(5, dtype=np.float32))
    player.add(2, np.full(5, 2.0, dtype=np.float32))
    assert player.pull(3).tolist() == [1, 1, 1]
    assert player.clear(1) == 3 and player.busy
    assert player.pull(7).tolist() == [2, 2, 2, 2, 2, 0, 0]
    assert player.played == 8 and not player.busy


DEVICES = [
    {"name": "HDMI out", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 48000.0},
    {"name": "USB mic", "max_input_channels": 1, "max_output_channels": 0, "default_samplerate": 96000.0},
]


@pytest.mark.parametrize(
    ("wanted", "kind", "expected"),
    [
        (None, "input", (1, 96000)),
        (None, "output", (0, 48000)),
        ("usb", "input", (1, 96000)),
        ("1", "input", (1, 96000)),
    ],
)
def test_pick_device(wanted: str | None, kind: str, expected: tuple[int, int]) -> None:
    assert pick_device(DEVICES, wanted, kind) == expected


def test_wire_rate_is_clamped_to_the_protocol_range() -> None:
    assert [wire_rate(r) for r in (96000, 44100, 8000, 4000)] == [48000, 44100, 8000, 8000]


def test_no_input_device_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(AudioDeviceError, match=re.escape(NO_INPUT)):
        pick_device(DEVICES[:1], None, "input")
    monkeypatch.setattr("clients.talk_tty.query_devices", lambda: DEVICES[:1])  # an output only
    assert cli.main(["talk", "--url", "ws://127.0.0.1:9/ws"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"voice-pipeline talk: error: {NO_INPUT}"
