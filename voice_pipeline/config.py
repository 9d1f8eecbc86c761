"""One typed config tree, loaded and validated once at the edge.

Each component receives only its own section (``VADConfig`` for ``vad/``, ...).
Values come from, in order of precedence: CLI flags (applied by the CLI with
:func:`dataclasses.replace`), ``--config FILE`` (YAML, sections named like the
fields of :class:`Config`), then the defaults below. Stage budgets come from
``latency_budget.yaml``. Units are in the names (``_ms``, ``_s``, ``_hz``).
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from voice_pipeline.barge_in_config import DEFAULT_BACKCHANNELS as DEFAULT_BACKCHANNELS  # re-exported
from voice_pipeline.barge_in_config import BargeInConfig as BargeInConfig  # re-exported
from voice_pipeline.barge_in_config import validate_barge_in
from voice_pipeline.dialogue_config import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT  # re-exported
from voice_pipeline.dialogue_config import DialogueConfig as DialogueConfig  # re-exported
from voice_pipeline.dialogue_config import validate_dialogue
from voice_pipeline.errors import ConfigError
from voice_pipeline.server_config import ServerConfig as ServerConfig  # re-exported
from voice_pipeline.server_config import validate_server as validate_server
from voice_pipeline.telemetry.config import TelemetryConfig
from voice_pipeline.telephony_config import TelephonyConfig as TelephonyConfig  # re-exported
from voice_pipeline.telephony_config import validate_telephony as validate_telephony
from voice_pipeline.typed_yaml import build, read_yaml


@dataclass(frozen=True, slots=True)
class VADConfig:
    engine: str = "silero"  # registered in vad.ENGINES
    #: Silero ONNX file; None = the model bundled in the ``silero-vad`` package.
    model_path: str | None = None
    #: speech probability at or above which a frame counts as voiced
    threshold: float = 0.5
    #: probability below which a voiced run counts as ended (hysteresis)
    neg_threshold: float = 0.35
    #: voiced time needed before a turn starts (rejects clicks)
    min_speech_ms: int = 150
    #: silence after the last voiced VAD frame after which the user's turn is over. Silero's
    #: hangover puts that frame 50-100 ms after the sound ends, so the user has been silent
    #: for about 300-350 ms when the turn ends.
    end_silence_ms: int = 250
    #: audio kept from before the detected start so first phonemes are not lost
    pre_roll_ms: int = 150
    #: longest user turn: after this much of one turn (babble, a TV) it ends anyway and is
    #: answered, its buffers let go (0 = no limit). Longer than Whisper's 30 s is its slow path
    max_turn_s: float = 30.0
    #: webrtcvad aggressiveness 0..3
    webrtc_mode: int = 3
    #: onnxruntime intra-op threads
    threads: int = 1


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Turn-taking: when the user has finished, and when their speech continues their turn
    instead of interrupting the reply (see vad/end_of_turn.py and voice_pipeline/turntaking/ending.py)."""

    #: decide the end of a turn from the words and the sound as well as the silence; off = silence alone
    semantic: bool = True
    #: the audio turn-completion model: "smart-turn" (Smart Turn v3.2, from the pipecat-ai
    #: wheel, prepared by ``voice-pipeline models``) or "none" (the words alone)
    model: Literal["smart-turn", "none"] = "smart-turn"
    #: Smart Turn ONNX file; None = the one prepared by ``voice-pipeline models``
    model_path: str | None = None
    #: onnxruntime intra-op threads of the turn model
    model_threads: int = 1
    #: when the turn model runs in a pause: "words" = once the speculative transcript is in, and only
    #: if the words are neutral (unfinished ones wait the longest anyway; a "?" ends the turn after
    #: the short wait); "pause" = at the first silent frame, beside the decode, its verdict used
    #: whatever the words; "early" = at the first silent frame, used as with "words"; both only while
    #: the machine has room, else "words". "auto" = per CPU (tuning.py: "early" on AVX2 and older)
    model_start: Literal["auto", "words", "early", "pause"] = "auto"
    #: P(complete) at or above which the model says the utterance sounds finished
    complete_threshold: float = 0.5
    #: the wait when words and sound disagree (a question mark, an unfinished sound), or the evidence
    #: is not back yet; continuation catches a speaker who goes on after it
    unsure_silence_ms: int = 500
    #: after neutral words, the longest wait for the turn model's verdict on its way (a Zen 1
    #: EPYC's came ~500-750 ms into the pause), kept between the medium and the long wait
    verdict_silence_ms: int = 900
    #: the longest wait, for an utterance that reads unfinished; the turn ends after it anyway
    incomplete_silence_ms: int = 2000
    #: the wait when only the sound says unfinished (neutral words; kept between the medium and the
    #: long wait): above people's 0.5-1.2 s pauses, as Smart Turn hears 2 of 5 people's ends unfinished
    sound_silence_ms: int = 1500
    #: speech after the end of a turn, before its reply is audible, continues that turn (the reply is
    #: dropped, both parts are transcribed as one message) instead of starting a new one
    continuation: bool = True
    #: ... and so does speech up to this long after the reply's first audio left; later is a barge-in.
    #: As long as the max gap, which then decides alone on any machine (docs/measurements.md session 26)
    continuation_grace_ms: int = 1500
    #: ... but never speech starting more than this long after the user's own end of speech: a new turn
    #: however slow the reply (one not yet audible is dropped: one reply answers both); 0 = no cap
    continuation_max_gap_ms: int = 1500
    #: a speaker who went on after an end of turn pauses mid-sentence: the session's short and
    #: medium waits grow by this much while they pause so (turntaking/ending.py); 0 = off
    patience_ms: int = 1000
    #: the wait after neutral words that sound finished ("I need eggs"; None = the short wait): 1400 is
    #: quiet through people's 1.2 s pauses after such phrases, but every statement waits it (session 31)
    statement_silence_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ASRConfig:
    engine: str = "faster-whisper"  # registered in asr.ENGINES
    #: CTranslate2 Whisper directory; None = tiny.en prepared by ``voice-pipeline models``
    model_path: str | None = None
    compute_type: str = "int8"
    language: str = "en"
    beam_size: int = 1
    cpu_threads: int = 0  # CTranslate2 threads; 0 = chosen for the machine (voice_pipeline/tuning.py)
    num_workers: int = 0  # Whisper decodes at once (CTranslate2 workers); 0 = chosen (tuning.py)
    #: decode the growing utterance this often for partial transcripts (0 = no partials)
    partial_interval_ms: int = 600
    #: ... only where the warm-up's decode of a question took at most this (ms; 0 = always; tuning.py)
    partials_max_decode_ms: int = 250
    #: a partial decode starts only when no decode of any session is on the engine, so the decodes
    #: replies wait for never queue behind other sessions' partials (one session barely notices)
    partials_on_idle_engine: bool = True
    #: shorter Whisper windows (5, 6, 8 s) for clips of 1.6-7 s: "auto" = where the 10 s window's
    #: encoder is slow (timed at load: asr/window.py choose_short_windows), "on", "off" (measured)
    short_windows: Literal["auto", "on", "off"] = "auto"
    #: start the final decode when the VAD hears silence, so the words are (usually) ready at
    #: the endpoint; redone if speech resumes
    speculative_final: bool = True
    #: silences inside an utterance longer than this are shortened to it before decoding
    #: (a mid-sentence pause of 1.2 s made tiny.en hear fragments: WER 12.4 -> 8.2 %, see
    #: asr/pauses.py); 0 = decode the audio as it is
    max_pause_ms: int = 300


