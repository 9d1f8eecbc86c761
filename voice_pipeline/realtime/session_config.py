"""The Realtime session's configuration: typed, and announced back (pure).

:class:`RealtimeSessionConfig` is the effective configuration of one session;
:func:`initial_config` makes it from the :class:`ServerProfile` (what this
server is: model, voice, VAD defaults, ...), and :func:`session_json` is the
``session`` object of ``session.created`` / ``session.updated``: always the
whole effective config. ``session.update`` is read by
:mod:`voice_pipeline.realtime.session_parse` and merged by
:mod:`voice_pipeline.realtime.session_update`.

Mapping onto the pipeline: ``server_vad`` -> :func:`vad_config` (the VAD's
threshold, pre-roll and end-of-turn silence; silence alone ends a turn, as on
OpenAI's server); ``semantic_vad`` -> this server's semantic end-of-turn policy
with :func:`eagerness_max_wait_ms` as its longest wait (a new session announces
``semantic_vad`` / ``auto`` when the server runs that policy: then it behaves as
``/ws`` does); ``turn_detection: null`` -> manual commits (the client commits the
input audio and asks for responses).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Final

from voice_pipeline.config import BargeInConfig, Config, TurnConfig, VADConfig
from voice_pipeline.conversation.steering import ReplyOptions
from voice_pipeline.realtime.audio import AudioFormat, format_json
from voice_pipeline.realtime.tools import (
    FunctionTool,
    ToolChoice,
    ToolChoiceMode,
    tool_choice_json,
    tool_json,
    tool_offer,
)
from voice_pipeline.realtime.wire import Json
from voice_pipeline.turntaking.messages import Detection, TurnOptions


class Modality(enum.StrEnum):
    AUDIO = "audio"
    TEXT = "text"


class Eagerness(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class ServerVad:
    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool = True
    interrupt_response: bool = True


@dataclass(frozen=True, slots=True)
class SemanticVad:
    eagerness: Eagerness = Eagerness.AUTO
    create_response: bool = True
    interrupt_response: bool = True


#: None = no turn detection: the client commits the input buffer and asks for responses
TurnDetection = ServerVad | SemanticVad | None


@dataclass(frozen=True, slots=True)
class Transcription:
    model: str
    language: str


@dataclass(frozen=True, slots=True)
class ServerProfile:
    """What this server is; session.created announces it."""

    model: str
    voice: str
    transcription_model: str
    language: str
    instructions: str
    #: the cap on a reply's tokens (``llm.max_tokens``); "inf" means this much
    max_output_tokens: int
    #: the model's chat template can call tools (SmolLM2-135M's cannot)
    tools_supported: bool
    #: the VAD settings server_vad's defaults come from
    vad: VADConfig
    #: barge-in on: user speech cancels a response (server_vad's interrupt_response default)
    interrupt_response: bool = True
    #: the server ends turns by its semantic end-of-turn policy (``turn.semantic``): a new
    #: session announces ``semantic_vad`` with eagerness ``auto`` (= as this server is set up)
    semantic: bool = False

    def server_vad(self) -> ServerVad:
        return ServerVad(
            threshold=self.vad.threshold,
            prefix_padding_ms=self.vad.pre_roll_ms,
            silence_duration_ms=self.vad.end_silence_ms,
            create_response=True,
            interrupt_response=self.interrupt_response,
        )


@dataclass(frozen=True, slots=True)
class RealtimeSessionConfig:
    model: str
    instructions: str
    output_modality: Modality
    input_format: AudioFormat
    output_format: AudioFormat
    turn_detection: TurnDetection
    #: None = no ``conversation.item.input_audio_transcription.*`` events (the ASR still runs)
    transcription: Transcription | None
    voice: str
    #: None = "inf": up to the server's cap
    max_output_tokens: int | None
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = ToolChoiceMode.AUTO
    speed: float = 1.0

    def reply_tokens(self, server_cap: int) -> int:
        """The reply's token limit: the session's, never above the server's cap."""
        return server_cap if self.max_output_tokens is None else min(self.max_output_tokens, server_cap)


