"""Config tree: defaults, YAML overrides, budget file and ``budget:`` overrides, validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from voice_pipeline.config import (
    ASRConfig,
    AudioConfig,
    BudgetConfig,
    Config,
    LLMConfig,
    ModelsConfig,
    TTSConfig,
    VADConfig,
    load_budget,
    load_config,
)
from voice_pipeline.errors import ConfigError

PROJECT_BUDGET = Path(__file__).resolve().parents[1] / "latency_budget.yaml"


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def budget_file(tmp_path: Path) -> Path:
    """A budget file that differs from the defaults in two keys."""
    return write(tmp_path, "budgets:\n  endpointing_ms: 400\n  transport_ms: 30\n", "budget.yaml")


# ---------------------------------------------------------------- defaults


def test_defaults_load_without_a_file(budget_file: Path) -> None:
    cfg = load_config(None, budget_file)
    assert cfg == Config(budget=BudgetConfig(endpointing_ms=400.0, transport_ms=30.0))


def test_empty_file_is_the_defaults(tmp_path: Path, budget_file: Path) -> None:
    assert load_config(write(tmp_path, ""), budget_file) == load_config(None, budget_file)


def test_project_budget_file_is_found_and_loaded() -> None:
    expected = yaml.safe_load(PROJECT_BUDGET.read_text(encoding="utf-8"))["budgets"]
    budget = load_budget(PROJECT_BUDGET)
    assert {k: getattr(budget, k) for k in expected} == {k: float(v) for k, v in expected.items()}
    # every budget the ledger knows is in the shipped file
    assert set(expected) == {f.name for f in dataclasses.fields(BudgetConfig)}
    assert load_config(None).budget == budget


# ---------------------------------------------------------------- overrides per section

OVERRIDES: list[tuple[str, Config]] = [
    (
        "vad:\n  threshold: 0.6\n  end_silence_ms: 500\n",
        Config(vad=VADConfig(threshold=0.6, end_silence_ms=500)),
    ),
    ("vad:\n  engine: webrtc\n  webrtc_mode: 2\n", Config(vad=VADConfig(engine="webrtc", webrtc_mode=2))),
    (
        "asr:\n  beam_size: 5\n  speculative_final: false\n  model_path: /m/whisper\n",
        Config(asr=ASRConfig(beam_size=5, speculative_final=False, model_path="/m/whisper")),
    ),
    # an integer is accepted where a float is expected (and becomes a float)
    ("llm:\n  temperature: 1\n  max_tokens: 32\n", Config(llm=LLMConfig(temperature=1.0, max_tokens=32))),
    (
        "llm:\n  engine: remote\n  url: http://h:8000/v1\n",
        Config(llm=LLMConfig(engine="remote", url="http://h:8000/v1")),
    ),
    ("tts:\n  min_clause_words: 2\n", Config(tts=TTSConfig(min_clause_words=2))),
    (
        "audio:\n  output_rate_hz: 48000\n  frame_ms: 10\n",
        Config(audio=AudioConfig(output_rate_hz=48000, frame_ms=10)),
    ),
    ("models:\n  cache_dir: /tmp/models\n", Config(models=ModelsConfig(cache_dir="/tmp/models"))),
    # explicit null keeps the Optional default
    ("vad:\n  model_path: null\n", Config()),
    # an empty section is the section's defaults
    ("vad:\n", Config()),
]


@pytest.mark.parametrize(("text", "expected"), OVERRIDES)
def test_yaml_overrides_only_the_given_keys(
    tmp_path: Path, budget_file: Path, text: str, expected: Config
) -> None:
    cfg = load_config(write(tmp_path, text), budget_file)
    assert cfg == dataclasses.replace(expected, budget=load_budget(budget_file))


def test_float_field_holds_a_float(tmp_path: Path, budget_file: Path) -> None:
    cfg = load_config(write(tmp_path, "llm:\n  temperature: 1\n"), budget_file)
    assert type(cfg.llm.temperature) is float


# ---------------------------------------------------------------- bad files

BAD: list[tuple[str, str]] = [
    # unknown keys are named
    ("vadd:\n  threshold: 0.5\n", "vadd"),
    ("vad:\n  treshold: 0.5\n", "treshold"),
    ("llm:\n  max_token: 5\n", "llm: unknown key(s) max_token"),
    # wrong types name the key
    ("vad:\n  min_speech_ms: '150'\n", "vad.min_speech_ms"),
    ("vad:\n  min_speech_ms: 1.5\n", "vad.min_speech_ms"),
    ("vad:\n  min_speech_ms: true\n", "vad.min_speech_ms"),
    ("vad:\n  threshold: high\n", "vad.threshold"),
    ("vad:\n  threshold: false\n", "vad.threshold"),
    ("asr:\n  speculative_final: 'yes'\n", "asr.speculative_final"),
    ("asr:\n  speculative_final: 1\n", "asr.speculative_final"),
    ("dialogue:\n  system_prompt: 5\n", "dialogue.system_prompt"),
    ("llm:\n  system_prompt: hi\n", "llm.system_prompt has moved: write it as dialogue.system_prompt"),
    ("server:\n  twilio_token: x\n", "server.twilio_token has moved: write it as telephony.twilio_token"),
    ("telephony:\n  audiosocket_allowed_peers: [nowhere]\n", "telephony.audiosocket_allowed_peers"),
    ("telephony:\n  audiosocket_port: 70000\n", "telephony.audiosocket_port"),
    ("llm:\n  url: 5\n", "llm.url"),
    ("audio:\n  output_rate_hz: fast\n", "audio.output_rate_hz"),
    ("vad:\n  engine: 5\n", "vad.engine"),  # which names are engines: tests/test_engine_registry.py
    ("llm:\n  engine: [openai]\n", "llm.engine"),
    # structure
    ("vad: 3\n", "vad: expected a mapping"),
    ("vad:\n  - threshold\n", "vad: expected a mapping"),
    ("- vad\n- asr\n", "top level must be a mapping"),
    ("vad: [unclosed\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_bad_config_raises_config_error_naming_the_key(
    tmp_path: Path, budget_file: Path, text: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), budget_file)
    assert needle in str(info.value)


def test_literal_error_lists_the_allowed_values(tmp_path: Path, budget_file: Path) -> None:
    with pytest.raises(ConfigError, match="'smart-turn', 'none'"):
        load_config(write(tmp_path, "turn:\n  model: magic\n"), budget_file)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_budget(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"250: x\n", "key 250 is not a string"),
        (b"on: true\n", "key True is not a string (YAML reads on/off/yes/no as booleans: quote it)"),
        (b"server:\n  allowed_origins: [a]\n  no: 1\n", "key False in server is not a string"),
        (b"vad:\n  threshold: 0.5  # caf\xe9\n", "not UTF-8 text (byte 0xe9 on line 2)"),
        (b"\xff\xfev\x00a\x00d\x00", "not UTF-8 text (byte 0xff on line 1)"),  # UTF-16
    ],
)
def test_a_file_that_is_not_utf8_or_has_a_non_string_key_is_one_line_naming_file_and_key(
    tmp_path: Path, budget_file: Path, text: bytes, needle: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, budget_file)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message, message
    with pytest.raises(ConfigError, match=r"not a string|not UTF-8"):
        load_budget(path)  # the budget file is read the same way


def test_invalid_yaml_is_one_line_with_where(tmp_path: Path, budget_file: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "vad: [unclosed\n"), budget_file)
    assert "invalid YAML" in str(info.value) and "line 2" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- budgets

BUDGET_FILES: list[tuple[str, dict[str, float]]] = [
    ("budgets:\n  endpointing_ms: 400\n", {"endpointing_ms": 400.0}),
    # a flat mapping without the ``budgets:`` wrapper is accepted too
    (
        "voice_to_voice_ms: 1000\nbarge_in_stop_ms: 100\n",
        {"voice_to_voice_ms": 1000.0, "barge_in_stop_ms": 100.0},
    ),
    ("budgets:\n", {}),
    ("", {}),
]


@pytest.mark.parametrize(("text", "changed"), BUDGET_FILES)
def test_budget_file(tmp_path: Path, text: str, changed: dict[str, float]) -> None:
    assert load_budget(write(tmp_path, text, "b.yaml")) == BudgetConfig(**changed)


def test_no_budget_file_is_the_defaults() -> None:
    assert load_budget(None) == BudgetConfig()


BAD_BUDGET_FILES: list[tuple[str, str]] = [
    ("budgets:\n  endpointing: 400\n", "endpointing"),
    ("budgets:\n  endpointing_ms: fast\n", "budgets.endpointing_ms"),
    ("budgets:\n  endpointing_ms: 0\n", "budgets.endpointing_ms: must be positive"),
    ("budgets:\n  transport_ms: -5\n", "budgets.transport_ms: must be positive"),
    ("budgets: 5\n", "budgets: expected a mapping"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_BUDGET_FILES)
def test_bad_budget_file(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_budget(write(tmp_path, text, "b.yaml"))
    assert needle in str(info.value)


def test_budget_section_merges_only_the_given_keys_over_the_budget_file(
    tmp_path: Path, budget_file: Path
) -> None:
    cfg = load_config(write(tmp_path, "budget:\n  transport_ms: 25\n  voice_to_voice_ms: 900\n"), budget_file)
    # endpointing_ms comes from the budget file, not from the BudgetConfig defaults
    assert cfg.budget == BudgetConfig(endpointing_ms=400.0, transport_ms=25.0, voice_to_voice_ms=900.0)
    assert cfg.vad == VADConfig()


@pytest.mark.parametrize("text", ["budget:\n", "budget: {}\n"])
def test_empty_budget_section_changes_nothing(tmp_path: Path, budget_file: Path, text: str) -> None:
    assert load_config(write(tmp_path, text), budget_file).budget == load_budget(budget_file)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("budget:\n  transprt_ms: 5\n", "transprt_ms"),
        ("budget:\n  transport_ms: soon\n", "budget.transport_ms"),
        ("budget: 5\n", "budget: expected a mapping"),
        # the per-file overrides must obey the same rule as the budget file
        ("budget:\n  voice_to_voice_ms: -1\n", "voice_to_voice_ms"),
        ("budget:\n  transport_ms: 0\n", "transport_ms"),
    ],
)
def test_bad_budget_section(tmp_path: Path, budget_file: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), budget_file)
    assert needle in str(info.value)


# ---------------------------------------------------------------- validation

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"vad": {"threshold": 0.3, "neg_threshold": 0.4}}, "neg_threshold <= threshold"),
    ({"vad": {"threshold": 1.0}}, "threshold < 1"),
    ({"vad": {"neg_threshold": 0.0}}, "0 < neg_threshold"),
    ({"vad": {"end_silence_ms": 20}}, "end_silence_ms must be >= 32"),
    ({"vad": {"min_speech_ms": -1}}, "min_speech_ms"),
    ({"vad": {"pre_roll_ms": -1}}, "pre_roll_ms"),
    ({"vad": {"webrtc_mode": 4}}, "vad.webrtc_mode"),
    ({"vad": {"webrtc_mode": -1}}, "vad.webrtc_mode"),
    ({"asr": {"num_workers": -1}}, "num_workers (0 = auto) must be >= 0"),
    ({"asr": {"cpu_threads": -2}}, "cpu_threads and num_workers"),
    ({"audio": {"pipeline_rate_hz": 44100}}, "audio.pipeline_rate_hz"),
    ({"audio": {"frame_ms": 25}}, "audio.frame_ms"),
    ({"llm": {"engine": "remote"}}, "llm.url"),
    ({"llm": {"max_tokens": 0}}, "max_tokens"),
    ({"llm": {"kv_cache_mib": 8}}, "kv_cache_mib"),
    ({"llm": {"repetition_penalty": 0}}, "llm.repetition_penalty"),
    ({"llm": {"repetition_penalty": 2.5}}, "llm.repetition_penalty"),
    ({"dialogue": {"repeat_stop_words": -1}}, "repeat_stop_words"),
    ({"barge_in": {"stop_after_reply_ms": -1}}, "barge_in.stop_after_reply_ms"),
    ({"tts": {"min_clause_words": 0}}, "tts.min_clause_words"),
]


@pytest.mark.parametrize(("data", "needle"), INVALID)
def test_validation_errors(tmp_path: Path, budget_file: Path, data: dict[str, Any], needle: str) -> None:
    path = write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_config(path, budget_file)
    assert needle in str(info.value)


VALID_EDGES: list[dict[str, Any]] = [
    {"vad": {"threshold": 0.4, "neg_threshold": 0.4}},  # equal thresholds are allowed
    {"vad": {"end_silence_ms": 32, "min_speech_ms": 0, "pre_roll_ms": 0}},
    {"vad": {"webrtc_mode": 0}},
    {"audio": {"pipeline_rate_hz": 8000, "frame_ms": 100}},
    {"llm": {"max_tokens": 1, "kv_cache_mib": 16}},
    {"llm": {"repetition_penalty": 1.0}, "dialogue": {"repeat_stop_words": 0}},  # both off
    {"llm": {"repetition_penalty": 2.0}},
    {"tts": {"min_clause_words": 1}},
]


@pytest.mark.parametrize("data", VALID_EDGES)
def test_validation_edges_are_accepted(tmp_path: Path, budget_file: Path, data: dict[str, Any]) -> None:
    load_config(write(tmp_path, yaml.safe_dump(data)), budget_file)


# ---------------------------------------------------------------- models cache dir


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VOICE_PIPELINE_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ModelsConfig(cache_dir=str(tmp_path / "cfg")).resolved_cache_dir() == tmp_path / "cfg"
    assert ModelsConfig().resolved_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("VOICE_PIPELINE_CACHE")
    assert ModelsConfig().resolved_cache_dir() == tmp_path / "xdg" / "voice-pipeline"
