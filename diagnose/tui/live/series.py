"""Live time series for the dashboard, accumulated from the capture's own records. Pure.

``ProcessSeries`` turns consecutive PROCESS readings (cumulative counters, read leniently into the
type the analysis reads: diagnose/bundle/records/process.py) into per-interval process CPU %, host
CPU % and per-thread CPU %. The counters are read by the same pure functions as the capture's
signals (diagnose/bundle/counters.py), so the two agree. Each interval's value goes into a 1 s bucket
(``TimeBuckets``, time-weighted), so a sparkline column is a mean over whole seconds rather than
one 10 Hz sample: a panel 30 columns wide shows minutes, not 3 s, and memory stays bounded at
MAX_BUCKETS per series.

``SignalHistory`` turns the running capture averages that ``analyze`` reports each second (e.g.
``gpu.sm_active_pct``, time-weighted over the capture so far) into per-interval means: with
averages A1 at t1 and A2 at t2 (seconds since the capture started), the mean over (t1, t2] is
(A2*t2 - A1*t1) / (t2 - t1). That holds for any time-weighted average; a source that starts
sampling d seconds late shifts each value by at most d/(t2 - t1) of it, which is why the series
is labelled "per interval, derived". Every 1 s bucket the interval covers gets its mean.

``RequestSeries`` counts requests (root spans) per 1 s bucket by end time, with each bucket's P99.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from diagnose.bundle.counters import cpu_since, host_cpu, process_cpu_s, thread_cpu_s
from diagnose.bundle.errors import MALFORMED
from diagnose.bundle.records import ThreadNameRecord
from diagnose.bundle.records.base import lenient
from diagnose.bundle.records.process import ProcessReading, process_reading

BUCKET_S = 1.0
MAX_BUCKETS = 1800  # 30 min of 1 s buckets per series: more than any panel shows
TOP_THREADS = 10


@dataclass(frozen=True)
class Buckets:
    """A series as consecutive ``bucket_s`` buckets, oldest first: ``values`` are the
    time-weighted means (unit of the series), ``weights_s`` the seconds each mean covers."""

    values: tuple[float, ...]
    weights_s: tuple[float, ...]
    bucket_s: float = BUCKET_S

    def __len__(self) -> int:
        return len(self.values)


class TimeBuckets:
    """Time-weighted means per ``bucket_s`` bucket of a series; at most ``max_buckets`` kept (the
    newest). A bucket no value reached (a pause in the stream) shows the previous bucket's mean
    with weight 0 s, so a sparkline holds its level instead of dropping to zero."""

    def __init__(self, bucket_s: float = BUCKET_S, max_buckets: int = MAX_BUCKETS):
        self.bucket_s = bucket_s
        self._sums: deque[list[float]] = deque(maxlen=max_buckets)  # [value*s, s] per bucket
        self._first: int | None = None  # index of _sums[0]

    def add(self, t_s: float, value: float, weight_s: float = 1.0) -> None:
        """``value`` held for ``weight_s`` seconds ending at ``t_s`` (seconds since the start)."""
        index = max(0, math.ceil(t_s / self.bucket_s) - 1)
        if self._first is None:
            self._first = index
        last = self._first + len(self._sums) - 1
        if index < self._first:
            return  # older than what is kept
        if index - last > (self._sums.maxlen or 0):  # a jump past all that is kept (a clock step)
            self._sums.clear()
            self._first, last = index, index - 1
        while last < index:
            self._sums.append([0.0, 0.0])
            last += 1
            if len(self._sums) == self._sums.maxlen:
                self._first = last - len(self._sums) + 1
        cell = self._sums[index - self._first]
        cell[0] += value * weight_s
        cell[1] += weight_s

    def fill(self, t1_s: float, t2_s: float, value: float) -> None:
        """``value`` over the interval (t1, t2]: each bucket gets its overlap with it."""
        edge = t1_s
        while edge < t2_s:
            end = min(t2_s, (math.floor(edge / self.bucket_s) + 1) * self.bucket_s)
            self.add(end, value, end - edge)
            edge = end

    def snapshot(self) -> Buckets:
        values: list[float] = []
        prev = 0.0
        for total, weight in self._sums:
            prev = total / weight if weight > 0 else prev
            values.append(prev)
        return Buckets(tuple(values), tuple(w for _, w in self._sums), self.bucket_s)


@dataclass(frozen=True)
class ThreadCpu:
    """One thread's CPU over the last window: ``pct`` of one core (100 = one core busy)."""

    tid: int
    name: str
    pct: float


