"""A session's ledger: the records of its latest turns and per-stage aggregates over all of them.

Pure, like :mod:`~voice_pipeline.ledger.ledger`: bounded however long the session runs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import ALL_STAGES, TurnLedger
from voice_pipeline.ledger.records import TurnRecord


def percentile(values: Iterable[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); NaN for no values."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


#: completed turns whose whole record a session keeps (the latest); older turns live on
#: only in the per-stage aggregates, so a session of hours stays small
KEEP_RECORDS = 256
#: per-stage durations kept for the percentiles (those of the latest turns)
KEEP_SAMPLES = 1024


@dataclass(slots=True)
class StageAggregate:
    """One stage over a whole session: counts and sums of every turn, the latest values."""

    n: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP_SAMPLES))

    def add(self, ms: float) -> None:
        self.n += 1
        self.total_ms += ms
        self.max_ms = max(self.max_ms, ms)
        self.recent.append(ms)


@dataclass(slots=True)
class SessionLedger:
    """Completed turns of one session: the latest :data:`KEEP_RECORDS` records, and per-stage
    aggregates of every turn (``n``; percentiles over the latest :data:`KEEP_SAMPLES`)."""

    budget: BudgetConfig
    records: deque[TurnRecord] = field(default_factory=lambda: deque(maxlen=KEEP_RECORDS))
    #: turns completed in the session (``records`` holds only the latest of them)
    turns: int = 0
    stages: dict[str, StageAggregate] = field(default_factory=dict)

    def new_turn(self, turn_id: int) -> TurnLedger:
        return TurnLedger(turn_id, self.budget)

    def add(self, record: TurnRecord) -> None:
        self.records.append(record)
        self.turns += 1
        for name, ms in record.stages_ms.items():
            self.stages.setdefault(name, StageAggregate()).add(ms)

    def summary(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for stage in ALL_STAGES:
            agg = self.stages.get(stage.name)
            if agg is not None and agg.n:
                out[stage.name] = {
                    "n": float(agg.n),
                    "p50": round(percentile(agg.recent, 50), 1),
                    "p95": round(percentile(agg.recent, 95), 1),
                    "p99": round(percentile(agg.recent, 99), 1),
                    "budget": float(getattr(self.budget, stage.budget_key)),
                }
        return out
