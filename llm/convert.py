"""Convert a GGUF chat model into a Hugging Face folder vLLM can load on CPU.

vLLM 0.32's GGUF support is a CUDA-only plugin, so the model is converted once:
transformers reads the GGUF (``gguf_file=``, dequantizing it), the weights are
copied into a fresh model of the same config in bfloat16 and saved as
safetensors, and the tokenizer (read from the same GGUF, chat template
included) is saved beside them.

The one bf16 folder serves every CPU: on one without bf16 hardware ``llm.dtype: auto``
loads it as float32 (vLLM upcasts at load; verified, no second conversion, same start
time), see :mod:`voice_pipeline.tuning`.

The folder is written to a temporary directory next to ``out_dir`` and renamed
into place at the end, so an interrupted conversion never leaves a half folder
at ``out_dir``. torch and transformers are imported inside the function.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voice_pipeline.errors import MissingPackageError, ModelError

#: files every converted folder must contain (checked before the rename)
_REQUIRED = ("config.json", "model.safetensors", "tokenizer_config.json")


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file():
        return True
    try:
        data = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(isinstance(data, dict) and data.get("chat_template"))


def is_converted(folder: Path) -> bool:
    """True if ``folder`` looks like a finished conversion (weights, config, chat template)."""
    return all((folder / name).is_file() for name in _REQUIRED) and _has_chat_template(folder)


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, progress: Callable[[str], None]) -> None:
    """Write a bfloat16 safetensors copy of ``gguf_path`` (with its tokenizer) to ``out_dir``.

    Raises :class:`ModelError` if the GGUF cannot be read or the result is incomplete,
    :class:`MissingPackageError` if torch, transformers or gguf are missing.
    ``out_dir`` must not exist yet, or it is replaced.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingPackageError(exc.name or "transformers", "transformers torch") from exc
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError as exc:  # pragma: no cover
        raise MissingPackageError("gguf", "gguf>=0.10") from exc

    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    if not gguf_path.is_file():
        raise ModelError(f"GGUF file not found: {gguf_path}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    hf_logging: Any = transformers.utils.logging
    bars_were_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # we report our own progress lines
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        folder, name = str(gguf_path.parent), gguf_path.name
        progress(f"reading {gguf_path.name} (dequantizing)")
        try:
            tokenizer: Any = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
            source: Any = transformers.AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32
            )
        except Exception as exc:
            raise ModelError(f"cannot read GGUF model {gguf_path}: {exc}") from exc
        progress("copying weights into a bfloat16 model")
        config = source.config
        # the GGUF loader records quant_method "gguf"; left in config.json it would
        # send vLLM down its (CUDA-only) GGUF path for what are now plain weights
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.dtype = torch.bfloat16  # recorded in config.json; vLLM reads it
        auto: Any = transformers.AutoModelForCausalLM
        target: Any = auto.from_config(config, dtype=torch.bfloat16)
        missing, unexpected = target.load_state_dict(source.state_dict(), strict=False)
        # tied embeddings: lm_head.weight may be absent from the GGUF and is tied anyway
        missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if missing or unexpected:
            raise ModelError(
                f"weights of {gguf_path.name} do not match its config: "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        del source
        progress(f"saving safetensors to {out_dir}")
        target.save_pretrained(tmp, safe_serialization=True)
        del target
        if getattr(tokenizer, "chat_template", None) is None:
            raise ModelError(f"{gguf_path.name} carries no chat template")
        tokenizer.save_pretrained(tmp)
        if "quantization_config" in (tmp / "config.json").read_text(encoding="utf-8"):
            raise ModelError("converted config.json still names a quantization method")
        if not is_converted(tmp):
            present = sorted(p.name for p in tmp.iterdir())
            raise ModelError(f"conversion of {gguf_path.name} is incomplete: {present}")
        if out_dir.exists():  # replace an older folder: move it aside first
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, out_dir)
        except OSError as exc:
            # another process finished the same conversion in the meantime: keep its folder
            if not is_converted(out_dir):
                raise ModelError(f"cannot move the converted model to {out_dir}: {exc}") from exc
    finally:
        if bars_were_enabled:
            hf_logging.enable_progress_bar()
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    size_mib = sum(p.stat().st_size for p in out_dir.iterdir()) / 2**20
    progress(f"converted {gguf_path.name} -> {out_dir} ({size_mib:.0f} MiB)")


def _main(argv: list[str]) -> int:
    """``python -m llm.convert GGUF OUT_DIR``: convert once, printing progress."""
    if len(argv) != 2:
        print("usage: python -m llm.convert GGUF_FILE OUT_DIR")
        return 2
    try:
        convert_gguf_to_hf(Path(argv[0]), Path(argv[1]), print)
    except ModelError as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
