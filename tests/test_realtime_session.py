"""The Realtime session configuration: session.update merged into the effective config,
what session.created announces, the mapping onto the pipeline's VAD and end-of-turn policy,
and per-response overrides (table-driven, no I/O)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from realtime_support import PROFILE, TOOLS_PROFILE

from llm.base import ToolMode, ToolOffer, ToolSpec
from voice_pipeline.config import Config, VADConfig, validate
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.client_events import ConversationMode, ResponseParams
from voice_pipeline.realtime.errors import ErrorCode, RealtimeClientError
from voice_pipeline.realtime.response import resolve_response
from voice_pipeline.realtime.session_config import (
    Eagerness,
    Modality,
    SemanticVad,
    ServerVad,
    Transcription,
    eagerness_max_wait_ms,
    initial_config,
    profile_from_config,
    session_json,
    vad_config,
)
from voice_pipeline.realtime.session_parse import parse_session
from voice_pipeline.realtime.session_update import apply_update
from voice_pipeline.realtime.tools import (
    FunctionTool,
    ToolChoiceFunction,
    ToolChoiceMode,
    chat_template_supports_tools,
    tool_offer,
)

DEFAULT = initial_config(PROFILE)
CLOCK = {"type": "function", "name": "clock", "description": "the time", "parameters": {"type": "object"}}


def update(session: dict[str, Any], cfg: Any = DEFAULT, profile: Any = PROFILE) -> Any:
    return apply_update(cfg, parse_session({"type": "realtime", **session}), profile)


def test_initial_config_is_the_server_profile() -> None:
    assert DEFAULT.model == "SmolLM2-135M-Instruct" and DEFAULT.voice == "joe"
    assert DEFAULT.instructions == PROFILE.instructions
    assert (DEFAULT.input_format, DEFAULT.output_format) == (AudioFormat.PCM, AudioFormat.PCM)
    assert DEFAULT.output_modality is Modality.AUDIO
    assert DEFAULT.turn_detection == ServerVad(0.5, 150, 250, True, True)  # VADConfig's defaults
    assert DEFAULT.transcription == Transcription("whisper-tiny.en", "en")
    assert (
        DEFAULT.max_output_tokens is None
        and DEFAULT.tools == ()
        and DEFAULT.tool_choice is ToolChoiceMode.AUTO
    )


UPDATES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("instructions", {"instructions": "Speak like a pirate."}, {"instructions": "Speak like a pirate."}),
    ("instructions cleared", {"instructions": ""}, {"instructions": ""}),
    ("text only", {"output_modalities": ["text"]}, {"output_modality": Modality.TEXT}),
    (
        "G.711 both ways",
        {
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}},
                "output": {"format": {"type": "audio/pcma"}},
            }
        },
        {"input_format": AudioFormat.PCMU, "output_format": AudioFormat.PCMA},
    ),
    (
        "server_vad: absent fields take the server's defaults",
        {"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 600}}}},
        {"turn_detection": ServerVad(0.5, 150, 600, True, True)},
    ),
    (
        "server_vad: all fields",
        {
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "server_vad",
                        "threshold": 0.7,
                        "prefix_padding_ms": 300,
                        "silence_duration_ms": 500,
                        "create_response": False,
                        "interrupt_response": False,
                        "idle_timeout_ms": None,
                    }
                }
            }
        },
        {"turn_detection": ServerVad(0.7, 300, 500, False, False)},
    ),
    (
        "semantic_vad",
        {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}},
        {"turn_detection": SemanticVad(Eagerness.AUTO, True, True)},
    ),
    ("manual turns", {"audio": {"input": {"turn_detection": None}}}, {"turn_detection": None}),
    ("no transcription events", {"audio": {"input": {"transcription": None}}}, {"transcription": None}),
    (
        "any transcription model: this server's ASR",
        {"audio": {"input": {"transcription": {"model": "gpt-4o-transcribe", "language": "en"}}}},
        {"transcription": Transcription("whisper-tiny.en", "en")},
    ),
    ("an OpenAI voice: this server's voice", {"audio": {"output": {"voice": "alloy"}}}, {"voice": "joe"}),
    ("the server's voice", {"audio": {"output": {"voice": "joe", "speed": 1.0}}}, {"voice": "joe"}),
    ("a model name: ignored", {"model": "gpt-realtime-2.1"}, {"model": "SmolLM2-135M-Instruct"}),
    ("max tokens", {"max_output_tokens": 40}, {"max_output_tokens": 40}),
    ("max tokens inf", {"max_output_tokens": "inf"}, {"max_output_tokens": None}),
    ("no tools", {"tools": [], "tool_choice": "none"}, {"tools": (), "tool_choice": ToolChoiceMode.NONE}),
    (
        "nulls change nothing",
        {"instructions": None, "tracing": None, "prompt": None, "tool_choice": None},
        {},
    ),
]


@pytest.mark.parametrize(("name", "session", "changes"), UPDATES, ids=[u[0] for u in UPDATES])
def test_update(name: str, session: dict[str, Any], changes: dict[str, Any]) -> None:
    assert update(session) == replace(DEFAULT, **changes)


def test_updates_accumulate_and_absent_fields_keep_their_value() -> None:
    cfg = update({"instructions": "A", "output_modalities": ["text"]})
    cfg = update({"audio": {"input": {"turn_detection": None}}}, cfg)
    assert (cfg.instructions, cfg.output_modality, cfg.turn_detection) == ("A", Modality.TEXT, None)


REFUSED: list[tuple[str, dict[str, Any], Any, ErrorCode, str]] = [
    (
        "unknown voice",
        {"audio": {"output": {"voice": "bob"}}},
        PROFILE,
        ErrorCode.UNSUPPORTED,
        "session.audio.output.voice",
    ),
    (
        "speed",
        {"audio": {"output": {"speed": 1.2}}},
        PROFILE,
        ErrorCode.UNSUPPORTED,
        "session.audio.output.speed",
    ),
    ("tools with SmolLM2, auto", {"tools": [CLOCK]}, PROFILE, ErrorCode.TOOLS_UNSUPPORTED, "session.tools"),
    (
        "tools with SmolLM2, auto said",
        {"tools": [CLOCK], "tool_choice": "auto"},
        PROFILE,
        ErrorCode.TOOLS_UNSUPPORTED,
        "session.tools",
    ),
    (
        "required with SmolLM2, no tools",
        {"tool_choice": "required"},
        PROFILE,
        ErrorCode.INVALID_VALUE,
        "session.tool_choice",
    ),
    (
        "required, no tools",
        {"tool_choice": "required"},
        TOOLS_PROFILE,
        ErrorCode.INVALID_VALUE,
        "session.tool_choice",
    ),
    (
        "choice of an unknown tool",
        {"tools": [CLOCK], "tool_choice": {"type": "function", "name": "weather"}},
        TOOLS_PROFILE,
        ErrorCode.INVALID_VALUE,
        "session.tool_choice",
    ),
]


@pytest.mark.parametrize(
    ("name", "session", "profile", "code", "param"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_refused(name: str, session: dict[str, Any], profile: Any, code: ErrorCode, param: str) -> None:
    with pytest.raises(RealtimeClientError) as info:
        update(session, initial_config(profile), profile)
    assert (info.value.error.code, info.value.error.param) == (code, param)


def test_tools_error_names_the_model_and_the_fix() -> None:
    with pytest.raises(RealtimeClientError) as info:
        update({"tools": [CLOCK]})
    assert (
        "SmolLM2-135M-Instruct" in info.value.error.message
        and "cannot call tools" in info.value.error.message
    )


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "name": "clock"}, "none"], ids=["required", "named", "none"]
)
def test_a_forced_call_or_none_is_accepted_with_any_model(choice: Any) -> None:
    """Structured outputs make any model write a forced call; "none" offers no tool."""
    cfg = update({"tools": [CLOCK], "tool_choice": choice})
    assert cfg.tools == (FunctionTool("clock", "the time", '{"type":"object"}'),)
    offer = tool_offer(cfg.tools, cfg.tool_choice)
    if choice == "none":
        assert offer is None
    else:
        assert offer == ToolOffer(
            (ToolSpec("clock", "the time", '{"type":"object"}'),),
            ToolMode.REQUIRED,
            None if choice == "required" else "clock",
        )


def test_tools_error_says_how_to_force_a_call() -> None:
    with pytest.raises(RealtimeClientError) as info:
        update({"tools": [CLOCK]})
    assert '"required"' in info.value.error.message and '"auto"' in info.value.error.message


def test_tools_with_a_model_that_can_call_them() -> None:
    cfg = update(
        {"tools": [CLOCK], "tool_choice": {"type": "function", "name": "clock"}}, profile=TOOLS_PROFILE
    )
    assert cfg.tools == (FunctionTool("clock", "the time", '{"type":"object"}'),)
    assert cfg.tool_choice == ToolChoiceFunction("clock") and cfg.tools[0].parameters == {"type": "object"}


def test_a_refused_update_changes_nothing() -> None:
    with pytest.raises(RealtimeClientError):
        update({"instructions": "changed", "audio": {"output": {"voice": "bob"}}})
    assert DEFAULT.instructions == PROFILE.instructions


def test_session_json_is_the_whole_effective_config() -> None:
    cfg = update(
        {
            "instructions": "Hi",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcmu"},
                    "turn_detection": {"type": "semantic_vad", "eagerness": "high"},
                },
                "output": {"voice": "marin"},
            },
            "max_output_tokens": 64,
        }
    )
    assert session_json(cfg, "sess_1") == {
        "type": "realtime",
        "object": "realtime.session",
        "id": "sess_1",
        "model": "SmolLM2-135M-Instruct",
        "output_modalities": ["audio"],
        "instructions": "Hi",
        "audio": {
            "input": {
                "format": {"type": "audio/pcmu"},
                "transcription": {"model": "whisper-tiny.en", "language": "en"},
                "noise_reduction": None,
                "turn_detection": {
                    "type": "semantic_vad",
                    "eagerness": "high",
                    "create_response": True,
                    "interrupt_response": True,
                },
            },
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "joe", "speed": 1.0},
        },
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": 64,
        "tracing": None,
        "truncation": "auto",
        "prompt": None,
    }


@pytest.mark.parametrize(
    ("td", "expected"),
    [
        (
            ServerVad(0.5, 150, 250),
            {"threshold": 0.5, "neg_threshold": 0.35, "pre_roll_ms": 150, "end_silence_ms": 250},
        ),
        (
            ServerVad(0.8, 300, 500),
            {"threshold": 0.8, "neg_threshold": 0.65, "pre_roll_ms": 300, "end_silence_ms": 500},
        ),
        (
            ServerVad(0.1, 0, 32),
            {"threshold": 0.1, "neg_threshold": 0.01, "pre_roll_ms": 0, "end_silence_ms": 32},
        ),
    ],
)
def test_server_vad_maps_onto_the_vad_config(td: ServerVad, expected: dict[str, Any]) -> None:
    vad = vad_config(VADConfig(), td)
    got = {k: getattr(vad, k) for k in expected}
    assert got == pytest.approx(expected)
    assert vad.engine == "silero" and vad.min_speech_ms == VADConfig().min_speech_ms
    validate(Config(vad=vad))  # a valid VAD config for the pipeline


@pytest.mark.parametrize(
    ("eagerness", "ms"),
    [(Eagerness.LOW, 8000), (Eagerness.MEDIUM, 4000), (Eagerness.HIGH, 2000), (Eagerness.AUTO, 4000)],
)
def test_eagerness_is_the_longest_wait(eagerness: Eagerness, ms: int) -> None:
    assert eagerness_max_wait_ms(eagerness) == ms


def test_auto_eagerness_can_mean_the_servers_own_wait() -> None:
    assert eagerness_max_wait_ms(Eagerness.AUTO, auto_ms=2000) == 2000
    assert eagerness_max_wait_ms(Eagerness.LOW, auto_ms=2000) == 8000


def test_the_sdk_documents_these_waits() -> None:
    import inspect

    from openai.types.realtime import realtime_audio_input_turn_detection as sdk

    doc = " ".join(inspect.getsource(sdk.SemanticVad).split())  # the docstring under ``eagerness``
    assert "max timeouts of 8s, 4s, and 2s" in doc and "equivalent to `medium`" in doc


def test_reply_tokens_never_exceed_the_server_cap() -> None:
    assert DEFAULT.reply_tokens(96) == 96
    assert replace(DEFAULT, max_output_tokens=40).reply_tokens(96) == 40
    assert replace(DEFAULT, max_output_tokens=4000).reply_tokens(96) == 96


def test_chat_template_tool_support() -> None:
    smollm2 = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + message['content']}}{% endfor %}"
    )
    qwen = "{%- if tools %}{{- '<tools>' }}{% for tool in tools %}{{ tool | tojson }}{% endfor %}{%- endif %}"
    assert not chat_template_supports_tools(smollm2) and chat_template_supports_tools(qwen)


# ---------------------------------------------------------------- per response


def test_response_settings_default_to_the_session() -> None:
    cfg = update({"instructions": "S", "max_output_tokens": 30, "output_modalities": ["text"]})
    settings = resolve_response(ResponseParams(), cfg, PROFILE)
    assert (settings.instructions, settings.max_output_tokens, settings.output_modality) == (
        "S",
        30,
        Modality.TEXT,
    )
    assert settings.conversation is ConversationMode.AUTO and settings.input is None


def test_response_overrides() -> None:
    params = ResponseParams(
        conversation=ConversationMode.NONE,
        instructions="Only this once.",
        output_modality=Modality.TEXT,
        max_output_tokens=None,
        voice="cedar",
        metadata=(("k", "v"),),
    )
    s = resolve_response(params, DEFAULT, PROFILE)
    assert (s.instructions, s.output_modality, s.max_output_tokens, s.voice) == (
        "Only this once.",
        Modality.TEXT,
        None,
        "joe",
    )
    assert s.conversation is ConversationMode.NONE and s.metadata == (("k", "v"),)


@pytest.mark.parametrize(
    ("params", "code", "param"),
    [
        (
            ResponseParams(output_format=AudioFormat.PCMU),
            ErrorCode.UNSUPPORTED,
            "response.audio.output.format",
        ),
        (ResponseParams(voice="bob"), ErrorCode.UNSUPPORTED, "response.audio.output.voice"),
        (ResponseParams(tools=(FunctionTool("f", "", "{}"),)), ErrorCode.TOOLS_UNSUPPORTED, "response.tools"),
    ],
)
def test_response_refused(params: ResponseParams, code: ErrorCode, param: str) -> None:
    with pytest.raises(RealtimeClientError) as info:
        resolve_response(params, DEFAULT, PROFILE)
    assert (info.value.error.code, info.value.error.param) == (code, param)


def test_profile_from_the_project_config() -> None:
    cfg = Config()
    profile = profile_from_config(cfg, model="SmolLM2-135M-Instruct", voice="joe", tools_supported=False)
    assert profile == PROFILE.__class__(
        model="SmolLM2-135M-Instruct",
        voice="joe",
        transcription_model="whisper-tiny.en",
        language="en",
        instructions=cfg.dialogue.system_prompt,
        max_output_tokens=cfg.llm.max_tokens,
        tools_supported=False,
        vad=cfg.vad,
        interrupt_response=True,
        semantic=True,
    )
    # the server runs its semantic end-of-turn policy: a new session says so
    assert initial_config(profile).turn_detection == SemanticVad(Eagerness.AUTO, True, True)