def profile_from_config(cfg: Config, *, model: str, voice: str, tools_supported: bool) -> ServerProfile:
    """This server's profile: ``model`` and ``voice`` as announced (e.g. the LLM's folder name
    and the TTS engine's ``voice``), ``tools_supported`` from the model's chat template
    (:func:`voice_pipeline.realtime.tools.chat_template_supports_tools`)."""
    return ServerProfile(
        model=model,
        voice=voice,
        transcription_model=PurePath(cfg.asr.model_path).name if cfg.asr.model_path else "whisper-tiny.en",
        language=cfg.asr.language,
        instructions=cfg.dialogue.system_prompt,
        max_output_tokens=cfg.llm.max_tokens,
        tools_supported=tools_supported,
        vad=cfg.vad,
        interrupt_response=cfg.barge_in.enabled,
        semantic=cfg.turn.semantic,
    )


def initial_config(profile: ServerProfile) -> RealtimeSessionConfig:
    return RealtimeSessionConfig(
        model=profile.model,
        instructions=profile.instructions,
        output_modality=Modality.AUDIO,
        input_format=AudioFormat.PCM,
        output_format=AudioFormat.PCM,
        turn_detection=(
            SemanticVad(Eagerness.AUTO, True, profile.interrupt_response)
            if profile.semantic
            else profile.server_vad()
        ),
        transcription=Transcription(profile.transcription_model, profile.language),
        voice=profile.voice,
        max_output_tokens=None,
    )


# ---------------------------------------------------------------- mapping and JSON


def vad_config(base: VADConfig, td: ServerVad) -> VADConfig:
    """The pipeline's VAD settings for ``server_vad``: its threshold (the hysteresis gap of
    ``base`` kept below it), ``prefix_padding_ms`` as the pre-roll and ``silence_duration_ms``
    as the end-of-turn silence."""
    gap = base.threshold - base.neg_threshold
    return replace(
        base,
        threshold=td.threshold,
        neg_threshold=max(0.01, min(td.threshold, td.threshold - gap)),
        pre_roll_ms=td.prefix_padding_ms,
        end_silence_ms=td.silence_duration_ms,
    )


#: OpenAI's documented longest waits of semantic_vad ("auto" is "medium" on OpenAI's server)
_EAGERNESS_MAX_WAIT_MS: Final = {Eagerness.LOW: 8000, Eagerness.MEDIUM: 4000, Eagerness.HIGH: 2000}


def eagerness_max_wait_ms(eagerness: Eagerness, *, auto_ms: int = 4000) -> int:
    """Maps semantic_vad's eagerness to the semantic end-of-turn policy's longest wait (ms)
    for the user to go on after a pause (``turn.incomplete_silence_ms``): low 8 s, medium
    4 s, high 2 s -- the timeouts the openai SDK documents for ``SemanticVad.eagerness`` --
    and auto ``auto_ms``: OpenAI's auto is medium; pass this server's configured wait to
    let auto mean "as the server is set up"."""
    return auto_ms if eagerness is Eagerness.AUTO else _EAGERNESS_MAX_WAIT_MS[eagerness]


def turn_detection_json(td: TurnDetection) -> Json | None:
    match td:
        case ServerVad():
            return {
                "type": "server_vad",
                "threshold": td.threshold,
                "prefix_padding_ms": td.prefix_padding_ms,
                "silence_duration_ms": td.silence_duration_ms,
                "idle_timeout_ms": None,
                "create_response": td.create_response,
                "interrupt_response": td.interrupt_response,
            }
        case SemanticVad():
            return {
                "type": "semantic_vad",
                "eagerness": str(td.eagerness),
                "create_response": td.create_response,
                "interrupt_response": td.interrupt_response,
            }
        case None:
            return None


