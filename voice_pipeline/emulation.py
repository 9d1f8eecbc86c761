"""A faithful AVX2 mode for development: ``VP_EMULATE_CPU=avx2`` on an AVX-512 machine.

One switch makes every engine take the code path it takes on a CPU of the emulated class,
so a figure measured here stands for that class (and is labelled as emulated:
:attr:`voice_pipeline.cpu.CPUInfo.label` reads "AVX2 (emulated on AVX-512 BF16)").

What each library is told (:func:`library_env`, set by :func:`activate`):

==========================  ================================================================
``ONEDNN_MAX_CPU_ISA``      oneDNN: torch's linear layers, vLLM's oneDNN GEMMs, CTranslate2
(and ``DNNL_MAX_CPU_ISA``)
``ATEN_CPU_CAPABILITY``     torch's own vectorised kernels (``torch.backends.cpu.
                            get_cpu_capability()`` then says ``AVX2``)
``MKL_ENABLE_INSTRUCTIONS`` MKL (torch's float32 GEMM fallback, CTranslate2's float GEMMs)
``CT2_FORCE_CPU_ISA``       CTranslate2's own kernels (faster-whisper)
``OPENBLAS_CORETYPE``       numpy's OpenBLAS
==========================  ================================================================

onnxruntime (Silero VAD, Piper, the turn model) cannot be capped: MLAS picks its kernels
from CPUID at start and 1.32 has no switch for it (its ``mlas.*`` session options are
for Arm's KleidiAI; ``ORT_QMOE_CPU_DISABLE_AVX512`` covers one MoE operator). Those stay
on AVX-512 kernels -- the one part of the chain not emulated.

vLLM's own kernels: ``vllm/platforms/cpu.py`` (``CpuPlatform.import_kernels``) loads
``vllm._C`` (AVX-512 BF16), ``vllm._C_AVX512`` or ``vllm._C_AVX2`` by
``torch.cpu._is_avx512_supported()`` and ``torch.cpu._is_avx512_bf16_supported()``, which
read CPUID; the attention backend and the config checks read the same probes. Under
emulation :func:`patch_torch` makes the probes above the emulated class answer False --
in this process before vLLM is imported, and in every process vLLM spawns: while the
engine is created, :func:`engine_env` puts the directory of ``emulate_site/sitecustomize.py``
in front of ``PYTHONPATH``, and that file applies the same patch when the child starts,
before it imports vLLM. A ``vllm.entrypoints.openai.api_server`` started with
:func:`engine_env` in its environment gets it too.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from voice_pipeline.errors import ConfigError

#: the switch
ENV = "VP_EMULATE_CPU"
#: put in front of PYTHONPATH for engine processes (holds sitecustomize.py)
SITE_DIR = Path(__file__).resolve().parent / "emulate_site"
#: the project's root (the parent of voice_pipeline/), so a child imports this same code
_ROOT = Path(__file__).resolve().parent.parent


class Emulated(enum.StrEnum):
    AVX2 = "avx2"
    AVX512 = "avx512"


@dataclass(frozen=True, slots=True)
class Target:
    """What one emulated class tells each library, and which torch probes answer False."""

    onednn: str
    aten: str
    mkl: str
    ct2: str
    openblas: str
    #: ``torch.cpu`` functions vLLM reads that must answer False on this class
    false_probes: tuple[str, ...]


_BF16_AND_UP = (
    "_is_avx512_bf16_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
)
TARGETS: dict[Emulated, Target] = {
    Emulated.AVX2: Target(
        onednn="AVX2",
        aten="avx2",
        mkl="AVX2",
        ct2="AVX2",
        openblas="Haswell",
        false_probes=("_is_avx512_supported", "_is_avx512_vnni_supported", *_BF16_AND_UP),
    ),
    Emulated.AVX512: Target(
        onednn="AVX512_CORE_VNNI",
        aten="avx512",
        mkl="AVX512",
        ct2="AVX512",
        openblas="SkylakeX",
        false_probes=_BF16_AND_UP,
    ),
}


def requested(env: Mapping[str, str]) -> Emulated | None:
    """The class ``VP_EMULATE_CPU`` asks for; None when unset or empty; a one-line
    :class:`ConfigError` for anything else."""
    value = env.get(ENV, "").strip().lower()
    if not value or value in ("0", "no", "none", "off", "native"):
        return None
    try:
        return Emulated(value)
    except ValueError:
        choices = ", ".join(e.value for e in Emulated)
        raise ConfigError(f"{ENV}={env[ENV]}: unknown CPU class (use one of: {choices})") from None


def library_env(target: Emulated) -> dict[str, str]:
    """The environment variables that cap each library at ``target`` (pure)."""
    t = TARGETS[target]
    return {
        "ONEDNN_MAX_CPU_ISA": t.onednn,
        "DNNL_MAX_CPU_ISA": t.onednn,
        "ATEN_CPU_CAPABILITY": t.aten,
        "MKL_ENABLE_INSTRUCTIONS": t.mkl,
        "CT2_FORCE_CPU_ISA": t.ct2,
        "OPENBLAS_CORETYPE": t.openblas,
    }


def activate(env: MutableMapping[str, str] | None = None) -> Emulated | None:
    """Set :func:`library_env` in ``env`` (default: this process's environment) when
    ``VP_EMULATE_CPU`` asks for a class. Libraries read these once, at their first use,
    so call it before torch, CTranslate2 or vLLM run anything (``this_cpu`` does)."""
    env = os.environ if env is None else env
    target = requested(env)
    if target is not None:
        env.update(library_env(target))
    return target


def engine_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Extra environment for a process that runs vLLM (its engine core, or an
    ``api_server``): under emulation, ``PYTHONPATH`` starting with :data:`SITE_DIR` and the
    project's root, plus :func:`library_env`; nothing otherwise."""
    env = os.environ if env is None else env
    target = requested(env)
    if target is None:
        return {}
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(SITE_DIR), str(_ROOT), *(p for p in rest if p not in (str(SITE_DIR), str(_ROOT)))]
    return {ENV: target.value, "PYTHONPATH": os.pathsep.join(paths), **library_env(target)}


def _false() -> bool:
    return False


def patch_torch(target: Emulated | None = None) -> list[str]:
    """Make ``torch.cpu``'s probes above ``target`` (default: the requested class) answer
    False in this process, before vLLM reads them. Returns the names patched."""
    target = target or requested(os.environ)
    if target is None:
        return []
    import torch.cpu

    patched = []
    for name in TARGETS[target].false_probes:
        if hasattr(torch.cpu, name):
            setattr(torch.cpu, name, _false)
            patched.append(name)
    return patched
