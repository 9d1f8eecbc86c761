"""asr.batch.Batcher: decodes that collide share one call (pure threading, a fake ``run``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from asr.batch import BatchCounts, Batcher


class Engine:
    """A fake ``run`` that records each call and can be held busy until released."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()
        self._fail_on = fail_on

    def __call__(self, items: Sequence[int]) -> list[int]:
        with self._lock:
            self.calls.append(list(items))
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            self.gate.wait(10)
            if self._fail_on in items:
                raise RuntimeError("the engine failed")
            return [10 * item for item in items]
        finally:
            with self._lock:
                self.inside -= 1


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def collide(
    batcher: Batcher[int, int], engine: Engine, first: int, rest: Sequence[int]
) -> list[Future[tuple[int, int]]]:
    """``first`` holds the engine; ``rest`` arrive while it is busy and wait; then it is released."""
    pool = ThreadPoolExecutor(1 + len(rest))
    engine.gate.clear()
    futures = [pool.submit(batcher.submit, first)]
    wait_for(lambda: engine.inside == 1)
    futures += [pool.submit(batcher.submit, item) for item in rest]
    wait_for(lambda: batcher.waiting == len(rest))
    engine.gate.set()
    pool.shutdown(wait=True)
    return futures


def test_a_decode_alone_runs_at_once_by_itself() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=4)
    assert batcher.submit(3) == (30, 1)
    assert batcher.submit(4) == (40, 1)
    assert engine.calls == [[3], [4]]
    assert batcher.counts == BatchCounts(batches=2, items=2, largest=1)


def test_decodes_that_wait_for_a_busy_engine_go_together_each_with_its_own_result() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=4)
    futures = collide(batcher, engine, 1, [2, 3, 4])
    assert [f.result() for f in futures] == [(10, 1), (20, 3), (30, 3), (40, 3)]
    assert engine.calls == [[1], [2, 3, 4]]  # in the order they came
    assert engine.most_inside == 1  # one call at a time, as CTranslate2 runs them
    assert batcher.counts == BatchCounts(batches=2, items=4, largest=3)
    assert batcher.waiting == 0


def test_a_batch_holds_at_most_max_batch() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=2)
    futures = collide(batcher, engine, 0, [1, 2, 3, 4, 5])
    assert [f.result()[0] for f in futures] == [0, 10, 20, 30, 40, 50]
    assert engine.calls == [[0], [1, 2], [3, 4], [5]]


def test_max_batch_one_runs_them_one_at_a_time() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=1)
    futures = collide(batcher, engine, 0, [1, 2])
    assert [f.result() for f in futures] == [(0, 1), (10, 1), (20, 1)]
    assert engine.calls == [[0], [1], [2]]


def test_items_of_different_keys_never_share_a_call() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=4, key=lambda item: item % 2)  # e.g. two window shapes
    futures = collide(batcher, engine, 0, [1, 2, 3, 4])
    assert [f.result()[0] for f in futures] == [0, 10, 20, 30, 40]
    assert engine.calls == [[0], [1, 3], [2, 4]]  # the oldest waiting item's key goes first


def test_an_error_reaches_every_decode_of_its_batch_and_the_next_batch_still_runs() -> None:
    engine = Engine(fail_on=3)
    batcher = Batcher(engine, max_batch=4)
    futures = collide(batcher, engine, 1, [2, 3])
    assert futures[0].result() == (10, 1)
    for future in futures[1:]:
        with pytest.raises(RuntimeError, match="the engine failed"):
            future.result()
    assert batcher.submit(5) == (50, 1)
    assert batcher.waiting == 0


def test_a_run_that_loses_results_is_an_error_not_a_hang() -> None:
    batcher: Batcher[int, int] = Batcher(lambda items: [1], max_batch=4)
    assert batcher.submit(1) == (1, 1)
    engine = Engine()
    short: Batcher[int, int] = Batcher(lambda items: engine(items)[:1], max_batch=4)
    futures = collide(short, engine, 1, [2, 3])
    assert futures[0].result() == (10, 1)
    with pytest.raises(RuntimeError, match="a batch of 2 items gave 1 results"):
        futures[1].result()


def test_concurrency_lets_that_many_calls_run_at_once() -> None:
    engine = Engine()
    batcher = Batcher(engine, max_batch=4, concurrency=2)
    engine.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(batcher.submit, i) for i in (1, 2)]
        wait_for(lambda: engine.inside == 2)  # two workers: neither waits
        third = pool.submit(batcher.submit, 3)
        wait_for(lambda: batcher.waiting == 1)
        engine.gate.set()
    assert [f.result()[0] for f in [*futures, third]] == [10, 20, 30]
    assert engine.most_inside == 2


@pytest.mark.parametrize(("max_batch", "concurrency"), [(0, 1), (1, 0)])
def test_bad_sizes_are_refused(max_batch: int, concurrency: int) -> None:
    with pytest.raises(ValueError, match="max_batch >= 1 and concurrency >= 1"):
        Batcher(Engine(), max_batch=max_batch, concurrency=concurrency)