@dataclass(frozen=True, slots=True)
class LLMConfig:
    engine: str = "vllm"  # registered in llm.ENGINES
    #: which prepared model in-process vLLM runs: "smollm2" (SmolLM2-135M-Instruct, prepared by
    #: ``voice-pipeline models``) or "qwen2.5-coder-0.5b" (Qwen2.5-Coder-0.5B-Instruct, which can
    #: call tools with ``tool_choice: auto``; optional, prepared by ``voice-pipeline models
    #: --tools-model``, see voice_pipeline/tools_model.py). ``model_path`` overrides both.
    model: Literal["smollm2", "qwen2.5-coder-0.5b"] = "smollm2"
    #: Hugging Face model directory for vLLM; None = the prepared folder of ``model``
    model_path: str | None = None
    #: remote engine: base URL of an OpenAI-compatible vLLM server, e.g. http://host:8000/v1
    url: str | None = None
    #: remote engine: model name to request (None = the server's first model)
    remote_model: str | None = None
    max_tokens: int = 96
    temperature: float = 0.0
    top_p: float = 1.0
    #: vLLM's penalty on tokens already in the prompt, the history or the reply (1.0 = none).
    #: Off: 1.1 ended SmolLM2's loops on single requests ("List the days of the week": the
    #: week over and over to the token limit), but it penalizes the history too, and "And what
    #: is the capital of Italy?" after "The capital of France is Paris." got "Italy is also
    #: known as the Italian Republic." The reply's own guard (dialogue.repeat_stop_words)
    #: stops loops instead (README, "A reply that repeats itself"). Never applied to a request
    #: that offers tools: a call copies names and values from the prompt
    repetition_penalty: float = 1.0
    #: vLLM KV cache size (mandatory on CPU)
    kv_cache_mib: int = 256
    #: tokens per vLLM KV cache block (0 = chosen for the machine: 32 on CPU). The prefix
    #: cache reuses whole blocks only, so a prompt shares at most a multiple of this many
    #: tokens with an earlier one; vLLM's CPU default, 128, never reused a system prompt plus
    #: a short question. On CPU it must be a multiple of 32 (16 has no kernel there).
    kv_block_tokens: int = 0
    max_model_len: int = 2048
    #: weights and activations: "auto" = bfloat16 where the CPU computes it natively
    #: (AVX-512 BF16, AMX), else float32 (bf16 without hardware support is ~4x slower to the
    #: first token); see voice_pipeline/tuning.py. An explicit value always wins.
    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"
    #: the in-process vLLM engine's decode step: "eager", or "compile" (torch.compile, its
    #: cache kept across starts in ~/.cache/vllm); "auto" = chosen per CPU class (tuning.py)
    compile: Literal["auto", "eager", "compile"] = "auto"
    #: a request with no token for this long (first token or between tokens) is an error:
    #: the turn ends with the spoken ``dialogue.apology``
    request_timeout_s: float = 10.0
    #: OpenMP threads of the in-process vLLM engine (0 = chosen for the machine: 1 up to 3
    #: cores, half the cores from 4; an ``OMP_NUM_THREADS`` set by the user wins)
    threads: int = 0
    #: remote engine: after a failure, new requests fail at once (with the apology) for this
    #: long before the next one is tried (doubling per consecutive failure up to retry_max_s);
    #: /healthz says degraded from the failure until a request succeeds again
    retry_initial_s: float = 0.5
    retry_max_s: float = 10.0


