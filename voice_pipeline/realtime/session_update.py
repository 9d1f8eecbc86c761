"""``session.update``: read into a partial update, merged into the session's config (pure).

:func:`parse_session` reads the ``session`` object of a ``session.update`` into
a :class:`SessionUpdate` holding only the fields present (``UNSET`` for the
others; ``null`` is a value for the fields the API lets clients turn off);
:func:`apply_update` merges it into a
:class:`~voice_pipeline.realtime.session_config.RealtimeSessionConfig`, raising
:class:`~voice_pipeline.realtime.errors.RealtimeClientError` (and changing
nothing) for what this server cannot do.

Accepted with no effect here, and announced as what this server does:
``model`` (the served model is fixed), OpenAI's built-in voice names (spoken
with this server's one voice), any transcription ``model`` (this server's ASR
transcribes), ``tracing`` (announced null), ``truncation: "auto"`` (oldest
turns are dropped first), ``parallel_tool_calls``, ``noise_reduction`` (announced
null: this server has no input noise filter), and the read-only ``id``,
``object`` and ``expires_at`` a client may echo from ``session.created``.
Refused with ``unsupported_value``: other voices, a speed other than 1,
idle timeouts, transcription prompts/keywords/languages other
than English, logprobs, prompt templates, reasoning settings, MCP tools,
transcription-only sessions; and any tool or forced tool choice while the model
cannot call tools (``tools_unsupported``). A ``server_vad`` object's absent
fields take this server's defaults, not the previous values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Final

from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, quote, refuse
from voice_pipeline.realtime.session_config import (
    Eagerness,
    Modality,
    RealtimeSessionConfig,
    SemanticVad,
    ServerProfile,
    ServerVad,
    Transcription,
)
from voice_pipeline.realtime.tools import (
    FunctionTool,
    ToolChoice,
    check_tools,
    parse_tool_choice,
    parse_tools,
)
from voice_pipeline.realtime.wire import Fields

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
MAX_RESPONSE_TOKENS: Final = 4096  # the API's upper bound for an integer max_output_tokens


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


# ---------------------------------------------------------------- parsing

_SESSION_KEYS = frozenset(
    {
        "type",
        "model",
        "instructions",
        "output_modalities",
        "audio",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "tracing",
        "truncation",
        "prompt",
        "include",
        "reasoning",
        "parallel_tool_calls",
    }
)
#: read-only fields of the session object a client may echo back from session.created
_SESSION_READ_ONLY = frozenset({"id", "object", "expires_at"})
_INPUT_KEYS = frozenset({"format", "transcription", "noise_reduction", "turn_detection"})
_OUTPUT_KEYS = frozenset({"format", "voice", "speed"})
_VAD_KEYS = frozenset(
    {
        "type",
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "idle_timeout_ms",
        "create_response",
        "interrupt_response",
        "eagerness",
    }
)
_TRANSCRIPTION_KEYS = frozenset({"model", "language", "languages", "prompt", "keywords", "delay"})
#: fields of the beta protocol's session, and where the GA protocol has them
_BETA_FIELDS = {
    "modalities": "use 'output_modalities'",
    "input_audio_format": "use 'audio.input.format'",
    "output_audio_format": "use 'audio.output.format'",
    "voice": "use 'audio.output.voice'",
    "turn_detection": "use 'audio.input.turn_detection'",
    "input_audio_transcription": "use 'audio.input.transcription'",
    "input_audio_noise_reduction": "use 'audio.input.noise_reduction'",
    "max_response_output_tokens": "use 'max_output_tokens'",
    "temperature": "it has no temperature",
}


def unsupported(param: str, message: str) -> Exception:
    return refuse(ErrorCode.UNSUPPORTED, message, param)


def parse_format(f: Fields, key: str) -> AudioFormat | Unset:
    fmt = f.obj(key, frozenset({"type", "rate"}))
    if fmt is None:
        return UNSET
    kind = fmt.choice("type", tuple(AudioFormat)) or AudioFormat.PCM
    rate = fmt.integer("rate", low=0, high=10**6)
    if rate is not None and (kind != AudioFormat.PCM or rate != 24000):
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f"'{fmt.param('rate')}': audio/pcm is 24000 Hz; G.711 formats have no rate field",
            fmt.param("rate"),
        )
    return AudioFormat(kind)


def parse_modalities(f: Fields) -> Modality | Unset:
    values = f.array("output_modalities", max_items=2)
    if values is None:
        return UNSET
    if not all(isinstance(v, str) for v in values):
        raise f.wrong_type("output_modalities", "an array of strings")
    if len(values) != 1 or values[0] not in tuple(Modality):
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f'\'{f.param("output_modalities")}\' must be ["audio"] or ["text"], got {quote(values)}',
            f.param("output_modalities"),
        )
    return Modality(values[0])


def parse_max_tokens(f: Fields) -> int | Unset | None:
    if not f.has("max_output_tokens") or f.is_null("max_output_tokens"):
        return UNSET
    if f.get("max_output_tokens") == "inf":
        return None
    if isinstance(f.get("max_output_tokens"), str):
        raise refuse(
            ErrorCode.INVALID_VALUE,
            f"'{f.param('max_output_tokens')}' must be 1..{MAX_RESPONSE_TOKENS} or \"inf\"",
            f.param("max_output_tokens"),
        )
    return f.integer("max_output_tokens", low=1, high=MAX_RESPONSE_TOKENS)


def parse_voice(f: Fields) -> str | Unset:
    if not f.has("voice") or f.is_null("voice"):
        return UNSET
    if isinstance(f.get("voice"), dict):
        raise unsupported(f.param("voice"), "custom voices are not supported; this server has one voice")
    voice = f.text("voice", max_chars=256)
    return UNSET if voice is None else voice


def _turn_detection(f: Fields) -> ServerVadUpdate | SemanticVad | Unset | None:
    if not f.has("turn_detection"):
        return UNSET
    td = f.obj("turn_detection", _VAD_KEYS)
    if td is None:
        return None
    kind = td.required_choice("type", ("server_vad", "semantic_vad"))
    create = td.boolean("create_response")
    interrupt = td.boolean("interrupt_response")
    if kind == "semantic_vad":
        for key in ("threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms"):
            if td.has(key):
                raise refuse(
                    ErrorCode.UNKNOWN_PARAMETER, f"'{td.param(key)}' is for server_vad", td.param(key)
                )
        eagerness = td.choice("eagerness", tuple(Eagerness)) or Eagerness.AUTO
        return SemanticVad(
            Eagerness(eagerness),
            True if create is None else create,
            True if interrupt is None else interrupt,
        )
    if td.has("eagerness"):
        raise refuse(
            ErrorCode.UNKNOWN_PARAMETER,
            f"'{td.param('eagerness')}' is for semantic_vad",
            td.param("eagerness"),
        )
    if not td.is_null("idle_timeout_ms") and td.has("idle_timeout_ms"):
        td.integer("idle_timeout_ms", low=0, high=2**31)
        raise unsupported(td.param("idle_timeout_ms"), "idle timeouts are not supported (set null)")
    threshold = td.number("threshold")
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise refuse(
            ErrorCode.INVALID_VALUE, f"'{td.param('threshold')}' must be > 0 and < 1", td.param("threshold")
        )
    return ServerVadUpdate(
        threshold=threshold,
        prefix_padding_ms=td.integer("prefix_padding_ms", low=0, high=2000),
        silence_duration_ms=td.integer("silence_duration_ms", low=32, high=10000),
        create_response=create,
        interrupt_response=interrupt,
    )


def _transcription(f: Fields) -> bool | Unset:
    if not f.has("transcription"):
        return UNSET
    tr = f.obj("transcription", _TRANSCRIPTION_KEYS)
    if tr is None:
        return False
    tr.text("model", max_chars=256)  # any model: this server's ASR transcribes
    language = tr.text("language", max_chars=16)
    if language not in (None, "", "en"):
        raise unsupported(
            tr.param("language"), f"the ASR here transcribes English only, not {quote(language)}"
        )
    for key in ("prompt", "keywords", "languages", "delay"):
        if tr.get(key) not in (None, "", []):
            raise unsupported(tr.param(key), f"transcription '{key}' is not supported")
    return True


def _audio(f: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    audio = f.obj("audio", frozenset({"input", "output"}))
    if audio is None:
        return out
    inp = audio.obj("input", _INPUT_KEYS)
    if inp is not None:
        out["input_format"] = parse_format(inp, "format")
        out["turn_detection"] = _turn_detection(inp)
        out["transcription"] = _transcription(inp)
        noise = inp.obj("noise_reduction", frozenset({"type", "strength"}))
        if noise is not None:  # accepted, not applied (announced null): Pipecat's examples set it,
            noise.choice("type", ("near_field", "far_field"))  # and Pipecat ends the session on any error
            noise.number("strength")
    output = audio.obj("output", _OUTPUT_KEYS)
    if output is not None:
        out["output_format"] = parse_format(output, "format")
        out["voice"] = parse_voice(output)
        speed = output.number("speed")
        if speed is not None and not 0.25 <= speed <= 1.5:
            raise refuse(ErrorCode.INVALID_VALUE, "'speed' must be 0.25..1.5", output.param("speed"))
        out["speed"] = UNSET if speed is None else speed
    return out


def _ignored_features(f: Fields) -> None:
    """Fields with no effect here (checked for shape), or refused unless null/empty."""
    tracing = f.get("tracing")
    if tracing is not None and tracing != "auto":
        f.obj("tracing", frozenset({"group_id", "metadata", "workflow_name"}))
    truncation = f.get("truncation")
    if truncation not in (None, "auto"):
        raise unsupported(
            f.param("truncation"), 'only truncation "auto" (oldest turns dropped first) is supported'
        )
    for key, what in (("prompt", "prompt templates"), ("reasoning", "reasoning settings")):
        if f.get(key) is not None:
            f.obj(key, frozenset({"id", "variables", "version", "effort"}))
            raise unsupported(f.param(key), f"{what} are not supported")
    include = f.array("include", max_items=4)
    if include:
        raise unsupported(f.param("include"), "logprobs are not supported")
    f.boolean("parallel_tool_calls")


def parse_session(value: Any, path: str = "session") -> SessionUpdate:
    """The ``session`` object of a session.update -> the fields it sets."""
    if not isinstance(value, dict):
        raise refuse(ErrorCode.INVALID_TYPE, f"'{path}' must be an object", path)
    for key, ga in _BETA_FIELDS.items():
        if key in value:
            raise refuse(
                ErrorCode.UNKNOWN_PARAMETER,
                f"unknown parameter '{path}.{key}': this server speaks the GA Realtime protocol ({ga})",
                f"{path}.{key}",
            )
    f = Fields(value, path, _SESSION_KEYS, _SESSION_READ_ONLY)
    if not f.has("type"):
        raise refuse(
            ErrorCode.MISSING_PARAMETER,
            f"missing required parameter '{path}.type' (\"realtime\" in the GA protocol)",
            f"{path}.type",
        )
    kind = f.text("type", required=True)
    if kind == "transcription":
        raise unsupported(f.param("type"), 'transcription-only sessions are not supported; use "realtime"')
    if kind != "realtime":
        raise refuse(ErrorCode.INVALID_VALUE, f"'{f.param('type')}' must be \"realtime\"", f.param("type"))
    _ignored_features(f)
    model = f.text("model", max_chars=256)
    instructions = f.text("instructions")
    tools = parse_tools(f)
    choice = parse_tool_choice(f)
    return SessionUpdate(
        model=UNSET if model is None else model,
        instructions=UNSET if instructions is None else instructions,
        output_modality=parse_modalities(f),
        max_output_tokens=parse_max_tokens(f),
        tools=UNSET if tools is None else tools,
        tool_choice=UNSET if choice is None else choice,
        **_audio(f),
    )


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
