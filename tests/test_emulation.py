"""VP_EMULATE_CPU (voice_pipeline/emulation.py): the environment each engine is given, the
label every figure carries, and -- with the real model, in a subprocess so the patch does not
leak into this test session -- that vLLM's engine really loads its AVX2 kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from voice_pipeline import emulation
from voice_pipeline.cpu import CPUClass, parse_cpu
from voice_pipeline.emulation import Emulated, activate, engine_env, library_env, requested
from voice_pipeline.errors import ConfigError

if TYPE_CHECKING:
    from voice_pipeline.models import ModelPaths

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("avx2", Emulated.AVX2),
        ("AVX2", Emulated.AVX2),
        (" avx512 ", Emulated.AVX512),
        ("", None),
        ("off", None),
    ],
)
def test_the_switch_names_a_class_or_nothing(value: str, target: Emulated | None) -> None:
    assert requested({"VP_EMULATE_CPU": value}) == target
    assert requested({}) is None


def test_an_unknown_class_is_a_one_line_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"^VP_EMULATE_CPU=avx3: unknown CPU class \(use one of: avx2, avx512\)$"
    ):
        requested({"VP_EMULATE_CPU": "avx3"})


def test_avx2_caps_every_library_that_has_a_cap() -> None:
    assert library_env(Emulated.AVX2) == {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "DNNL_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
    }
    # every torch probe vLLM reads to pick AVX-512 kernels answers False under AVX2
    assert set(emulation.TARGETS[Emulated.AVX2].false_probes) >= {
        "_is_avx512_supported",
        "_is_avx512_bf16_supported",
        "_is_amx_tile_supported",
    }
    assert "_is_avx512_supported" not in emulation.TARGETS[Emulated.AVX512].false_probes


def test_activate_sets_the_caps_only_when_asked() -> None:
    env = {"VP_EMULATE_CPU": "avx2", "PATH": "/bin"}
    assert activate(env) is Emulated.AVX2
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["CT2_FORCE_CPU_ISA"] == "AVX2"
    assert env["PATH"] == "/bin"
    untouched = {"PATH": "/bin"}
    assert activate(untouched) is None
    assert untouched == {"PATH": "/bin"}


def test_the_engine_process_gets_the_site_dir_first_on_its_path() -> None:
    env = engine_env({"VP_EMULATE_CPU": "avx2", "PYTHONPATH": f"/somewhere{os.pathsep}{ROOT}"})
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(emulation.SITE_DIR), str(ROOT), "/somewhere"]
    assert (emulation.SITE_DIR / "sitecustomize.py").is_file()
    assert env["VP_EMULATE_CPU"] == "avx2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert engine_env({"PYTHONPATH": "/somewhere"}) == {}


def test_an_emulated_figure_is_labelled_as_emulated() -> None:
    flags = "fpu sse sse2 avx avx2 fma avx512f avx512bw avx512vl avx512_bf16 avx512_vnni"
    text = f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n"
    cpu = parse_cpu(text, 2, {"VP_EMULATE_CPU": "avx2"})
    assert cpu.cpu_class is CPUClass.AVX2 and not cpu.bf16_native  # so float32 is chosen
    assert cpu.label == "AVX2 (emulated on AVX-512 BF16), 2 cores (AMD EPYC)"
    # on a CPU that is AVX2 already there is nothing to emulate, and the label says so
    avx2_only = text.replace(" avx512f avx512bw avx512vl avx512_bf16 avx512_vnni", "")
    assert parse_cpu(avx2_only, 2, {"VP_EMULATE_CPU": "avx2"}).label == "AVX2, 2 cores (AMD EPYC)"


def test_a_subprocess_with_the_switch_runs_torch_on_avx2() -> None:
    """``this_cpu()`` activates the switch before torch runs anything: ATen then dispatches
    AVX2 kernels and the patched probes answer False (a real torch, no model)."""
    code = (
        "import json\n"
        "from voice_pipeline.cpu import this_cpu\n"
        "from voice_pipeline.emulation import patch_torch\n"
        "cpu = this_cpu()\n"
        "patched = patch_torch()\n"
        "import torch\n"
        "print(json.dumps({'label': cpu.class_label, 'aten': torch.backends.cpu.get_cpu_capability(),"
        " 'avx512': torch.cpu._is_avx512_supported(), 'patched': patched}))\n"
    )
    env = {**os.environ, "VP_EMULATE_CPU": "avx2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["aten"] == "AVX2"
    assert out["avx512"] is False and "_is_avx512_supported" in out["patched"]
    assert out["label"].startswith("AVX2")


def test_an_unknown_class_stops_a_command_with_one_line() -> None:
    env = {**os.environ, "VP_EMULATE_CPU": "avx9", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "voice_pipeline.cli", "doctor", "--no-llm"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "voice-pipeline doctor: error: VP_EMULATE_CPU=avx9: unknown CPU class (use one of: avx2, avx512)"
    )
    assert "Traceback" not in proc.stderr


_ENGINE_PROBE = """
import asyncio, json, sys
from pathlib import Path

import psutil

from llm.base import ChatMessage
from llm.vllm_engine import VLLMEngine
from voice_pipeline.config import LLMConfig
from voice_pipeline.cpu import this_cpu


def vllm_kernels(pid):
    with open(f"/proc/{pid}/maps") as fh:
        return sorted({Path(l.split()[-1]).name for l in fh if "/vllm/_C" in l.split()[-1]})


async def ask(engine):
    text = ""
    async for delta in engine.stream([ChatMessage("user", "What is the capital of France?")], "q"):
        text += delta.text
    return text


engine = VLLMEngine(LLMConfig(), Path(sys.argv[1]))
children = psutil.Process().children(recursive=True)
reply = asyncio.run(ask(engine))
kernels = sorted({name for child in children for name in vllm_kernels(child.pid)})
asyncio.run(engine.aclose())
out = {"label": this_cpu().class_label, "settings": engine.settings, "kernels": kernels, "reply": reply}
print(json.dumps(out))
"""


@pytest.mark.real_models
def test_the_emulated_engine_loads_vllms_avx2_kernels(model_paths: ModelPaths) -> None:
    """The engine process, spawned by vLLM, loads ``vllm/_C_AVX2.abi3.so`` and no AVX-512
    build, runs in float32 and answers; oneDNN there reports AVX2 (``ONEDNN_VERBOSE``)."""
    assert model_paths.llm is not None
    env = {**os.environ, "VP_EMULATE_CPU": "avx2", "ONEDNN_VERBOSE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _ENGINE_PROBE, str(model_paths.llm)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    out = json.loads(lines[-1])
    assert out["kernels"] == ["_C_AVX2.abi3.so"]
    assert out["settings"]["dtype"] == "float32"
    assert out["label"].startswith("AVX2")
    assert "Paris" in out["reply"]
    isa = [line for line in lines if line.startswith("onednn_verbose") and ",isa:" in line]
    assert isa and all(line.endswith("isa:Intel AVX2") for line in isa), isa
    matmuls = [line for line in lines if ",exec,cpu,matmul," in line]
    assert matmuls and not any("avx512" in line for line in matmuls)