def session_json(cfg: RealtimeSessionConfig, session_id: str) -> Json:
    """The ``session`` of session.created / session.updated: the whole effective config."""
    tr = cfg.transcription
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": cfg.model,
        "output_modalities": [str(cfg.output_modality)],
        "instructions": cfg.instructions,
        "audio": {
            "input": {
                "format": format_json(cfg.input_format),
                "transcription": None if tr is None else {"model": tr.model, "language": tr.language},
                "noise_reduction": None,
                "turn_detection": turn_detection_json(cfg.turn_detection),
            },
            "output": {"format": format_json(cfg.output_format), "voice": cfg.voice, "speed": cfg.speed},
        },
        "tools": [tool_json(t) for t in cfg.tools],
        "tool_choice": tool_choice_json(cfg.tool_choice),
        "max_output_tokens": "inf" if cfg.max_output_tokens is None else cfg.max_output_tokens,
        "tracing": None,
        "truncation": "auto",
        "prompt": None,
    }


# ---------------------------------------------------------------- steering the session


@dataclass(frozen=True, slots=True)
class SessionBase:
    """What a realtime session takes of the server's config: the turn-taking sections its
    settings are applied onto (:func:`steering`), the rate its input audio is decoded to,
    and the token budget of the history its requests are sent with."""

    vad: VADConfig
    turn: TurnConfig
    barge_in: BargeInConfig
    pipeline_rate_hz: int  # audio.pipeline_rate_hz
    history_max_tokens: int  # dialogue.history_max_tokens

    @classmethod
    def of(cls, cfg: Config) -> SessionBase:
        a, d = cfg.audio, cfg.dialogue
        return cls(cfg.vad, cfg.turn, cfg.barge_in, a.pipeline_rate_hz, d.history_max_tokens)


@dataclass(frozen=True, slots=True)
class Steering:
    """What a realtime config asks of the session (``Session.configure``'s arguments)."""

    vad: VADConfig
    turn: TurnConfig
    barge_in: BargeInConfig
    options: TurnOptions
    reply: ReplyOptions


def steering(cfg: RealtimeSessionConfig, base: SessionBase) -> Steering:
    """``server_vad``: the VAD's settings, silence alone ends a turn; ``semantic_vad``: this
    server's end-of-turn policy, eagerness its longest wait; ``None``: manual turns, never
    answered by themselves. ``interrupt_response`` turns barge-in off (never on if the
    server has it off); ``create_response`` the automatic replies, which are offered the
    session's tools."""
    reply = ReplyOptions(
        speak=cfg.output_modality is Modality.AUDIO,
        max_tokens=cfg.max_output_tokens,
        tools=tool_offer(cfg.tools, cfg.tool_choice),
    )
    td = cfg.turn_detection
    if td is None:
        return Steering(base.vad, base.turn, base.barge_in, TurnOptions(Detection.MANUAL, False), reply)
    barge_in = replace(base.barge_in, enabled=base.barge_in.enabled and td.interrupt_response)
    options = TurnOptions(Detection.VAD, td.create_response)
    if isinstance(td, ServerVad):
        return Steering(
            vad_config(base.vad, td), replace(base.turn, semantic=False), barge_in, options, reply
        )
    assert isinstance(td, SemanticVad)
    longest = max(
        base.turn.unsure_silence_ms,
        eagerness_max_wait_ms(td.eagerness, auto_ms=base.turn.incomplete_silence_ms),
    )
    # the wait on the sound alone keeps its share of the longest one (low eagerness: 6 s of 8)
    sound = base.turn.sound_silence_ms * longest // base.turn.incomplete_silence_ms
    stated = base.turn.statement_silence_ms  # kept within the longest wait too
    statement = None if stated is None else min(stated, longest)
    turn = replace(
        base.turn,
        semantic=True,
        incomplete_silence_ms=longest,
        sound_silence_ms=sound,
        statement_silence_ms=statement,
    )
    return Steering(base.vad, turn, barge_in, options, reply)
