"""Traces across the scale-out set-up, with the real models: a turn answered by a remote vLLM
server that traces too. The request's W3C ``traceparent`` names the turn's LLM span, so the
server's own span (``--otlp-traces-endpoint``) lands in the session's trace under it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator

import pytest
from otlp_receiver import Received, otlp_receiver
from procs import SERVED_MODEL_NAME, ProcessFailed, vllm_server
from speech import concat, espeak, normalize, silence

from asr.base import ASREngine
from llm.remote import RemoteVLLM
from tts.base import TTS
from vad.base import VAD, TurnModel
from voice_pipeline.config import Config
from voice_pipeline.engines import Engines
from voice_pipeline.models import ModelPaths
from voice_pipeline.runner import run_audio
from voice_pipeline.telemetry.config import TelemetryConfig
from voice_pipeline.telemetry.setup import start_telemetry

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[str, Received]]:
    with otlp_receiver() as found:
        yield found


@pytest.fixture(scope="module")
def traced_vllm(
    model_paths: ModelPaths, collector: tuple[str, Received], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A vLLM OpenAI server that exports its request spans to the test's collector."""
    url, _ = collector
    assert model_paths.llm is not None
    log_path = tmp_path_factory.mktemp("vllm-traced") / "server.log"
    flags = ("--otlp-traces-endpoint", f"{url}/v1/traces")
    try:
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_SERVICE_NAME": "vllm-server",
        }
        with vllm_server(model_paths.llm, log_path, None, *flags, **env) as base:
            yield base
    except ProcessFailed as exc:
        pytest.fail(str(exc))


async def test_the_servers_span_hangs_under_the_turns_llm_span(
    traced_vllm: str,
    collector: tuple[str, Received],
    config: Config,
    silero16: VAD,
    whisper: ASREngine,
    piper: TTS,
    smart_turn: TurnModel,
) -> None:
    url, got = collector
    llm_cfg = dataclasses.replace(
        config.llm, engine="remote", url=traced_vllm, remote_model=SERVED_MODEL_NAME
    )
    cfg = dataclasses.replace(config, llm=llm_cfg, telemetry=TelemetryConfig(flush_timeout_s=10.0))
    tel = start_telemetry(cfg, {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "vp-remote"})
    assert tel is not None
    remote = RemoteVLLM(llm_cfg)
    traced = Engines(vad=silero16, asr=whisper, llm=remote, tts=piper, turn=smart_turn, telemetry=tel)
    await traced.warm_up(cfg.dialogue.system_prompt)  # outside any session: no traceparent
    audio = concat(silence(0.5), espeak("What is the capital of France?"), silence(6.0))
    try:
        result = await asyncio.wait_for(run_audio(traced, cfg, audio, 16000), timeout=120)
    finally:
        await asyncio.to_thread(tel.shutdown)
        await remote.aclose()
    assert len(result.records) == 1 and "paris" in normalize(result.records[0].assistant_text)
    (llm,) = got.named("llm_first_token")
    assert llm.service == "vp-remote"
    deadline = time.monotonic() + 30  # the server exports on its own schedule
    while time.monotonic() < deadline:
        under = [s for s in got.spans if s.parent_id == llm.span_id and s.service != "vp-remote"]
        if under:
            break
        await asyncio.sleep(0.2)
    servers = {(s.name, s.service) for s in got.spans if s.service != "vp-remote"}
    assert under, f"no server span under the LLM span; the server's spans: {servers}"
    assert under[0].trace_id == llm.trace_id
    assert under[0].service == "vllm-server"
