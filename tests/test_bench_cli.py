"""``voice-pipeline bench`` without models: its arguments, and clear errors (never a traceback)
for a server that is not there, a refused handshake and bad WAV files; the report renderers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fakes import Fakes
from procs import free_port
from records import turn_record
from servers import with_server

from voice_pipeline.bench.html import to_html
from voice_pipeline.bench.options import BenchOptions
from voice_pipeline.bench.report import to_json
from voice_pipeline.bench.run import BenchResult, StepResult, http_url
from voice_pipeline.bench.scenario import Clip, TurnPlan
from voice_pipeline.bench.stats import RampVerdict, Scrape
from voice_pipeline.bench.text import format_text
from voice_pipeline.bench.tracker import AudioCleared, ReplyAudio, SpeechHeard, Tracker, TurnRecorded, result
from voice_pipeline.cli import main
from voice_pipeline.config import load_config
from voice_pipeline.server.app import VoiceServer


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["bench", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interrupt-share", "1.5"], "--interrupt-share must be between 0 and 1"),
        (["--sessions", "0"], "--sessions must be at least 1"),
        (["--turns", "0"], "--turns must be at least 1"),
        (["--pause-s", "-1"], "--pause-s must not be negative"),
        (["--url", "http://127.0.0.1:8765/ws"], "must be a ws:// or wss:// URL"),
        (["--protocol", "twilio", "--url", "ws://127.0.0.1:8765/ws"], "is the /ws endpoint"),
        (["--url", "ws://127.0.0.1:8765/twilio"], "is the /twilio endpoint"),
        (["--ramp", "--sessions", "2"], "drop --sessions"),
        (["--budget-ms", "500"], "--budget-ms applies to --ramp only"),
        (["--ramp", "--max-sessions", "0"], "--max-sessions must be at least 1"),
    ],
)
def test_bad_arguments_are_refused_with_status_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    rc, _, err = run_cli(capsys, *args)
    assert rc == 2 and message in err, err


def test_help_names_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    flags = "--url --protocol --sessions --turns --interrupt-share --pause-s --seed --wav-dir --json --html"
    for flag in (*flags.split(), "--ramp", "--max-sessions", "--token", "--budget-ms"):
        assert flag in out, flag


def test_a_server_that_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(capsys, "--url", f"ws://127.0.0.1:{free_port()}/ws", "--turns", "1")
    assert rc == 1 and "server not reachable at ws://127.0.0.1:" in err, err


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> None:
    sf.write(path, samples, rate, subtype="PCM_16")


def tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * 220 * np.arange(round(seconds * 16000)) / 16000)).astype(np.float32)


@pytest.mark.parametrize(
    ("files", "args", "message"),
    [
        ({"q.wav": b"RIFF not really a wav"}, ["--interrupt-share", "0"], "not a readable audio file"),
        ({"q.wav": np.zeros(16000, np.float32)}, ["--interrupt-share", "0"], "no speech in it"),
        ({"q.wav": tone(31.0)}, ["--interrupt-share", "0"], "too long for one utterance"),
        ({"q.wav": tone(1.0)}, [], "no interrupt*.wav"),
        ({"interrupt.wav": tone(1.0)}, ["--interrupt-share", "0"], "no question WAV files"),
        ({"notes.txt": b"hello"}, ["--interrupt-share", "0"], "no question WAV files"),
    ],
)
def test_bad_wav_files_fail_before_anything_connects(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, object],
    args: list[str],
    message: str,
) -> None:
    for name, content in files.items():
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            assert isinstance(content, np.ndarray)
            write_wav(tmp_path / name, content)
    url = f"ws://127.0.0.1:{free_port()}/ws"  # nothing listens: the WAVs are checked first
    rc, _, err = run_cli(capsys, "--url", url, "--wav-dir", str(tmp_path), *args)
    assert rc == 1 and message in err, err


@contextlib.asynccontextmanager
async def fake_server(**server: object) -> AsyncIterator[VoiceServer]:
    cfg = load_config(None)
    cfg = with_server(cfg, **{"port": 0, **server})
    srv = VoiceServer(Fakes().engines(), cfg)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()


async def test_a_bad_token_and_a_bad_twilio_token_are_clear_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_wav(tmp_path / "q.wav", tone(1.0))
    async with fake_server(auth_token="right", twilio_token="right") as srv:
        base = f"ws://127.0.0.1:{srv.port}"
        common = ["--turns", "1", "--interrupt-share", "0", "--wav-dir", str(tmp_path)]
        rc = await asyncio.to_thread(main, ["bench", "--url", f"{base}/ws", "--token", "wrong", *common])
        _, err = capsys.readouterr()
        assert rc == 1 and "HTTP 401" in err and "--token" in err and "Traceback" not in err, err
        rc = await asyncio.to_thread(
            main, ["bench", "--protocol", "twilio", "--url", f"{base}/twilio", "--token", "wrong", *common]
        )
        _, err = capsys.readouterr()
        assert rc == 1 and "refused the call" in err and "1008" in err and "Traceback" not in err, err


# ------------------------------------------------------------ the report, from a made-up run


def made_up_result() -> BenchResult:
    clip = Clip("What is <b>two</b> plus two?", np.zeros(16000, np.float32), 16000, 0, 16000)
    tr = Tracker()
    obs = tr.begin(TurnPlan(0, clip, False, 1.0))
    tr.speech_onset(obs, 0.0)
    tr.feed(SpeechHeard(0.2, 1))
    tr.speech_end(obs, 1.0)
    tr.feed(ReplyAudio(1.8, 1, 32000, 16000, voiced=True))
    nxt = tr.begin(TurnPlan(1, clip, True, None))
    tr.speech_onset(nxt, 2.5, interrupting=True)
    tr.feed(SpeechHeard(2.7, 2))
    tr.feed(AudioCleared(2.8, 1))
    stages = {"endpointing": 300.0, "asr_final": 50.0, "llm_first_token": 100.0, "first_clause": 200.0,
              "tts_first_audio": 100.0, "transport": 1.0, "voice_to_voice": 751.0}  # fmt: skip
    tr.feed(TurnRecorded(3.0, 1, turn_record(1, interrupted=True, stages_ms=stages)))
    tr.speech_end(nxt, 3.5)
    tr.feed(ReplyAudio(4.4, 2, 16000, 16000, voiced=True))
    tr.feed(TurnRecorded(6.0, 2, turn_record(2, interrupted=False, stages_ms={"voice_to_voice": 850.0})))
    step = StepResult(1, [result(obs, 0, 0.0), result(nxt, 0, 0.0)], duration_s=6.0, interrupts_planned=1)
    step.scrapes = [
        Scrape(0.0, {"process_cpu_seconds_total": 1.0, "voice_pipeline_cpu_count": 2.0,
                     "process_resident_memory_bytes": 2e9, "voice_pipeline_turns_total": 0.0}),
        Scrape(6.0, {"process_cpu_seconds_total": 10.0, "voice_pipeline_cpu_count": 2.0,
                     "process_resident_memory_bytes": 2.1e9, "voice_pipeline_turns_total": 2.0}),
    ]  # fmt: skip
    budgets = {"voice_to_voice": 800.0, "barge_in_stop": 250.0, "endpointing": 350.0, "asr_final": 150.0}
    opts = BenchOptions("ws://127.0.0.1:1/ws", ramp=True, max_sessions=1, turns=2)
    res = BenchResult(opts, budgets, "the server's ready message", {"max_sessions": 4}, [clip.text], [step])
    res.verdict = RampVerdict(False, 0, "budget")
    return res


def test_the_report_has_every_figure_and_warns_past_70_percent_cpu() -> None:
    report = json.loads(json.dumps(to_json(made_up_result())))  # JSON-ready
    (step,) = report["steps"]
    assert step["cpu"]["utilisation"] == 0.75  # 9 CPU s over 6 s x 2 CPUs
    assert any("CPU utilisation 75%" in w for w in report["warnings"])
    assert step["summary"]["client"]["voice_to_voice"]["n"] == 2
    # all the reply came before the interruption's onset (2.5 s): the clear (2.8 s) ended it
    assert step["summary"]["client"]["barge_in_stop"]["p50"] == 300.0
    over = {(r["source"], r["stage"]) for r in step["over_budget"]}
    assert ("client", "voice_to_voice") in over and ("client", "barge_in_stop") in over
    assert ("server", "endpointing") not in over
    assert report["ramp"]["capacity_sessions"] == 0 and report["ramp"]["stopped_by"] == "budget"
    text = format_text(made_up_result())
    assert "capacity: 0 session(s) (p95 voice-to-voice broke its budget)" in text
    assert "WARNING: server CPU utilisation 75%" in text
    page = to_html(report)
    assert page.count("<svg") == 2
    assert "<b>two</b>" not in page and "&lt;b&gt;two&lt;/b&gt;" in page  # text is escaped


def test_http_urls_sit_beside_the_websocket_endpoint() -> None:
    assert http_url("ws://127.0.0.1:8765/ws", "metrics") == "http://127.0.0.1:8765/metrics"
    assert (
        http_url("wss://voice.example.org/voice/twilio", "healthz")
        == "https://voice.example.org/voice/healthz"
    )


def test_the_report_names_the_machine_it_ran_on() -> None:
    from voice_pipeline.config import ASRConfig, LLMConfig
    from voice_pipeline.cpu import parse_cpu
    from voice_pipeline.tuning import choose

    avx2 = parse_cpu("model name\t: AMD EPYC\nflags\t\t: sse avx avx2 fma\n", 2, {})
    res = made_up_result()
    machine = choose(avx2, LLMConfig(), ASRConfig()).as_dict()
    machine["floors"] = {"copy_gb_s": 23.0, "matmul_gflops": 140.0, "matmul_dtype": "float32",
                         "llm": {"prefill_ms_per_token": 1.52, "decode_ms_per_token": 23.4}}  # fmt: skip
    res.health = {"max_sessions": 4, "machine": machine}
    res.bench_machine = avx2.as_dict()
    report = json.loads(json.dumps(to_json(res)))
    server = report["machine"]["server"]
    assert server["cpu"]["class"] == "AVX2" and server["cpu"]["cores"] == 2
    assert (server["llm_dtype"], server["llm_threads"], server["kv_block_tokens"]) == ("float32", 1, 32)
    line = "server machine: AVX2, 2 cores (AMD EPYC); LLM float32, 1 thread(s), KV blocks of 32 tokens"
    assert line in format_text(res)
    assert f"{line}; ASR 1 thread(s), 2 decode(s) at once" in format_text(res)
    assert "bench machine" not in format_text(res)  # the same machine: said once
    floors = "server floors: memory 23.0 GB/s, matmul 140.0 GFLOPS (float32); LLM link >= 1.52 ms per prompt"
    assert floors in format_text(res) and ">= 23.4 ms per generated token" in format_text(res)
    assert line in to_html(report)
    # an older server without machine in /healthz, a bench elsewhere
    res.health = {"max_sessions": 4}
    other = parse_cpu("model name\t: Other\nflags\t\t: avx2 avx512f avx512_bf16\n", 8, {})
    res.bench_machine = other.as_dict()
    text = format_text(res)
    assert "server machine: not reported" in text and "bench machine: AVX-512 BF16, 8 cores (Other)" in text
