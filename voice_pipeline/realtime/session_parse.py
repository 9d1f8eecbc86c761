"""``session.update``: its ``session`` object read into a
:class:`~voice_pipeline.realtime.session_update.SessionUpdate` (pure).

:func:`parse_session` checks the shape of every field and keeps those present; it
raises :class:`~voice_pipeline.realtime.errors.RealtimeClientError` for a field
this server cannot read or use. The readers of the fields ``response.create``'s
``response`` object shares (audio format, output modalities, max output tokens,
voice) serve :mod:`.client_events` too. Merging the update into the session's
config is :func:`~voice_pipeline.realtime.session_update.apply_update`.

Accepted with no effect here, and announced as what this server does:
``model`` (the served model is fixed), OpenAI's built-in voice names (spoken
with this server's one voice), any transcription ``model`` (this server's ASR
transcribes), ``tracing`` (announced null), ``truncation: "auto"`` (oldest
turns are dropped first), ``parallel_tool_calls``, ``noise_reduction`` (announced
null: this server has no input noise filter), and the read-only ``id``,
``object`` and ``expires_at`` a client may echo from ``session.created``.
Refused with ``unsupported_value``: custom voice objects, idle timeouts,
transcription prompts/keywords/languages other than English, logprobs, prompt
templates, reasoning settings, MCP tools, transcription-only sessions. Fields of
the beta protocol's session are refused with the GA field to use instead.
"""

from __future__ import annotations

from typing import Any, Final

from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.errors import ErrorCode, quote, refuse
from voice_pipeline.realtime.session_config import Eagerness, Modality, SemanticVad
from voice_pipeline.realtime.session_update import (
    UNSET,
    ServerVadUpdate,
    SessionUpdate,
    Unset,
    unsupported,
)
from voice_pipeline.realtime.tools import parse_tool_choice, parse_tools
from voice_pipeline.realtime.wire import Fields

MAX_RESPONSE_TOKENS: Final = 4096  # the API's upper bound for an integer max_output_tokens
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
