"""``session.update`` as a partial update, and its merge into the session's config (pure).

A :class:`SessionUpdate` holds only the fields a ``session.update`` carried (``UNSET``
for the others; ``null`` is a value for the fields the API lets clients turn off);
:func:`~voice_pipeline.realtime.session_parse.parse_session` reads it from the event's
``session`` object. :func:`apply_update` merges it into a
:class:`~voice_pipeline.realtime.session_config.RealtimeSessionConfig`, raising
:class:`~voice_pipeline.realtime.errors.RealtimeClientError` (and changing
nothing) for what this server cannot do: voices other than its own and OpenAI's
built-in names (spoken with this server's one voice) and a speed other than 1
(``unsupported_value``); any tool or forced tool choice while the model cannot call
tools (``tools_unsupported``). A ``server_vad`` object's absent fields take this
server's defaults, not the previous values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Final

from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, quote, refuse
from voice_pipeline.realtime.session_config import (
    Modality,
    RealtimeSessionConfig,
    SemanticVad,
    ServerProfile,
    ServerVad,
    Transcription,
)
from voice_pipeline.realtime.tools import FunctionTool, ToolChoice, check_tools

OPENAI_VOICES: Final = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)


class Unset(enum.Enum):
    """A field absent from an update (distinct from ``null``, which some fields accept)."""

    UNSET = 0


UNSET: Final = Unset.UNSET


@dataclass(frozen=True, slots=True)
class ServerVadUpdate:
    """``server_vad`` as sent: None = this server's default."""

    threshold: float | None = None
    prefix_padding_ms: int | None = None
    silence_duration_ms: int | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """The fields a ``session.update`` carried (``UNSET``: absent, keep the current value)."""

    model: str | Unset = UNSET
    instructions: str | Unset = UNSET
    output_modality: Modality | Unset = UNSET
    input_format: AudioFormat | Unset = UNSET
    output_format: AudioFormat | Unset = UNSET
    turn_detection: ServerVadUpdate | SemanticVad | Unset | None = UNSET
    #: True: a transcription object (events on); False: ``null`` (events off)
    transcription: bool | Unset = UNSET
    voice: str | Unset = UNSET
    speed: float | Unset = UNSET
    max_output_tokens: int | Unset | None = UNSET
    tools: tuple[FunctionTool, ...] | Unset = UNSET
    tool_choice: ToolChoice | Unset = UNSET


def unsupported(param: str, message: str) -> Exception:
    return refuse(ErrorCode.UNSUPPORTED, message, param)


# ---------------------------------------------------------------- merging


def check_voice(voice: str, profile: ServerProfile, param: str) -> str:
    """The voice spoken for a requested name: this server's voice (OpenAI names map onto it)."""
    if voice == profile.voice or voice in OPENAI_VOICES:
        return profile.voice
    raise unsupported(param, f"unknown voice {quote(voice)}; this server speaks with {profile.voice!r}")


def check_speed(speed: float, param: str) -> float:
    if speed != 1.0:
        raise unsupported(param, "only speed 1.0 is supported")
    return speed


def _merge_vad(update: ServerVadUpdate, profile: ServerProfile) -> ServerVad:
    """server_vad as sent, its absent fields from this server's defaults (not the previous ones)."""
    base = profile.server_vad()
    return ServerVad(
        threshold=base.threshold if update.threshold is None else update.threshold,
        prefix_padding_ms=base.prefix_padding_ms
        if update.prefix_padding_ms is None
        else update.prefix_padding_ms,
        silence_duration_ms=(
            base.silence_duration_ms if update.silence_duration_ms is None else update.silence_duration_ms
        ),
        create_response=base.create_response if update.create_response is None else update.create_response,
        interrupt_response=(
            base.interrupt_response if update.interrupt_response is None else update.interrupt_response
        ),
    )


def apply_update(
    cfg: RealtimeSessionConfig, update: SessionUpdate, profile: ServerProfile
) -> RealtimeSessionConfig:
    """``cfg`` with ``update`` applied; nothing changes if any field is refused."""
    changes: dict[str, Any] = {}
    if not isinstance(update.instructions, Unset):
        changes["instructions"] = update.instructions
    for name in ("output_modality", "input_format", "output_format", "max_output_tokens"):
        value = getattr(update, name)
        if not isinstance(value, Unset):
            changes[name] = value
    match update.turn_detection:
        case ServerVadUpdate() as vad:
            changes["turn_detection"] = _merge_vad(vad, profile)
        case SemanticVad() | None as td:
            changes["turn_detection"] = td
    if not isinstance(update.transcription, Unset):
        on = update.transcription
        changes["transcription"] = (
            Transcription(profile.transcription_model, profile.language) if on else None
        )
    if not isinstance(update.voice, Unset):
        changes["voice"] = check_voice(update.voice, profile, "session.audio.output.voice")
    if not isinstance(update.speed, Unset):
        changes["speed"] = check_speed(update.speed, "session.audio.output.speed")
    tools = cfg.tools if isinstance(update.tools, Unset) else update.tools
    choice = cfg.tool_choice if isinstance(update.tool_choice, Unset) else update.tool_choice
    check_tools(tools, choice, profile.tools_supported, profile.model, "session")
    return replace(cfg, tools=tools, tool_choice=choice, **changes)
