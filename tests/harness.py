"""The session on fakes and a fake clock, for tests: :class:`Harness`, :func:`make_harness`,
and the fixtures ``h`` (defaults, partial transcripts off) and ``hb`` (continuation off),
registered for every test module by tests/conftest.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from fakes import Driver, FakeClock, Fakes, RecordingTransport

from voice_pipeline.config import BudgetConfig, Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.ledger.records import TurnRecord

REPLY = (
    "Sure, the answer is forty two. It is the meaning of life, the universe and everything. Anything else?"
)


def base_config(**budget: float) -> Config:
    cfg = Config(budget=BudgetConfig(**budget))
    # partial transcripts poll on a real-time timer; they are tested on their own below
    return dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, partial_interval_ms=0))


def no_continuation(cfg: Config) -> Config:
    """Speech before the reply is heard interrupts it and starts a new turn (the barge-in
    path; with continuation on, the same speech continues the turn: tests/test_continuation.py)."""
    return dataclasses.replace(cfg, turn=dataclasses.replace(cfg.turn, continuation=False))


@pytest.fixture
async def hb() -> AsyncIterator[Harness]:
    """Like ``h``, without continuation."""
    harness = make_harness(no_continuation(base_config()))
    harness.fakes.llm.reply = REPLY
    yield harness
    harness.fakes.llm.release()
    await harness.session.aclose()


@dataclass(slots=True)
class Harness:
    clock: FakeClock
    fakes: Fakes
    transport: RecordingTransport
    session: Session
    driver: Driver
    cfg: Config

    @property
    def llm_requests(self) -> list[str]:
        return [r.request_id for r in self.fakes.llm.requests]

    def record(self, turn_id: int) -> TurnRecord:
        rec = self.transport.record(turn_id)
        assert rec is not None, f"turn {turn_id} did not complete"
        return rec

    def completed(self, turn_id: int) -> bool:
        return self.transport.record(turn_id) is not None

    async def settle_tasks(self) -> None:
        """Wait (bounded) until the session owns no task any more."""
        for _ in range(200):
            await self.driver.settle()
            if self.session.unfinished_tasks() == 0:
                return
            await asyncio.sleep(0.001)


def make_harness(
    cfg: Config | None = None, fakes: Fakes | None = None, *, output_rate_hz: int | None = None
) -> Harness:
    cfg = base_config() if cfg is None else cfg
    fakes = Fakes() if fakes is None else fakes
    clock = FakeClock()
    transport = RecordingTransport(clock, output_rate_hz=output_rate_hz or fakes.tts.sample_rate_hz)
    session = Session(fakes.engines(), cfg, transport, clock=clock, sleep_until=clock.sleep_until)
    return Harness(clock, fakes, transport, session, Driver(session, clock, fakes), cfg)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    """A session with the default config (partial transcripts off), replying ``REPLY``."""
    harness = make_harness()
    harness.fakes.llm.reply = REPLY
    yield harness
    harness.fakes.llm.release()
    await harness.session.aclose()
