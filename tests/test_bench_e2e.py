"""``voice-pipeline bench`` end to end with the real models: the command itself (in a worker
thread, with its own event loop) drives an in-process server on a free port.

Checks the report's fields and that the figures exist and are sane; no timing assertions.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from servers import running_server
from speech import word_error_rate

from voice_pipeline.cli import main
from voice_pipeline.config import Config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.ledger import CRITICAL_PATH

pytestmark = pytest.mark.real_models

TURN_FIELDS = {
    "session", "turn", "text", "kind", "interrupt_planned", "interrupt_after_s", "interrupt_skipped",
    "server_turn_ids", "speech_onset_s", "speech_end_s", "first_voiced_s", "voice_to_voice_ms",
    "barge_in_stop_ms", "reply_audio_s", "cleared", "server_interrupted", "records", "error",
    "paused", "premature_end", "continued", "talked_over_s",
}  # fmt: skip
STEP_FIELDS = {
    "sessions", "refused", "duration_s", "turns", "turns_completed", "turns_per_s", "interrupts_planned",
    "interrupts_done", "summary", "over_budget", "cpu", "bench", "server_metrics", "turn_results",
}  # fmt: skip


async def bench(*args: str) -> int:
    """``voice-pipeline bench ARGS`` in a worker thread (it runs its own event loop)."""
    return await asyncio.to_thread(main, ["bench", *args])


def no_traceback(err: str) -> None:
    assert "Traceback" not in err, err


async def test_two_callers_two_turns_one_interrupted(
    engines: Engines, config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_html = tmp_path / "bench.json", tmp_path / "bench.html"
    async with running_server(engines, config, max_sessions=4) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        rc = await bench(
            "--url", url, "--sessions", "2", "--turns", "2", "--interrupt-share", "0.25",
            "--pause-s", "0.5", "--seed", "3", "--json", str(out_json), "--html", str(out_html),
        )  # fmt: skip
    out, err = capsys.readouterr()
    no_traceback(err)
    assert rc == 0, err
    # progress: one line per finished turn on stderr; the summary on stdout
    assert len(re.findall(r"^session \d turn \d: voice-to-voice \d+ ms", err, re.M)) == 4, err
    assert "voice_to_voice (client, wire)" in out and "turns/s" in out

    report = json.loads(out_json.read_text())
    assert report["schema"] == "voice-pipeline.bench/1"
    assert report["config"]["seed"] == 3 and report["config"]["sessions"] == 2
    assert len(report["config"]["speech"]) >= 8
    assert report["server"]["budget_source"] == "the server's ready message"
    assert report["server"]["budgets"]["voice_to_voice"] > 0
    assert report["server"]["health"]["max_sessions"] == 4
    # what the figures ran on: the settings chosen for this machine, as the engine runs them
    machine = report["machine"]["server"]
    assert machine["cpu"]["class"] == str(this_cpu().cpu_class) and machine["cpu"]["cores"] >= 1
    running = engines.llm.settings  # type: ignore[attr-defined]
    keys = {"llm_dtype": "dtype", "llm_threads": "threads", "kv_block_tokens": "kv_block_tokens"}
    assert {key: machine[key] for key in keys} == {key: running[name] for key, name in keys.items()}
    assert machine["llm_compile"] == running["compile"]
    assert machine["llm_dtype"] == ("bfloat16" if this_cpu().bf16_native else "float32")
    assert f"server machine: {this_cpu().label}; LLM {running['dtype']}" in out
    assert report["ramp"] is None
    (step,) = report["steps"]
    assert set(step) == STEP_FIELDS
    assert step["turns"] == step["turns_completed"] == 4 and step["turns_per_s"] > 0
    assert step["interrupts_planned"] == step["interrupts_done"] == 1
    turns = step["turn_results"]
    for t in turns:
        assert set(t) == TURN_FIELDS
        assert t["error"] is None
        assert t["voice_to_voice_ms"] > 0, t
        assert t["records"] and t["server_turn_ids"]
        stages = t["records"][-1]["stages_ms"]
        assert {s.name for s in CRITICAL_PATH} <= set(stages)
    (cut,) = [t for t in turns if t["interrupt_planned"]]
    assert cut["kind"] == "question" and cut["turn"] == 0
    assert cut["barge_in_stop_ms"] > 0 and cut["cleared"]
    assert cut["server_interrupted"] is True
    assert "barge_in_stop" in cut["records"][-1]["stages_ms"]
    (follow,) = [t for t in turns if t["session"] == cut["session"] and t["turn"] == 1]
    assert follow["kind"] == "interruption" and follow["server_interrupted"] is False
    assert [t for t in turns if t["barge_in_stop_ms"] is not None] == [cut]
    # two callers on one Whisper engine, their partials waiting for it to be idle: every
    # question was still heard right, and no decode is left counted on the engine (a count
    # that leaked would keep every later session's partials off)
    for t in turns:
        if t["kind"] == "question":
            heard = " ".join(r["user_text"] for r in t["records"])
            assert word_error_rate(t["text"], heard) <= 0.4, (t["text"], heard)
    for _ in range(100):
        if not engines.asr_load.busy:
            break
        await asyncio.sleep(0.1)
    assert not engines.asr_load.busy

    client, server = step["summary"]["client"], step["summary"]["server"]
    assert client["voice_to_voice"]["n"] == 4 and client["voice_to_voice"]["p50"] > 0
    assert client["barge_in_stop"]["n"] == 1
    for name in (*(s.name for s in CRITICAL_PATH), "voice_to_voice", "barge_in_stop"):
        assert {"n", "p50", "p95", "p99", "budget", "over_budget_share"} <= set(server[name]), name
    pipe = step["summary"]["pipeline"]
    assert pipe["turns"] >= 3 and 0 <= pipe["turns_over_budget_share"] <= 1
    assert 0 <= pipe["overhead_ms"]["p50"] <= server["voice_to_voice"]["p95"]
    assert 0 <= pipe["overhead_share"] < 1
    assert set(pipe["compute_ms_p50"]) == {"endpoint_wait", "asr_final", "llm", "tts"}
    assert step["cpu"] is not None and 0 < step["cpu"]["utilisation"] and step["cpu"]["cpu_count"] >= 1
    assert step["cpu"]["rss_peak_bytes"] > 0
    assert step["server_metrics"]["delta"]["voice_pipeline_turns_total"] >= 4
    assert step["server_metrics"]["delta"]["voice_pipeline_barge_ins_total"] == 1
    assert "voice_to_voice" in step["server_metrics"]["stage_over_budget_ratio"]
    assert isinstance(report["warnings"], list)

    page = out_html.read_text()
    assert page.count("<svg") == 2 and "per-turn latency waterfall" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page  # self-contained


async def test_sentences_with_pauses_report_the_premature_end_of_turn_rate(
    engines: Engines, config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--pauses: every question a sentence said with 0.4-1.2 s pauses inside (Piper); the server
    keeps each one turn, and the report says so beside voice-to-voice."""
    out_json = tmp_path / "pauses.json"
    async with running_server(engines, config) as srv:
        rc = await bench("--url", f"ws://127.0.0.1:{srv.port}/ws", "--turns", "3", "--interrupt-share", "0",
                         "--pauses", "--pause-s", "0.3", "--seed", "2", "--json", str(out_json))  # fmt: skip
    out, err = capsys.readouterr()
    no_traceback(err)
    assert rc == 0, err
    assert "turn-taking: 3 sentence(s) said with pauses: premature end of turn" in out
    report = json.loads(out_json.read_text())
    assert report["config"]["pauses"] == 1.0
    (step,) = report["steps"]
    turns = step["turn_results"]
    assert len(turns) == 3 and all(t["paused"] and t["error"] is None for t in turns)
    tt = step["summary"]["turn_taking"]
    assert tt["paused_turns"] == 3 and tt["premature_ends"] == sum(t["premature_end"] for t in turns)
    assert 0.0 <= tt["premature_end_rate"] <= 1.0  # the behaviour itself: tests/test_e2e_turn_taking.py
    print(
        "premature end-of-turn rate",
        tt["premature_end_rate"],
        [(t["text"], t["server_turn_ids"]) for t in turns],
    )
    assert tt["voice_to_voice_paused"]["n"] == 3 and tt["voice_to_voice_complete"] is None
    assert sum(tt["end_of_turn_rules"].values()) >= 3
    assert tt["continued"] == sum(t["continued"] for t in turns)