@dataclass(frozen=True)
class CpuSnapshot:
    """What the CPU panel needs, copied out of the accumulator (safe to hand to the UI thread).

    ``threads``: the busiest threads over the last ``thread_window_s`` seconds, busiest first."""

    records: int
    process: Buckets
    host: Buckets
    threads: tuple[ThreadCpu, ...]
    thread_window_s: float
    ncpu: int

    @property
    def process_pct(self) -> tuple[float, ...]:
        return self.process.values

    @property
    def host_pct(self) -> tuple[float, ...]:
        return self.host.values

    @property
    def busiest_tid(self) -> int | None:
        return self.threads[0].tid if self.threads else None

    @property
    def busiest_name(self) -> str:
        return self.threads[0].name if self.threads else ""

    @property
    def busiest_pct(self) -> float | None:
        return self.threads[0].pct if self.threads else None


class ProcessSeries:
    """Accumulates process records in arrival order; one instance per capture."""

    def __init__(self, busiest_window_s: float = 2.0):
        self.records = 0
        self.skipped = 0  # malformed records (a hand-edited bundle)
        self._prev: tuple[ProcessReading, float] | None = None  # the last reading and its CPU seconds
        self._t0_ns: int | None = None
        self._process = TimeBuckets()
        self._host = TimeBuckets()
        self._thread_cpu: deque[tuple[int, dict[int, float]]] = deque()
        self._window_s = busiest_window_s
        self._window_ns = int(busiest_window_s * 1e9)
        self._names: dict[int, str] = {}
        self._ncpu = 1

    def add_name(self, record: ThreadNameRecord) -> None:
        """A THREADS record: a thread's name."""
        self._names[record.tid] = record.comm or ""

    def add_raw(self, raw: dict[str, Any]) -> None:
        """A PROCESS line as the live tail decoded it, read as the analysis reads it
        (records/process.py); one that is not a reading is counted in ``skipped``."""
        rec = process_reading(raw)
        if rec is None:
            self.skipped += 1
        else:
            self.add(rec)

    def add_raw_name(self, raw: dict[str, Any]) -> None:
        """A THREADS line as the live tail decoded it; a malformed one is counted in ``skipped``."""
        rec = lenient(ThreadNameRecord, raw)
        if rec is None:
            self.skipped += 1
        else:
            self.add_name(rec)

    def add(self, rec: ProcessReading) -> None:
        """A PROCESS reading; one without CPU times is counted in ``skipped``."""
        proc_s = process_cpu_s(rec)
        if proc_s is None:
            self.skipped += 1
            return
        t_ns, threads = rec.t_ns, thread_cpu_s(rec)
        host = None if self._prev is None else host_cpu(self._prev[0].sys_cpu_s, rec.sys_cpu_s)
        self.records += 1
        self._ncpu = rec.ncpu or self._ncpu
        self._thread_cpu.append((t_ns, threads))
        while self._thread_cpu and t_ns - self._thread_cpu[0][0] > self._window_ns:
            self._thread_cpu.popleft()
        prev, self._prev = self._prev, (rec, proc_s)
        if self._t0_ns is None:
            self._t0_ns = t_ns
        if prev is None:
            return
        dt_s = (t_ns - prev[0].t_ns) / 1e9
        if dt_s <= 0:
            return
        t_s = (t_ns - self._t0_ns) / 1e9
        self._process.add(t_s, max(0.0, 100.0 * (proc_s - prev[1]) / dt_s), dt_s)
        if host is not None:
            self._host.add(t_s, host.busy_pct, dt_s)

    def snapshot(self) -> CpuSnapshot:
        return CpuSnapshot(self.records, self._process.snapshot(), self._host.snapshot(),
                           self._top_threads(), self._window_s, self._ncpu)

    def _top_threads(self, n: int = TOP_THREADS) -> tuple[ThreadCpu, ...]:
        if len(self._thread_cpu) < 2:
            return ()
        (t0, first), (t1, last) = self._thread_cpu[0], self._thread_cpu[-1]
        dt_s = (t1 - t0) / 1e9
        deltas = cpu_since(first, last)
        if dt_s <= 0 or not deltas:
            return ()
        top = sorted(deltas, key=lambda tid: (-deltas[tid], tid))[:n]
        return tuple(ThreadCpu(tid, self._names.get(tid, ""), 100.0 * deltas[tid] / dt_s) for tid in top)


