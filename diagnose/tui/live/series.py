"""Live time series for the dashboard, accumulated from the capture's own records. Pure.

``ProcessSeries`` turns consecutive PROCESS records (cumulative counters, see
collectors/process.py) into per-interval process CPU %, host CPU % and the busiest thread, so the
CPU sparkline has the collector's full 10 Hz resolution. The counters are read by the same pure
functions as the capture's signals (diagnose/bundle/counters.py), so the two agree. ``SignalHistory`` turns the running
capture averages that ``analyze`` reports each second (e.g. ``gpu.sm_active_pct``, time-weighted
over the capture so far) into per-interval means: with averages A1 at t1 and A2 at t2 (seconds
since the capture started), the mean over (t1, t2] is (A2*t2 - A1*t1) / (t2 - t1). That holds
for any time-weighted average; a source that starts sampling d seconds late shifts each value by
at most d/(t2 - t1) of it, which is why the series is labelled "per interval, derived".
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from diagnose.bundle.counters import cpu_since, host_cpu, process_cpu_s, thread_cpu_s
from diagnose.bundle.errors import MALFORMED

MAX_POINTS = 600  # 60 s at 10 Hz: more than any panel is wide


@dataclass(frozen=True)
class CpuSnapshot:
    """What the CPU panel needs, copied out of the accumulator (safe to hand to the UI thread)."""

    records: int
    process_pct: tuple[float, ...]
    host_pct: tuple[float, ...]
    busiest_tid: int | None
    busiest_name: str
    busiest_pct: float | None
    ncpu: int


class ProcessSeries:
    """Accumulates process records in arrival order; one instance per capture."""

    def __init__(self, busiest_window_s: float = 1.0):
        self.records = 0
        self.skipped = 0  # malformed records (a hand-edited bundle)
        self._prev: dict[str, Any] | None = None
        self._process: deque[float] = deque(maxlen=MAX_POINTS)
        self._host: deque[float] = deque(maxlen=MAX_POINTS)
        self._thread_cpu: deque[tuple[int, dict[int, float]]] = deque()
        self._window_ns = int(busiest_window_s * 1e9)
        self._names: dict[int, str] = {}
        self._ncpu = 1

    def add_name(self, record: dict[str, Any]) -> None:
        """A THREADS record: {tid, comm}. A malformed one (hand-edited bundle) is skipped."""
        try:
            if "tid" in record:
                self._names[int(record["tid"])] = str(record.get("comm") or "")
        except MALFORMED:
            self.skipped += 1

    def add(self, rec: dict[str, Any]) -> None:
        """A PROCESS record; a malformed one is counted in ``skipped``, never raised."""
        try:
            ncpu, t_ns = int(rec.get("ncpu") or self._ncpu), int(rec.get("t_ns", 0))
            threads, proc_s = thread_cpu_s(rec), process_cpu_s(rec)
            host = None if self._prev is None else host_cpu(self._prev.get("sys_cpu_s") or {},
                                                            rec.get("sys_cpu_s") or {})
        except MALFORMED:
            self.skipped += 1
            return
        self.records += 1
        self._ncpu = ncpu
        self._thread_cpu.append((t_ns, threads))
        while self._thread_cpu and t_ns - self._thread_cpu[0][0] > self._window_ns:
            self._thread_cpu.popleft()
        prev, self._prev = self._prev, rec
        if prev is None:
            return
        dt_s = (t_ns - int(prev.get("t_ns", 0))) / 1e9
        if dt_s <= 0:
            return
        self._process.append(max(0.0, 100.0 * (proc_s - process_cpu_s(prev)) / dt_s))
        if host is not None:
            self._host.append(host.busy_pct)

    def snapshot(self) -> CpuSnapshot:
        tid, pct = self._busiest()
        return CpuSnapshot(self.records, tuple(self._process), tuple(self._host), tid,
                           self._names.get(tid, "") if tid is not None else "", pct, self._ncpu)

    def _busiest(self) -> tuple[int | None, float | None]:
        if len(self._thread_cpu) < 2:
            return None, None
        (t0, first), (t1, last) = self._thread_cpu[0], self._thread_cpu[-1]
        dt_s = (t1 - t0) / 1e9
        deltas = cpu_since(first, last)
        if dt_s <= 0 or not deltas:
            return None, None
        tid = max(deltas, key=deltas.__getitem__)
        return tid, 100.0 * deltas[tid] / dt_s


class SignalHistory:
    """Per-interval means of running averages, one series per signal name."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}
        self._series: dict[str, deque[float]] = {}

    def add(self, t_s: float, values: dict[str, float]) -> None:
        """``values``: running averages at ``t_s`` seconds into the capture."""
        for name, avg in values.items():
            prev = self._last.get(name)
            self._last[name] = (t_s, avg)
            series = self._series.setdefault(name, deque(maxlen=MAX_POINTS))
            if prev is None or t_s <= prev[0]:
                if prev is None:
                    series.append(avg)
                continue
            t1, a1 = prev
            series.append(max(0.0, (avg * t_s - a1 * t1) / (t_s - t1)))

    def snapshot(self) -> dict[str, tuple[float, ...]]:
        return {k: tuple(v) for k, v in self._series.items()}
