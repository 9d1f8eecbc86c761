"""Decodes that collide, run as one batch.

CTranslate2 runs one Whisper ``generate`` at a time (``num_workers`` 1), first come first
served. When several sessions end their turns together, their speculative decodes queue, and
the last one waits for all the others. One ``generate`` of N short-window decodes costs less
than N in a row: x1.39-1.45 for four on a 2-core AMD EPYC (AVX-512 BF16), x1.29 with AVX2
emulated, the same tokens both ways (``benchmarks/bench_asr_batch.py``).

:class:`Batcher` is that queue made visible: a decode that arrives while the engine is busy
waits, as it did inside CTranslate2, and then goes with every other one that waited, up to
``max_batch``, in one call. The thread that finds the engine free runs the batch for all of
them. A decode alone runs at once, as before. Pure threading: no model here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["BatchCounts", "Batcher"]

Item = TypeVar("Item")  # what is decoded
Out = TypeVar("Out")  # its result


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """Calls made to ``run`` and the items they took, since the batcher was made."""

    batches: int = 0
    items: int = 0
    largest: int = 0


@dataclass(slots=True, eq=False)  # compared by identity
class _Request(Generic[Item, Out]):
    item: Item
    key: Hashable
    done: bool = False
    result: Out | None = None
    error: BaseException | None = None
    batch: int = 0


class Batcher(Generic[Item, Out]):
    """Runs ``run(items) -> results`` (one result per item, in order) for items submitted from
    any thread, at most ``concurrency`` calls at a time, each with up to ``max_batch`` waiting
    items of the same ``key`` (items that cannot share a call, such as different shapes, have
    different keys). Thread-safe; :meth:`submit` blocks until its item's result is in.
    """

    def __init__(
        self,
        run: Callable[[Sequence[Item]], Sequence[Out]],
        *,
        max_batch: int,
        concurrency: int = 1,
        key: Callable[[Item], Hashable] = lambda item: None,
    ) -> None:
        if max_batch < 1 or concurrency < 1:
            raise ValueError(f"need max_batch >= 1 and concurrency >= 1, got {max_batch}, {concurrency}")
        self._run = run
        self._max_batch = max_batch
        self._concurrency = concurrency
        self._key = key
        self._cond = threading.Condition()
        self._queue: list[_Request[Item, Out]] = []
        self._running = 0
        self._counts = BatchCounts()

    @property
    def counts(self) -> BatchCounts:
        with self._cond:
            return self._counts

    @property
    def waiting(self) -> int:
        """Items submitted and not yet taken into a call."""
        with self._cond:
            return len(self._queue)

    def submit(self, item: Item) -> tuple[Out, int]:
        """``item``'s result and the size of the batch it was decoded in. Blocking; an error
        raised by ``run`` is raised in every thread whose item was in that call."""
        request: _Request[Item, Out] = _Request(item, self._key(item))
        with self._cond:
            self._queue.append(request)
        while True:
            with self._cond:
                while not request.done and not (self._queue and self._running < self._concurrency):
                    self._cond.wait()
                if request.done:
                    break
                batch = self._take()
                self._running += 1
            self._run_batch(batch)  # may be other threads' items only: then wait again
        if request.error is not None:
            raise request.error
        return request.result, request.batch  # type: ignore[return-value]  # set with done

    def _take(self) -> list[_Request[Item, Out]]:
        # the oldest waiting item and the others of its key, in the order they came
        key = self._queue[0].key
        batch = [r for r in self._queue if r.key == key][: self._max_batch]
        self._queue = [r for r in self._queue if r not in batch]
        return batch

    def _run_batch(self, batch: list[_Request[Item, Out]]) -> None:
        results: Sequence[Out] = ()
        error: BaseException | None = None
        try:
            results = self._run([r.item for r in batch])
            if len(results) != len(batch):
                error = RuntimeError(f"a batch of {len(batch)} items gave {len(results)} results")
        except BaseException as exc:  # handed to every waiting thread, raised there
            error = exc
        with self._cond:
            self._running -= 1
            for i, request in enumerate(batch):
                request.error = error
                request.result = None if error is not None else results[i]
                request.batch = len(batch)
                request.done = True
            c = self._counts
            self._counts = BatchCounts(c.batches + 1, c.items + len(batch), max(c.largest, len(batch)))
            self._cond.notify_all()
