"""What the machine is: the CPU class the engines' kernels can use, the usable cores, any emulation.

Pure: :func:`parse_cpu` turns the text of ``/proc/cpuinfo`` (plus the usable core count and
the environment) into a :class:`CPUInfo`. :func:`this_cpu` is the only function that reads
the machine (once, cached). The settings chosen for it are :mod:`voice_pipeline.tuning`'s.

Emulation: ``VP_EMULATE_CPU=avx2`` makes every engine take its AVX2 code path on an
AVX-512 CPU (oneDNN, ATen, MKL, CTranslate2 and vLLM's own kernels; see
:mod:`voice_pipeline.emulation`, which :func:`this_cpu` activates). ``ONEDNN_MAX_CPU_ISA``
alone caps only oneDNN (vLLM's kernels stay AVX-512: not a faithful emulation). When either
caps below the CPU's own class, :attr:`CPUInfo.cpu_class` is the capped class and
:attr:`CPUInfo.label` says so ("AVX2 (emulated on AVX-512 BF16)"), so a measurement made
that way is labelled honestly and gets the settings the emulated class would get.
"""

from __future__ import annotations

import enum
import functools
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


class CPUClass(enum.StrEnum):
    """What the LLM's kernels can use (the classes figures are published under)."""

    AVX512_BF16 = "AVX-512 BF16"
    AVX512 = "AVX-512"
    AVX2 = "AVX2"
    ARM_BF16 = "Arm BF16"
    ARM = "Arm"
    OLDER = "no AVX2"


#: the order of the x86 classes, weakest first (for the ONEDNN_MAX_CPU_ISA cap)
_X86_ORDER = (CPUClass.OLDER, CPUClass.AVX2, CPUClass.AVX512, CPUClass.AVX512_BF16)
#: ONEDNN_MAX_CPU_ISA values (oneDNN's names, case-insensitive) -> the class they cap at
_ONEDNN_CAPS = {
    "sse41": CPUClass.OLDER,
    "avx": CPUClass.OLDER,
    "avx2": CPUClass.AVX2,
    "avx512": CPUClass.AVX512,
    "avx2_vnni": CPUClass.AVX2,
    "avx2_vnni_2": CPUClass.AVX2,
    "avx512_core": CPUClass.AVX512,
    "avx512_core_vnni": CPUClass.AVX512,
    "avx512_core_bf16": CPUClass.AVX512_BF16,
    "avx10_1_512": CPUClass.AVX512_BF16,
    "avx512_core_fp16": CPUClass.AVX512_BF16,
    "avx512_core_amx": CPUClass.AVX512_BF16,
    "avx10_1_512_amx": CPUClass.AVX512_BF16,
    "avx512_core_amx_fp16": CPUClass.AVX512_BF16,
    "avx10_1_512_amx_fp16": CPUClass.AVX512_BF16,
    "all": CPUClass.AVX512_BF16,
}


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """The CPU as the settings see it."""

    #: "AMD EPYC", "Intel(R) Core(TM) i7-1185G7 ...", or the platform's processor name
    model: str
    flags: frozenset[str]
    #: logical CPUs this process may run on (its affinity mask), at least 1
    cores: int
    machine: str = "x86_64"
    #: the class the CPU itself has, when an environment cap lowers :attr:`cpu_class`
    native_class: CPUClass | None = None
    #: the environment variable that caps it ("VP_EMULATE_CPU=avx2", "ONEDNN_MAX_CPU_ISA=AVX2")
    emulation: str | None = None

    @property
    def cpu_class(self) -> CPUClass:
        return _cap(_native_class(self.flags, self.machine), self.emulation)

    @property
    def bf16_native(self) -> bool:
        return self.cpu_class in (CPUClass.AVX512_BF16, CPUClass.ARM_BF16)

    @property
    def label(self) -> str:
        """``AVX-512 BF16, 2 cores (AMD EPYC)``; an emulated class says so:
        ``AVX2 (emulated on AVX-512 BF16), 2 cores (AMD EPYC)``."""
        return f"{self.class_label}, {self.cores} core{'s' if self.cores != 1 else ''} ({self.model})"

    @property
    def class_label(self) -> str:
        """``AVX-512 BF16``, or ``AVX2 (emulated on AVX-512 BF16)`` (beside every figure)."""
        if self.native_class is not None and self.native_class != self.cpu_class:
            return f"{self.cpu_class} (emulated on {self.native_class})"
        return str(self.cpu_class)

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "class": str(self.cpu_class),
            "class_label": self.class_label,
            "native_class": str(self.native_class or self.cpu_class),
            "emulation": self.emulation,
            "cores": self.cores,
            "machine": self.machine,
            "label": self.label,
        }


def _native_class(flags: frozenset[str], machine: str) -> CPUClass:
    if machine.startswith(("aarch64", "arm")):
        return CPUClass.ARM_BF16 if "bf16" in flags else CPUClass.ARM
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return CPUClass.AVX512_BF16
    if "avx512f" in flags:
        return CPUClass.AVX512
    if "avx2" in flags:
        return CPUClass.AVX2
    return CPUClass.OLDER


def _cap(klass: CPUClass, emulation: str | None) -> CPUClass:
    if emulation is None or klass not in _X86_ORDER:
        return klass
    cap = _ONEDNN_CAPS.get(emulation.split("=", 1)[-1].strip().lower())
    if cap is None:
        return klass
    return min(klass, cap, key=_X86_ORDER.index)


def parse_cpu(cpuinfo: str, cores: int, env: Mapping[str, str], machine: str = "x86_64") -> CPUInfo:
    """A :class:`CPUInfo` from the text of ``/proc/cpuinfo`` (the first processor's
    ``model name`` and ``flags``; ``Features`` on Arm), the usable core count and the
    environment (``VP_EMULATE_CPU``, else ``ONEDNN_MAX_CPU_ISA``). Unknown or missing fields
    give the weakest class."""
    model = ""
    flags: frozenset[str] = frozenset()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    emulation = None
    for name in ("VP_EMULATE_CPU", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        if env.get(name):
            emulation = f"{name}={env[name]}"
            break
    info = CPUInfo(model or machine, flags, max(1, cores), machine, None, emulation)
    native = _native_class(flags, machine)
    if info.cpu_class != native:
        return replace(info, native_class=native)
    return replace(info, emulation=None)  # a cap at or above the CPU's own class changes nothing


@functools.cache
def this_cpu() -> CPUInfo:
    """This machine's CPU (read once). Activates ``VP_EMULATE_CPU`` (sets the libraries'
    caps in the environment; a one-line :class:`ConfigError` for an unknown class)."""
    from voice_pipeline.emulation import activate

    activate()
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    info = parse_cpu(text, cores, os.environ, platform.machine() or "x86_64")
    if not text and platform.processor():
        info = replace(info, model=platform.processor())
    return info