@dataclass(frozen=True, slots=True)
class TTSConfig:
    engine: str = "piper"  # registered in tts.ENGINES
    #: Piper .onnx voice (its .onnx.json beside it); None = en_US-joe-medium from its wheel
    voice_path: str | None = None
    #: a clause is spoken only once it has at least this many words (avoids choppy audio)
    min_clause_words: int = 4
    #: the first chunk of a reply ends after this many words, or at a comma (0: none); None: chosen
    #: from the LLM's pace at warm-up (:func:`voice_pipeline.tuning.choose_first_chunk_words`)
    first_chunk_words: int | None = None
    #: onnxruntime intra-op threads (1 stays fast while the LLM is busy)
    threads: int = 1
    #: run the voice's 1-D convolutions as 2-D ones (tts/conv2d.py: onnxruntime's blocked
    #: kernels, the same audio, Piper ~20 % faster; costs ~0.5 s more at load)
    conv2d: bool = True
    #: a reply's first chunk: its first ~0.28 s decoded and sent before the rest (tts/head_first.py)
    head_first: bool = True
    #: trailing silence Piper appends per chunk is trimmed to at most this
    max_trailing_silence_ms: int = 120


@dataclass(frozen=True, slots=True)
class AudioConfig:
    #: rate the VAD and ASR run at
    pipeline_rate_hz: int = 16000
    #: rate of reply audio sent to listeners; None = the TTS voice's own rate
    output_rate_hz: int | None = None
    #: input frame size fed by file/live transports
    frame_ms: int = 20


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """Per-stage budgets in ms (see latency_budget.yaml for what each one measures)."""

    endpointing_ms: float = 400.0
    asr_final_ms: float = 150.0
    llm_first_token_ms: float = 150.0
    first_clause_ms: float = 250.0
    tts_first_audio_ms: float = 150.0
    transport_ms: float = 20.0
    voice_to_voice_ms: float = 800.0
    asked_to_audio_ms: float = 500.0
    barge_in_stop_ms: float = 250.0
    #: a turn whose tools ran before its first clause (ledger.TOOL_PATH)
    tool_call_ms: float = 400.0
    tool_ms: float = 1000.0
    tool_answer_ms: float = 600.0


