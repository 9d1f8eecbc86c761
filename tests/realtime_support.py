"""Shared pieces of the Realtime protocol tests: a server profile and scripted sessions.

:func:`scripted_events` drives the pure sequencers through the lives of typical
responses (audio, text, function call; completed, cancelled, incomplete,
failed; in and out of the conversation) and of the input buffer, and returns
every server event they produced: the conformance test validates each one
against the openai SDK's models.
"""

from __future__ import annotations

from voice_pipeline.config import VADConfig
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.client_events import ConversationMode, ResponseParams
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, ProtocolError
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.input import InputSequencer
from voice_pipeline.realtime.items import FunctionCallOutput, InputText, Message, Role
from voice_pipeline.realtime.response import ResponseSequencer, resolve_response
from voice_pipeline.realtime.server_events import (
    ErrorOccurred,
    OutputAudioCleared,
    OutputAudioStarted,
    OutputAudioStopped,
    ServerEvent,
    SessionCreated,
    SessionUpdated,
    StatusReason,
    TurnLatencyMeasured,
    Usage,
)
from voice_pipeline.realtime.session_config import Modality, ServerProfile, initial_config
from voice_pipeline.realtime.session_parse import parse_session
from voice_pipeline.realtime.session_update import apply_update

PROFILE = ServerProfile(
    model="SmolLM2-135M-Instruct",
    voice="joe",
    transcription_model="whisper-tiny.en",
    language="en",
    instructions="You are a helpful voice assistant.",
    max_output_tokens=96,
    tools_supported=False,
    vad=VADConfig(),
)
TOOLS_PROFILE = ServerProfile(
    **{**{f: getattr(PROFILE, f) for f in PROFILE.__slots__}, "tools_supported": True}
)


def scripted_events() -> list[ServerEvent]:
    ids = Ids("t")
    conv = Conversation(ids)
    cfg = initial_config(PROFILE)
    out: list[ServerEvent] = [SessionCreated(cfg, "sess_t")]
    for update in (
        {"type": "realtime", "output_modalities": ["text"], "max_output_tokens": 50},
        {
            "type": "realtime",
            "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}},
        },
        {"type": "realtime", "audio": {"input": {"turn_detection": None, "transcription": None}}},
        {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcma"}}}},
    ):
        out.append(SessionUpdated(apply_update(cfg, parse_session(update), PROFILE), "sess_t"))

    inp = InputSequencer(conv)
    inp.appended(1500)
    out += inp.speech_started(120)
    out += inp.speech_stopped(1400)
    user = inp.pending_item_id
    assert user is not None
    out += inp.commit()
    out += inp.transcript_delta(user, "What is")
    out += inp.transcript_completed(user, "What is the time?", 1.3)
    out += inp.transcript_failed(
        user, ProtocolError(ErrorCode.INVALID_VALUE, "no speech", type=ErrorType.SERVER)
    )
    out += inp.clear()

    audio = ResponseSequencer(resolve_response(ResponseParams(), cfg, PROFILE), ids, conv)
    out += audio.created()
    out += audio.audio(b"\x00\x00" * 240, 240, "It is noon.")
    out += audio.audio(b"\x00\x00" * 240, 240)
    out += [OutputAudioStarted(audio.response_id)]
    out += audio.finish(Usage(40, 6))
    out += [OutputAudioStopped(audio.response_id)]
    out += [TurnLatencyMeasured({"turn_id": 1, "stages_ms": {"asr_final": 80.0}}, audio.response_id, user)]

    cut = ResponseSequencer(resolve_response(ResponseParams(metadata=(("k", "v"),)), cfg, PROFILE), ids, conv)
    out += cut.created()
    out += cut.audio(b"\x01\x00" * 480, 480, "Let me tell you a long story.")
    out += [OutputAudioCleared(cut.response_id)]
    out += cut.cancel(StatusReason.TURN_DETECTED, Usage(50, 9))
    out += conv.truncate(cut.item_ids[0], 0, 10)

    text_params = ResponseParams(conversation=ConversationMode.NONE, output_modality=Modality.TEXT, input=())
    text = ResponseSequencer(resolve_response(text_params, cfg, PROFILE), ids, conv)
    out += text.created() + text.text("A summary") + text.incomplete(Usage(12, 50))

    tools_cfg = apply_update(
        cfg,
        parse_session(
            {"type": "realtime", "tools": [{"type": "function", "name": "clock", "parameters": {}}]}
        ),
        TOOLS_PROFILE,
    )
    call = ResponseSequencer(resolve_response(ResponseParams(), tools_cfg, TOOLS_PROFILE), ids, conv)
    out += call.created() + call.function_call("clock") + call.arguments('{"tz":') + call.arguments('"UTC"}')
    out += call.finish(Usage(30, 8))
    out += conv.create(FunctionCallOutput("", "call_x", '{"time": "12:00"}'))
    out += conv.create(Message("", Role.USER, (InputText("Thanks!"),)), "root")
    out += conv.retrieve(user)

    failed = ResponseSequencer(resolve_response(ResponseParams(), cfg, PROFILE), ids, conv)
    out += failed.created()
    out += failed.fail(ProtocolError(ErrorCode.INVALID_VALUE, "the LLM failed", type=ErrorType.SERVER))
    out += conv.delete(user)
    out.append(
        ErrorOccurred(ProtocolError(ErrorCode.UNKNOWN_PARAMETER, "unknown parameter 'x'", "x", "evt_1"))
    )
    return out


AUDIO_FORMATS = tuple(AudioFormat)
