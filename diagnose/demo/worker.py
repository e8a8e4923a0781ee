"""The model worker: one thread that batches queued requests and runs the model on them.

Requests arrive from the event loop (``submit``); the worker takes the oldest, adds whatever else is
already queued (up to ``max_batch``), runs ``fn`` once on the batch and resolves each request's future
on the loop. Every job records its times (``time.time_ns``, Unix ns, as OpenTelemetry spans take
them): enqueued, picked up by the worker, model start and end, and the batch it ran in, so the
handler can write its ``queue`` and ``model`` spans afterwards.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    payload: Any
    future: asyncio.Future
    enqueued_ns: int = field(default_factory=time.time_ns)
    picked_ns: int = 0
    start_ns: int = 0
    end_ns: int = 0
    batch: int = 0


class ModelWorker:
    """``fn(payloads) -> results`` (one result per payload) on a daemon thread named ``model-worker``."""

    def __init__(self, fn: Callable[[list[Any]], list[Any]], max_batch: int, loop: asyncio.AbstractEventLoop):
        self.fn, self.max_batch, self.loop = fn, max(1, max_batch), loop
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="model-worker", daemon=True)
        self.thread.start()

    def submit(self, payload: Any) -> Job:
        job = Job(payload, self.loop.create_future())
        self.jobs.put(job)
        return job

    def stop(self) -> None:
        self.jobs.put(None)

    def _run(self) -> None:
        while (first := self.jobs.get()) is not None:
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.jobs.put(None)
                    break
                batch.append(nxt)
            picked = time.time_ns()
            try:
                results: list[Any] = self.fn([j.payload for j in batch])
                error: BaseException | None = None
            except Exception as exc:  # the requests fail with it, the worker keeps serving
                results, error = [None] * len(batch), exc
            done = time.time_ns()
            for j, r in zip(batch, results):
                j.picked_ns, j.start_ns, j.end_ns, j.batch = picked, picked, done, len(batch)
                self.loop.call_soon_threadsafe(_resolve, j.future, r, error)


def _resolve(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


__all__ = ["Job", "ModelWorker"]
