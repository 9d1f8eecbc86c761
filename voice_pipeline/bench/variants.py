"""Turn-taking variants the benchmarks compare with the defaults (pure).

``noverdict``: no longer wait after neutral words for a turn model's verdict on its way
(``turn.verdict_silence_ms`` = ``turn.unsure_silence_ms``). ``wait<N>``: the short wait
(``vad.end_silence_ms``) N ms, the medium and verdict waits raised to it where shorter:
the price in latency of keeping quiet through longer pauses. ``sound<N>``: the wait when only
the sound says unfinished (``turn.sound_silence_ms``) N ms (``sound2000``: as before 2026-12-06).
``grace<N>``: speech up to N ms after a reply's first audio continues its turn
(``turn.continuation_grace_ms``; ``grace900``: as before session 26). ``statement<N>``: neutral
words that sound finished wait N ms (``turn.statement_silence_ms``; questions keep the short wait).
"""

from __future__ import annotations

import dataclasses
import re

from voice_pipeline.config import Config, validate
from voice_pipeline.errors import ConfigError

_WAIT = re.compile(r"wait(\d+)")
_SOUND = re.compile(r"sound(\d+)")
_GRACE = re.compile(r"grace(\d+)")
_STATEMENT = re.compile(r"statement(\d+)")


def turn_variant(base: Config, mode: str) -> Config | None:
    """``base`` changed as ``mode`` says, or None when ``mode`` is not one of these."""
    if mode == "noverdict":
        turn = dataclasses.replace(base.turn, verdict_silence_ms=base.turn.unsure_silence_ms)
        return dataclasses.replace(base, turn=turn)
    if (m := _SOUND.fullmatch(mode)) is not None:
        return dataclasses.replace(
            base, turn=dataclasses.replace(base.turn, sound_silence_ms=int(m.group(1)))
        )
    if (m := _GRACE.fullmatch(mode)) is not None:
        return dataclasses.replace(
            base, turn=dataclasses.replace(base.turn, continuation_grace_ms=int(m.group(1)))
        )
    if (m := _STATEMENT.fullmatch(mode)) is not None:
        turn = dataclasses.replace(base.turn, statement_silence_ms=int(m.group(1)))
        return _checked(dataclasses.replace(base, turn=turn), mode)
    if (m := _WAIT.fullmatch(mode)) is None:
        return None
    wait = int(m.group(1))
    turn = dataclasses.replace(
        base.turn,
        unsure_silence_ms=max(wait, base.turn.unsure_silence_ms),
        verdict_silence_ms=max(wait, base.turn.verdict_silence_ms),
        incomplete_silence_ms=max(wait, base.turn.incomplete_silence_ms),
    )
    return _checked(
        dataclasses.replace(base, vad=dataclasses.replace(base.vad, end_silence_ms=wait), turn=turn), mode
    )


def _checked(cfg: Config, mode: str) -> Config:
    """``cfg`` if valid; else a ValueError naming ``mode`` and why."""
    try:
        validate(cfg)
    except ConfigError as exc:
        raise ValueError(f"mode {mode!r}: {exc}") from exc
    return cfg
