"""Garbage-collector pauses of the target, via ``gc.callbacks`` (installed only while capturing).

Record (the GC stream, diagnose/bundle/streams.py GcPauseRecord): start_ns/end_ns (Unix-epoch ns,
time.time_ns() at the "start" and "stop" callbacks), generation, collected, uncollectable (from the
callback's info dict). The callback runs inside the collector, on whichever thread triggered it: it
only appends a tuple.
"""
from __future__ import annotations

import gc
import time
from collections import deque
from typing import Any

MAX_QUEUED_PAUSES = 100_000


class GcRecorder:
    def __init__(self) -> None:
        self._pauses: deque = deque()
        self._start_ns = 0
        self.dropped = 0
        self.recorded = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start_ns = time.time_ns()
        elif len(self._pauses) < MAX_QUEUED_PAUSES:
            self._pauses.append((self._start_ns, time.time_ns(), info.get("generation"),
                                 info.get("collected"), info.get("uncollectable")))
        else:
            self.dropped += 1

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        while self in gc.callbacks:
            gc.callbacks.remove(self)

    def drain(self) -> list[dict[str, Any]]:
        out = []
        while self._pauses:
            start, end, gen, collected, uncollectable = self._pauses.popleft()
            out.append({"start_ns": start, "end_ns": end, "generation": gen,
                        "collected": collected, "uncollectable": uncollectable})
        self.recorded += len(out)
        return out
