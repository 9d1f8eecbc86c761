"""What a bench run is asked to do (no heavy imports: the CLI builds it before anything runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Protocol = Literal["ws", "twilio"]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    url: str
    protocol: Protocol = "ws"
    sessions: int = 1
    turns: int = 5
    interrupt_share: float = 0.2
    pause_s: float = 1.0
    #: share of the questions said as sentences with pauses inside (0..1)
    pauses: float = 0.0
    seed: int = 1
    wav_dir: Path | None = None
    ramp: bool = False
    max_sessions: int = 16
    token: str | None = None
    #: the ramp's p95 voice-to-voice limit (None = the server's voice_to_voice budget)
    ramp_budget_ms: float | None = None
    reply_timeout_s: float = 60.0
    scrape_interval_s: float = 2.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "protocol": self.protocol,
            "sessions": self.sessions,
            "turns": self.turns,
            "interrupt_share": self.interrupt_share,
            "pause_s": self.pause_s,
            "pauses": self.pauses,
            "seed": self.seed,
            "wav_dir": str(self.wav_dir) if self.wav_dir else None,
            "ramp": self.ramp,
            "max_sessions": self.max_sessions,
            "token": "(set)" if self.token else None,
            "ramp_budget_ms": self.ramp_budget_ms,
            "reply_timeout_s": self.reply_timeout_s,
        }