@dataclass(frozen=True, slots=True)
class ModelsConfig:
    #: where prepared models live; None = $VOICE_PIPELINE_CACHE or ~/.cache/voice-pipeline
    cache_dir: str | None = None

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        env = os.environ.get("VOICE_PIPELINE_CACHE")
        if env:
            return Path(env).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "voice-pipeline"


@dataclass(frozen=True, slots=True)
class Config:
    vad: VADConfig = field(default_factory=VADConfig)
    turn: TurnConfig = field(default_factory=TurnConfig)
    asr: ASRConfig = field(default_factory=ASRConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    dialogue: DialogueConfig = field(default_factory=DialogueConfig)
    tts: TTSConfig = field(default_factory=TTSConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    telephony: TelephonyConfig = field(default_factory=TelephonyConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)


# ---------------------------------------------------------------- loading


def default_budget_path() -> Path | None:
    """``./latency_budget.yaml`` if present, else the one at the project root."""
    for candidate in (
        Path.cwd() / "latency_budget.yaml",
        Path(__file__).resolve().parents[1] / "latency_budget.yaml",
    ):
        if candidate.is_file():
            return candidate
    return None


def load_budget(path: Path | None) -> BudgetConfig:
    if path is None:
        return BudgetConfig()
    data = read_yaml(path)
    if isinstance(data, dict) and "budgets" in data:
        data = data["budgets"]
    budget = build(BudgetConfig, data, "budgets")
    for f in dataclasses.fields(budget):
        if getattr(budget, f.name) <= 0:
            raise ConfigError(f"budgets.{f.name}: must be positive")
    return typing.cast(BudgetConfig, budget)


def load_config(path: Path | None = None, budget_path: Path | None = None) -> Config:
    """Load and validate the whole tree. Raises :class:`ConfigError` with the bad key."""
    data: Any = read_yaml(path) if path is not None else {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    budget = load_budget(budget_path or default_budget_path())
    if "budget" in data:  # per-file overrides of individual budgets
        section = data.pop("budget") or {}
        overrides = build(BudgetConfig, section, "budget")
        budget = dataclasses.replace(budget, **{k: getattr(overrides, k) for k in section})
    _moved(data)
    cfg = typing.cast(Config, build(Config, data, ""))
    cfg = dataclasses.replace(cfg, budget=budget)
    validate(cfg)
    return cfg


#: keys that left their section, and where they are now
MOVED = {
    **{("llm", f.name): "dialogue" for f in dataclasses.fields(DialogueConfig)},
    **{("server", f.name): "telephony" for f in dataclasses.fields(TelephonyConfig)},
}


def _moved(data: dict[str, Any]) -> None:
    for (section, name), now in MOVED.items():
        if isinstance(data.get(section), dict) and name in data[section]:
            raise ConfigError(f"{section}.{name} has moved: write it as {now}.{name}")


def validate(cfg: Config) -> None:
    v = cfg.vad
    if not 0.0 < v.neg_threshold <= v.threshold < 1.0:
        raise ConfigError("vad: need 0 < neg_threshold <= threshold < 1")
    if v.end_silence_ms < 32 or v.min_speech_ms < 0 or v.pre_roll_ms < 0:
        raise ConfigError("vad: end_silence_ms must be >= 32; min_speech_ms, pre_roll_ms >= 0")
    if not 0 <= v.webrtc_mode <= 3:
        raise ConfigError("vad.webrtc_mode: must be 0..3")
    if v.max_turn_s < 0 or 0 < v.max_turn_s < 1:
        raise ConfigError("vad.max_turn_s: must be 0 (no limit) or at least 1")
    t = cfg.turn
    if not v.end_silence_ms <= t.unsure_silence_ms <= t.incomplete_silence_ms:
        raise ConfigError("turn: need vad.end_silence_ms <= unsure_silence_ms <= incomplete_silence_ms")
    if (s := t.statement_silence_ms) is not None and not v.end_silence_ms <= s <= t.incomplete_silence_ms:
        raise ConfigError("turn.statement_silence_ms: need vad.end_silence_ms <= it <= incomplete_silence_ms")
    if not 0.0 < t.complete_threshold < 1.0 or t.model_threads < 1 or t.continuation_grace_ms < 0:
        raise ConfigError(
            "turn: need 0 < complete_threshold < 1, model_threads >= 1, continuation_grace_ms >= 0"
        )
    if cfg.asr.max_pause_ms < 0 or cfg.asr.cpu_threads < 0 or cfg.asr.num_workers < 0:
        raise ConfigError("asr: max_pause_ms (0 = off), cpu_threads and num_workers (0 = auto) must be >= 0")
    if cfg.audio.pipeline_rate_hz not in (8000, 16000):
        raise ConfigError("audio.pipeline_rate_hz: must be 8000 or 16000")
    if cfg.audio.frame_ms not in (10, 20, 30, 40, 60, 100):
        raise ConfigError("audio.frame_ms: must be one of 10, 20, 30, 40, 60, 100")
    if cfg.llm.engine == "remote" and not cfg.llm.url:
        raise ConfigError("llm.url: required when llm.engine is 'remote' (or pass --llm-url)")
    if cfg.llm.max_tokens < 1 or cfg.llm.kv_cache_mib < 16:
        raise ConfigError("llm: max_tokens must be >= 1 and kv_cache_mib >= 16")
    if not 0 < cfg.llm.repetition_penalty <= 2:
        raise ConfigError(f"llm.repetition_penalty must be in (0, 2], got {cfg.llm.repetition_penalty}")
    if cfg.llm.request_timeout_s <= 0 or cfg.llm.threads < 0:
        raise ConfigError("llm: request_timeout_s must be > 0 and threads >= 0")
    if not 0 < cfg.llm.retry_initial_s <= cfg.llm.retry_max_s:
        raise ConfigError("llm: need 0 < retry_initial_s <= retry_max_s")
    validate_dialogue(cfg.dialogue)
    if t.continuation_max_gap_ms < 0 or t.patience_ms < 0:
        raise ConfigError("turn: continuation_max_gap_ms (0 = no cap) and patience_ms (0 = off) must be >= 0")
    if cfg.llm.kv_block_tokens < 0 or cfg.llm.kv_block_tokens % 16:
        raise ConfigError("llm.kv_block_tokens: must be 0 (auto) or a positive multiple of 16 (32 on CPU)")
    if cfg.tts.min_clause_words < 1:
        raise ConfigError("tts.min_clause_words: must be >= 1")
    if cfg.tts.first_chunk_words is not None and cfg.tts.first_chunk_words < 0:
        raise ConfigError("tts.first_chunk_words: must be >= 0 (0: no short first chunk)")
    validate_barge_in(cfg.barge_in)
    for f in dataclasses.fields(cfg.budget):
        if getattr(cfg.budget, f.name) <= 0:
            raise ConfigError(f"budget.{f.name}: must be positive")
    validate_server(cfg.server)
    validate_telephony(cfg.telephony)