async def test_a_twilio_call(engines: Engines, config: Config, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out_json = tmp_path / "twilio.json"
    async with running_server(engines, config) as srv:
        url = f"ws://127.0.0.1:{srv.port}/twilio"
        rc = await bench("--protocol", "twilio", "--url", url, "--sessions", "1", "--turns", "1",
                         "--json", str(out_json))  # fmt: skip
    _, err = capsys.readouterr()
    no_traceback(err)
    assert rc == 0, err
    report = json.loads(out_json.read_text())
    (step,) = report["steps"]
    (turn,) = step["turn_results"]
    assert turn["error"] is None and turn["voice_to_voice_ms"] > 0 and turn["reply_audio_s"] > 0
    assert turn["records"] == [] and step["summary"]["server"] == {}  # Twilio carries no ledger records
    assert step["summary"]["client"]["voice_to_voice"]["n"] == 1
    assert step["server_metrics"]["delta"]["voice_pipeline_turns_total"] >= 1
    assert any("no per-stage breakdown" in w for w in report["warnings"])
    assert "local latency_budget.yaml" in report["server"]["budget_source"]


async def test_the_ramp_is_stopped_by_the_servers_session_limit(
    engines: Engines, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_server(engines, config, max_sessions=1) as srv:
        url = f"ws://127.0.0.1:{srv.port}/ws"
        # a budget this loose never breaks: the server's limit is what stops the ramp
        rc = await bench("--url", url, "--ramp", "--turns", "1", "--interrupt-share", "0",
                         "--budget-ms", "100000", "--json", "-")  # fmt: skip
    out, err = capsys.readouterr()
    no_traceback(err)
    assert rc == 0, err
    report = json.loads(out)  # --json -: the JSON alone on stdout, the summary on stderr
    ramp = report["ramp"]
    assert ramp["stopped_by"] == "server_limit" and ramp["server_max_sessions"] == 1
    assert [s["sessions"] for s in ramp["steps"]] == [1]
    assert ramp["capacity_sessions"] == 1 and ramp["budget_ms"] == 100000
    assert "max_sessions limit (1) stopped the ramp" in err


async def test_a_session_over_the_limit_is_a_clear_error(
    engines: Engines, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_server(engines, config, max_sessions=1) as srv:
        rc = await bench("--url", f"ws://127.0.0.1:{srv.port}/ws", "--sessions", "2", "--turns", "1",
                         "--wav-dir", "/nonexistent-dir-for-bench")  # fmt: skip
        assert rc == 1  # bad --wav-dir: caught before anything connects
        _, err = capsys.readouterr()
        assert "not a folder" in err
        rc = await bench("--url", f"ws://127.0.0.1:{srv.port}/ws", "--sessions", "2", "--turns", "1")
    _, err = capsys.readouterr()
    no_traceback(err)
    assert rc == 1
    assert "refused the session" in err and "1013" in err and "session limit reached (1)" in err
