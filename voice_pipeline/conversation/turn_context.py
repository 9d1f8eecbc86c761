"""What each :class:`~voice_pipeline.conversation.turn.Turn` is given: its settings (cut
from the config by :mod:`~voice_pipeline.conversation.wiring`) and the context every turn of
one session shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from voice_pipeline.config import ASRConfig, TurnConfig, VADConfig
from voice_pipeline.conversation.reply import ReplyDeps
from voice_pipeline.conversation.speculation import PrefetchSettings
from voice_pipeline.conversation.utterance import Spawn, UtteranceEngines
from voice_pipeline.transport import Transport
from voice_pipeline.turntaking.echo import EchoGate
from voice_pipeline.turntaking.messages import EvidenceFound


@dataclass(frozen=True, slots=True)
class TurnSettings:
    """What a turn and its utterance read of the config (a reply's own are in its
    :class:`~voice_pipeline.conversation.reply.ReplyDeps`)."""

    asr: ASRConfig
    turn: TurnConfig
    prefetch: PrefetchSettings
    pipeline_rate_hz: int  # audio.pipeline_rate_hz: input samples -> ms
    #: vad.end_silence_ms: the policy's wait beyond it is the user's (turn.DELIBERATE and the rest)
    end_silence_ms: int
    filler_after_ms: int  # dialogue.filler_after_ms

    def configured(self, vad: VADConfig, turn: TurnConfig, *, hold_first_chunk: bool) -> TurnSettings:
        """The settings with a client's new turn-taking sections (``Session.configure``);
        ``hold_first_chunk``: whether a speculative reply synthesizes its first chunk ahead."""
        prefetch = dataclasses.replace(self.prefetch, hold_first_chunk=hold_first_chunk)
        return dataclasses.replace(self, turn=turn, end_silence_ms=vad.end_silence_ms, prefetch=prefetch)


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What every turn of one session shares: each utterance's engines and every reply's
    dependencies, the settings, and the session's transport, clocks, echo check and callbacks."""

    engines: UtteranceEngines
    settings: TurnSettings
    reply: ReplyDeps
    transport: Transport
    clock: Callable[[], int]
    sleep_until: Callable[[int], Awaitable[None]]
    echo: EchoGate
    #: the monotonic time of an input sample
    time_of: Callable[[int], int]
    spawn: Spawn
    on_evidence: Callable[[EvidenceFound], None]
    #: the reply of (turn id, epoch) became audible
    on_audible: Callable[[int, int], None]
    #: the committed words of the user's partial transcript grew
    on_committed: Callable[[str], None]
