"""The ``barge_in`` section of the config: when user speech interrupts the assistant, and
what it said (re-exported by :mod:`voice_pipeline.config`; the decisions are
:mod:`voice_pipeline.turntaking.bargein`'s)."""

from __future__ import annotations

from dataclasses import dataclass

from voice_pipeline.errors import ConfigError

# fmt: off
DEFAULT_BACKCHANNELS = (
    "uh-huh", "uh huh", "mm-hmm", "mm hmm", "mhm", "mm", "hmm", "yeah", "yes", "yep", "yup", "okay",
    "ok", "right", "sure", "i see", "got it", "uh", "um", "ah", "oh", "cool", "nice",
)
#: what a user says to make the assistant stop talking
DEFAULT_STOP_PHRASES = (
    "stop", "stop it", "stop talking", "stop that", "never mind", "nevermind", "forget it",
    "forget that", "cancel", "cancel that", "be quiet", "quiet", "shut up", "hush", "enough",
    "that's enough", "that is enough",
)
# fmt: on


@dataclass(frozen=True, slots=True)
class BargeInConfig:
    """When user speech interrupts the assistant (see voice_pipeline/turntaking/bargein.py)."""

    enabled: bool = True
    #: voiced user speech (echo excluded) while the assistant is audible that pauses it at once
    #: (160 ms: barge-in stop p95 about 180-200 ms at the wire; 200 ms gave 220-235)
    min_speech_ms: int = 160
    #: a paused reply is cancelled for good once the user has spoken this long (no backchannel is)
    confirm_speech_ms: int = 800
    #: utterances made only of these words do not interrupt (the paused reply resumes)
    backchannels: tuple[str, ...] = DEFAULT_BACKCHANNELS
    #: words that cut a reply and end in a sentence of these alone ("Stop!", "Okay, never mind."):
    #: the reply stops and they are not answered, the assistant says no more (() = off: answered
    #: like any words; turntaking/bargein.py, asks_to_stop)
    stop_phrases: tuple[str, ...] = DEFAULT_STOP_PHRASES
    #: ... and so are words that start this soon after a reply was heard to its end (a stop
    #: said as it ended was meant for it; 0 = only words that cut a reply, or that follow a
    #: stop left unanswered with no reply heard to its end since: "Stop. ... Stop!")
    stop_after_reply_ms: int = 1500
    #: resume a paused reply when the interruption had no words, only backchannels, or echo
    resume_after_false_interruption: bool = True
    #: tell the assistant's own voice coming back into the microphone from the user's
    echo_suppression: bool = True
    #: residual/microphone energy ratio (dB) below which a frame counts as echo
    echo_residual_db: float = -6.0
    #: longest echo path delay searched (speaker -> microphone, plus transport lag)
    echo_max_delay_ms: int = 400


def validate_barge_in(b: BargeInConfig) -> None:
    if b.min_speech_ms < 0 or b.confirm_speech_ms < b.min_speech_ms or b.echo_max_delay_ms < 0:
        raise ConfigError("barge_in: need 0 <= min_speech_ms <= confirm_speech_ms, echo_max_delay_ms >= 0")
    if b.stop_after_reply_ms < 0:
        raise ConfigError("barge_in.stop_after_reply_ms must be >= 0")
