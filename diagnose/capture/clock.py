"""The capture loop's sense of time: the real clock, and a fake one that makes loop tests instant.

``Capture`` reads the time and waits only through a ``Clock``. ``SYSTEM_CLOCK`` is the real one.
``FakeClock`` is a test double (like the OpenTelemetry SDK's in-memory exporter, it ships with the
code it stands in for): its time moves only when someone waits on it, and then at once, running
the actions a test scheduled on the way ("at t=2 s set the stop event", "at t=1 s kill the target").
Collectors keep the real clock: their threads and children sample real processes.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and elapsed time)."""

    def time_ns(self) -> int:
        """Wall-clock time in ns since the epoch (for the manifest's started_ns/ended_ns)."""

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        """Wait until ``event`` is set or ``timeout_s`` passed; True if it is set."""


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time_ns`` and ``Event.wait``."""

    def monotonic_s(self) -> float:
        return time.monotonic()

    def time_ns(self) -> int:
        return time.time_ns()

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        return event.wait(timeout_s)


SYSTEM_CLOCK: Clock = SystemClock()

FAKE_EPOCH_NS = 1_700_000_000 * 10**9  # 2023-11-14T22:13:20Z: wall time at fake t = 0


class FakeClock:
    """A clock for tests: ``wait`` returns at once, having moved time on to the timeout or to the
    scheduled action that set the event, whichever comes first.

    ``at(t_s, fn, *args)`` runs ``fn(*args)`` when the fake time reaches ``t_s``; actions due at the
    same time run in the order they were scheduled. Actions run in the waiting thread, inside
    ``wait``; ``advance`` moves time without an event. Meant for one waiting thread (the capture
    loop); scheduling from other threads is safe.
    """

    def __init__(self, start_s: float = 0.0, epoch_ns: int = FAKE_EPOCH_NS):
        self._now_s = start_s
        self._start_s = start_s
        self._epoch_ns = epoch_ns
        self._lock = threading.Lock()
        self._due: list[tuple[float, int, Callable[..., object], tuple[object, ...]]] = []
        self._order = itertools.count()
        self.waits: list[float] = []  # every timeout asked for, for tests of the loop's pacing

    def monotonic_s(self) -> float:
        return self._now_s

    def time_ns(self) -> int:
        return self._epoch_ns + round((self._now_s - self._start_s) * 1e9)

    def at(self, t_s: float, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` when the fake time reaches ``t_s`` (at once on the next wait if past)."""
        with self._lock:
            heapq.heappush(self._due, (t_s, next(self._order), fn, args))

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        return self._run_until(self._now_s + max(0.0, timeout_s), event)

    def advance(self, dt_s: float) -> None:
        """Move time on by ``dt_s``, running the actions due on the way."""
        self._run_until(self._now_s + max(0.0, dt_s), threading.Event())

    def _run_until(self, end_s: float, event: threading.Event) -> bool:
        if event.is_set():
            return True
        while (action := self._pop_due(end_s)) is not None:
            t_s, fn, args = action
            self._now_s = max(self._now_s, t_s)
            fn(*args)
            if event.is_set():
                return True
        self._now_s = end_s
        return False

    def _pop_due(self, end_s: float) -> tuple[float, Callable[..., object], tuple[object, ...]] | None:
        with self._lock:
            if self._due and self._due[0][0] <= end_s:
                t_s, _, fn, args = heapq.heappop(self._due)
                return t_s, fn, args
        return None
