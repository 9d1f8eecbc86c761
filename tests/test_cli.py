"""The ``voice-pipeline`` command's user-facing behaviour that needs no model: help,
clear errors for bad input and bad config (exit code 1, one line, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voice_pipeline.audio import read_audio
from voice_pipeline.errors import AudioInputError

EXE = [sys.executable, "-m", "voice_pipeline.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=120)


def test_help_lists_the_subcommands() -> None:
    out = run("--help")
    assert out.returncode == 0
    for cmd in ("models", "run"):
        assert cmd in out.stdout


def test_run_help_explains_the_options() -> None:
    out = run("run", "--help")
    assert out.returncode == 0
    for opt in ("--input", "--output", "--report", "--fast", "--config", "--llm-url"):
        assert opt in out.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "not a readable audio file"),
        (b"this is not audio at all" * 10, "not a readable audio file"),
    ],
)
def test_run_rejects_bad_input_clearly(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "in.wav"
    if content is not None:
        path.write_bytes(content)
    out = run("run", "--input", str(path), "--output", str(tmp_path / "out.wav"))
    assert out.returncode == 1
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_run_rejects_a_file_with_no_samples(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros((0, 1), dtype=np.float32), 16000)
    out = run("run", "--input", str(path))
    assert out.returncode == 1
    assert "holds no audio" in out.stderr


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("vad:\n  end_silence_mss: 300\n")
    out = run("models", "--config", str(cfg))
    assert out.returncode == 1
    assert "end_silence_mss" in out.stderr
    assert "Traceback" not in out.stderr


def test_no_subcommand_prints_help() -> None:
    out = run()
    assert out.returncode == 2
    assert "models" in out.stdout


def test_any_rate_and_channel_count_is_read_as_mono(tmp_path: Path) -> None:
    t = np.arange(44100) / 44100
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    stereo = np.stack([left, left], axis=1).astype(np.float32)
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo, 44100)
    mono, rate = read_audio(path)
    assert rate == 44100
    assert mono.shape == (44100,)
    assert np.allclose(mono, left, atol=1e-3)


def test_non_finite_samples_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "nan.wav"
    data = np.zeros(1600, dtype=np.float32)
    data[10] = np.nan
    sf.write(path, data, 16000, subtype="FLOAT")
    with pytest.raises(AudioInputError, match="NaN"):
        read_audio(path)
