"""How a session cuts the typed config and the loaded engines into what each part receives.

:class:`~voice_pipeline.conversation.session.Session` is the composition root of one
conversation: it alone holds the whole :class:`~voice_pipeline.config.Config` and the
whole :class:`~voice_pipeline.engines.Engines`. Everything below it gets only its own
sections and engines, cut out here:

==========================  ===============================================================
each :class:`Utterance`     :class:`UtteranceEngines` (ASR, LLM, TTS, the turn model, the
                            speculation budget, the CPU's turn-model start), the ``asr`` and
                            ``turn`` sections and :class:`PrefetchSettings`
                            (``dialogue.speculative_audio``, the ``tts`` chunking)
each :class:`Turn`          :class:`TurnSettings` (those sections, the pipeline rate,
                            ``vad.end_silence_ms``, ``dialogue.filler_after_ms``)
each :class:`Reply`         :class:`ReplyDeps` (LLM, TTS, ``llm.max_tokens``, the ``tts``
                            chunking, ``dialogue.filler_text``, the session's tools)
==========================  ===============================================================

The ``tts`` chunking is the section with its first chunk's words resolved (:func:`chunking`):
unless configured, they follow the LLM's speed measured when the engines warmed up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from voice_pipeline.config import ASRConfig, Config, TTSConfig
from voice_pipeline.conversation.phrases import Phrases
from voice_pipeline.conversation.reply import ReplyDeps
from voice_pipeline.conversation.speculation import PrefetchSettings
from voice_pipeline.conversation.turn_context import TurnSettings
from voice_pipeline.conversation.utterance import UtteranceEngines
from voice_pipeline.engines import Engines
from voice_pipeline.tools.runner import ToolBox
from voice_pipeline.transport import Transport
from voice_pipeline.tuning import choose_first_chunk_words, choose_partial_interval

__all__ = ["chunking", "kv_block_tokens", "listening", "reply_deps", "turn_settings", "utterance_engines"]


def utterance_engines(engines: Engines) -> UtteranceEngines:
    tuning = engines.tuning
    start = None if tuning is None else tuning.turn_model_start
    return UtteranceEngines(
        engines.asr, engines.llm, engines.tts, engines.speculation, engines.turn, start, engines.asr_load
    )


def chunking(engines: Engines, tts: TTSConfig) -> TTSConfig:
    """``tts`` as every reply (and a speculative one) cuts its text: the first chunk's words
    chosen from the LLM's measured speed unless configured."""
    first = choose_first_chunk_words(tts.first_chunk_words, engines.llm_ms_per_token)
    return replace(tts, first_chunk_words=first)


def listening(engines: Engines, asr: ASRConfig) -> ASRConfig:
    """``asr`` as every utterance is transcribed: no partials where the warm-up's decode was
    slower than ``asr.partials_max_decode_ms`` (:func:`~voice_pipeline.tuning.choose_partial_interval`)."""
    measured = engines.asr_decode_ms
    interval = choose_partial_interval(asr.partial_interval_ms, asr.partials_max_decode_ms, measured)
    return replace(asr, partial_interval_ms=interval)


def turn_settings(cfg: Config, engines: Engines) -> TurnSettings:
    prefetch = PrefetchSettings(cfg.dialogue.speculative_audio, chunking(engines, cfg.tts))
    return TurnSettings(
        listening(engines, cfg.asr),
        cfg.turn,
        prefetch,
        pipeline_rate_hz=cfg.audio.pipeline_rate_hz,
        end_silence_ms=cfg.vad.end_silence_ms,
        filler_after_ms=cfg.dialogue.filler_after_ms,
    )


def reply_deps(
    engines: Engines,
    cfg: Config,
    transport: Transport,
    clock: Callable[[], int],
    sleep_until: Callable[[int], Awaitable[None]],
    phrases: Phrases,
    tools: ToolBox | None = None,
) -> ReplyDeps:
    """What every reply of the session runs on (``tools``: the session's server-side tools;
    None: none, or a realtime session's client tools)."""
    return ReplyDeps(
        engines.llm,
        engines.tts,
        transport,
        clock,
        sleep_until,
        phrases,
        max_tokens=cfg.llm.max_tokens,
        tts_cfg=chunking(engines, cfg.tts),
        filler_text=cfg.dialogue.filler_text,
        repeat_stop_words=cfg.dialogue.repeat_stop_words,
        tools=tools,
    )


def kv_block_tokens(engines: Engines, cfg: Config) -> int:
    """The LLM's KV cache block (its prefix cache reuses whole blocks): as the engines
    were tuned, else as configured (32 if automatic)."""
    tuning = engines.tuning
    return tuning.kv_block_tokens if tuning is not None else cfg.llm.kv_block_tokens or 32
