"""``voice-pipeline doctor``: the machine, the settings chosen for it, and the LLM
micro-benchmark beside its floors. Checks the output's shape; asserts no timing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from voice_pipeline.config import Config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.doctor import DoctorReport, format_report, llm_figures, measure_floors, model_parameters
from voice_pipeline.tuning import choose

if TYPE_CHECKING:
    from llm.base import LLM
    from voice_pipeline.models import ModelPaths

EXE = [sys.executable, "-m", "voice_pipeline.cli"]


def test_doctor_without_the_llm_prints_machine_settings_and_floors(tmp_path: Path) -> None:
    out_json = tmp_path / "doctor.json"
    proc = subprocess.run(
        [*EXE, "doctor", "--no-llm", "--json", str(out_json)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    cpu = this_cpu()
    assert f"class {cpu.class_label}; {cpu.cores} usable core(s)" in out
    for key in ("llm.dtype", "llm.threads", "asr.cpu_threads", "llm.kv_block_tokens", "llm.compile"):
        assert re.search(rf"^  {re.escape(key)} +\S+ +machine: ", out, re.M), out
    assert re.search(r"^floors: +memory copy [\d.]+ GB/s .* matmul \d+ GFLOPS", out, re.M), out
    report = json.loads(out_json.read_text())
    assert report["schema"] == "voice-pipeline.doctor/1" and report["llm"] is None
    assert report["machine"]["cpu"]["class"] == str(cpu.cpu_class)
    assert report["floors"]["copy_gb_s"] > 0 and report["floors"]["matmul_gflops"] > 0


def test_an_explicit_dtype_is_reported_as_the_configs(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("llm: {dtype: float32, kv_block_tokens: 64}\n")
    proc = subprocess.run(
        [*EXE, "doctor", "--no-llm", "--config", str(cfg)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^  llm\.dtype +float32 +config: set in the config", proc.stdout, re.M)
    assert re.search(r"^  llm\.kv_block_tokens +64 +config: ", proc.stdout, re.M)


def test_bad_reps_is_a_clear_error() -> None:
    proc = subprocess.run([*EXE, "doctor", "--reps", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "--reps" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.real_models
async def test_the_llm_micro_benchmark_runs_and_prints_beside_its_floors(
    vllm_engine: LLM, model_paths: ModelPaths, config: Config
) -> None:
    assert model_paths.llm is not None
    tuning = choose(this_cpu(), config.llm, config.asr)
    params = model_parameters(model_paths.llm)
    assert params is not None and 100e6 < params[0] < 200e6 and 0 < params[1] < params[0]  # SmolLM2-135M
    prompt = config.dialogue.system_prompt
    figures = await llm_figures(vllm_engine, prompt, reps=2, parameters=params, dtype=tuning.dtype)
    report = DoctorReport(tuning, measure_floors(tuning), figures)
    text = format_report(report)
    print(f"\n{text}")
    assert figures.prompt_tokens > 32 and figures.decoded_tokens > 1
    assert figures.warm_cached_tokens is not None and figures.warm_cached_tokens >= 32
    for name in ("first token, ", "first token, system prompt cached", "per generated token"):
        assert re.search(rf"^  {name}.* [\d.]+ ms", text, re.M), text
    assert re.search(r"per generated token .* ms +[\d.]+ ms +[\d.]+x +weight bytes / memory bandwidth", text)
    assert re.search(r"cold +[\d.]+ ms +[\d.]+ ms +[\d.]+x +prefill arithmetic", text)
    data = json.loads(json.dumps(report.as_dict()))
    assert data["decode_floor_ms"] > 0 and data["prefill_floor_ms"] > 0
    assert data["llm"]["ms_per_token"] > 0 and data["llm"]["first_token_cold_ms"] > 0
    assert vllm_engine.unfinished_requests() == 0


def test_llm_link_floors_from_bandwidth_and_matmul() -> None:
    from voice_pipeline.doctor import Floors, llm_floors

    floors = Floors(copy_gb_s=20.0, matmul_gflops=100.0, matmul_dtype="float32", matmul_threads=1)
    got = llm_floors(floors, (135_000_000, 28_000_000), "float32")
    assert got == {"prefill_ms_per_token": 2.14, "decode_ms_per_token": 27.0}  # 2*107M/100G; 540 MB/20 GB/s
    assert llm_floors(floors, (135_000_000, 28_000_000), "bfloat16")["decode_ms_per_token"] == 13.5
    assert llm_floors(floors, None, "float32") == {"prefill_ms_per_token": None, "decode_ms_per_token": None}
