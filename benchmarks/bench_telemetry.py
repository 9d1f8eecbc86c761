"""What tracing a turn costs the event loop: building its spans and recording its metrics.

    .venv/bin/python benchmarks/bench_telemetry.py [--turns 200]

A traced session (:class:`voice_pipeline.telemetry.session.SessionTrace`) exporting to a
collector on loopback (the tests' OTLP/HTTP receiver) is shown ``TurnCompleted`` events of
hand-made records -- a plain answered turn (7 spans) and an interrupted one (12 spans) --
and the time each takes on the calling thread (the loop's, in the pipeline) is printed.
Exporting itself runs in the SDK's batch thread and is not in these figures. No models.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from otlp_receiver import otlp_receiver
from test_telemetry_spans import ANSWERED, INTERRUPTED, record

from voice_pipeline import events as ev
from voice_pipeline.config import Config
from voice_pipeline.telemetry.session import SessionTrace
from voice_pipeline.telemetry.setup import start_telemetry


async def main(turns: int) -> None:
    with otlp_receiver() as (url, got):
        tel = start_telemetry(Config(), {"OTEL_EXPORTER_OTLP_ENDPOINT": url})
        assert tel is not None
        session = SessionTrace(tel, "bench", "session")
        cases = (
            ("answered", record(ANSWERED)),
            ("interrupted", record(INTERRUPTED, interrupted=True, heard_s=0.5)),
        )
        for name, rec in cases:
            times = []
            for i in range(turns):
                event = ev.TurnCompleted(i, 0, dataclasses.replace(rec, turn_id=i))
                t0 = time.perf_counter_ns()
                session.observe(event)
                times.append(time.perf_counter_ns() - t0)
                await asyncio.sleep(0.002)  # turns arrive spread out, as in a session
            times.sort()
            p95 = times[int(0.95 * (len(times) - 1))]
            median = statistics.median(times)
            print(f"{name:12} median {median / 1000:5.0f} us   p95 {p95 / 1000:5.0f} us per turn")
        await session.aclose()
        await asyncio.to_thread(tel.shutdown)
        print(f"the collector received {len(got.spans)} spans")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