class SignalHistory:
    """Per-interval means of running averages in 1 s buckets, one series per signal name."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}
        self._series: dict[str, TimeBuckets] = {}

    def add(self, t_s: float, values: dict[str, float]) -> None:
        """``values``: running averages at ``t_s`` seconds into the capture."""
        for name, avg in values.items():
            prev = self._last.get(name)
            self._last[name] = (t_s, avg)
            series = self._series.setdefault(name, TimeBuckets())
            if prev is None or t_s <= prev[0]:
                if prev is None:
                    series.add(t_s, avg)
                continue
            t1, a1 = prev
            series.fill(t1, t_s, max(0.0, (avg * t_s - a1 * t1) / (t_s - t1)))

    def snapshot(self) -> dict[str, Buckets]:
        return {k: v.snapshot() for k, v in self._series.items()}


OPEN_BUCKETS = 10  # a request ending this many seconds behind the newest is still counted
FUTURE_NS = 60 * 10**9  # a span ending further ahead of the wall clock is skipped (a bad clock)
MAX_DURATIONS = 2048  # per 1 s bucket; beyond, every other duration is dropped (P99 stays close)


@dataclass(frozen=True)
class RequestSnapshot:
    """Requests per 1 s bucket (by end time): ``qps`` requests ended per second, ``p99_ms`` the
    P99 latency of those requests (ms; weight 0 where none ended), ``late`` requests that ended too
    far behind the newest to be counted, ``requests`` counted in all."""

    qps: Buckets
    p99_ms: Buckets
    requests: int
    late: int


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``values``; raises ValueError when empty."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


class RequestSeries:
    """Request rate and P99 over time from SPANS records as they arrive. A request is a root span
    (no parent) that ended; seconds count from the first one's end. Buckets more than
    OPEN_BUCKETS behind the newest are closed (their durations reduced to count and P99), so
    memory stays bounded: MAX_BUCKETS closed values, OPEN_BUCKETS x MAX_DURATIONS durations."""

    def __init__(self, bucket_s: float = BUCKET_S, max_buckets: int = MAX_BUCKETS):
        self.bucket_s = bucket_s
        self.requests = 0
        self.late = 0
        self.skipped = 0  # malformed records
        self._origin_ns: int | None = None
        self._open: dict[int, list[float]] = {}
        self._counts: dict[int, int] = {}
        self._closed: deque[tuple[int, int, float | None]] = deque(maxlen=max_buckets)

    def add(self, rec: dict[str, Any], now_ns: int | None = None) -> None:
        """A SPANS record; spans with a parent, open spans and malformed records are not requests,
        nor (``now_ns``: the wall clock, Unix ns) one that ends over a minute in the future."""
        if rec.get("parent_span_id") or rec.get("end_ns") is None:
            return
        try:
            start, end = int(rec["start_ns"]), int(rec["end_ns"])
        except MALFORMED:
            self.skipped += 1
            return
        if end < start or (now_ns is not None and end > now_ns + FUTURE_NS):
            self.skipped += 1
            return
        if self._origin_ns is None:
            self._origin_ns = end - end % int(self.bucket_s * 1e9)
        index = max(0, math.ceil((end - self._origin_ns) / (self.bucket_s * 1e9)) - 1)
        if self._closed and index <= self._closed[-1][0]:
            self.late += 1
            return
        self.requests += 1
        self._counts[index] = self._counts.get(index, 0) + 1
        durations = self._open.setdefault(index, [])
        durations.append((end - start) / 1e6)
        if len(durations) >= MAX_DURATIONS:
            del durations[::2]
        newest = max(self._open)
        for old in sorted(i for i in self._open if i < newest - OPEN_BUCKETS):
            values = self._open.pop(old)
            self._closed.append((old, self._counts.pop(old), p99(values) if values else None))

    def snapshot(self) -> RequestSnapshot:
        cells = list(self._closed) + [(i, self._counts[i], p99(v)) for i, v in sorted(self._open.items())]
        qps: list[float] = []
        lat: list[float] = []
        weights: list[float] = []
        prev_index, prev_lat = None, 0.0
        for index, count, value in cells:
            if prev_index is not None:  # seconds in which no request ended (at most a panel's worth)
                for _ in range(min(index - prev_index - 1, self._closed.maxlen or MAX_BUCKETS)):
                    qps.append(0.0)
                    lat.append(prev_lat)
                    weights.append(0.0)
            prev_index = index
            prev_lat = value if value is not None else prev_lat
            qps.append(count / self.bucket_s)
            lat.append(prev_lat)
            weights.append(float(count))
        keep = self._closed.maxlen or MAX_BUCKETS
        qps, lat, weights = qps[-keep:], lat[-keep:], weights[-keep:]
        ones = tuple(1.0 for _ in qps)
        return RequestSnapshot(Buckets(tuple(qps), ones, self.bucket_s),
                               Buckets(tuple(lat), tuple(weights), self.bucket_s), self.requests, self.late)
