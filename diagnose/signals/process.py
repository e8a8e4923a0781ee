"""Process and host CPU signals from the process collector's cumulative counters (psutil, /proc).

All rates are differences of cumulative counters between the first and last record, divided by
the wall time between them. CPU percentages follow top's convention: 100% = one core busy.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from diagnose.model import Signal, missing
from diagnose.rules.frame_catalog import WAIT_CHANNELS

SRC = "process collector (psutil"
# Thread-wait classes counted as "blocked on work in progress" (io, lock) vs parked (sleep, event).
BLOCKING = ("io_wait", "lock_wait")


def wait_class(state: str | None, wchan: str | None) -> str:
    """Classify one thread reading: running, disk_io (D state), or a WAIT_CHANNELS class."""
    if state == "R":
        return "running"
    if state == "D":
        return "io_wait"
    if wchan:
        for cls, pattern in WAIT_CHANNELS:
            if re.search(pattern, wchan):
                return cls
        return "other_wait"
    return "unknown_wait"


class KernelTimeline:
    """Per-thread kernel wait class over time (process collector readings, ~10 Hz)."""

    def __init__(self, records: list[dict[str, Any]]):
        self._t: dict[int, list[int]] = {}
        self._cls: dict[int, list[str]] = {}
        for rec in records:
            for tid, _u, _s, state, wchan in rec.get("threads", []):
                self._t.setdefault(tid, []).append(rec["t_ns"])
                self._cls.setdefault(tid, []).append(wait_class(state, wchan))

    def state_at(self, tid: int, t_ns: int, tolerance_ns: int) -> str | None:
        """Wait class of the reading nearest to ``t_ns``, if one lies within ``tolerance_ns``."""
        times = self._t.get(tid)
        if not times:
            return None
        i = bisect.bisect_left(times, t_ns)
        best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t_ns))
        return self._cls[tid][best] if abs(times[best] - t_ns) <= tolerance_ns else None


@dataclass
class ThreadUsage:
    tid: int
    cpu_s: float = 0.0
    waits: Counter = field(default_factory=Counter)
    top_wchan: Counter = field(default_factory=Counter)


@dataclass
class ProcessSummary:
    """Reduced process stream: what signals and the thread table need."""

    records: int
    elapsed_s: float
    cpu_s: float
    ncpu: int
    threads: dict[int, ThreadUsage]
    comm: dict[int, str]
    sys_delta: dict[str, float]
    io_read_bytes: float | None
    io_write_bytes: float | None
    ctx_vol: float
    ctx_invol: float
    rss_max_bytes: float
    connections_max: int | None
    children_cpu_s: float | None = None  # with --subprocesses: CPU of all descendants over the capture


def summarize(records: list[dict[str, Any]], names: list[dict[str, Any]]) -> ProcessSummary | None:
    """Reduce ``process.jsonl`` records (time-ordered); None with fewer than two records."""
    if len(records) < 2:
        return None
    first, last = records[0], records[-1]
    threads: dict[int, ThreadUsage] = {}
    start_cpu: dict[int, float] = {}
    for rec in records:
        for tid, user_s, sys_s, state, wchan in rec.get("threads", []):
            tu = threads.setdefault(tid, ThreadUsage(tid))
            cpu = user_s + sys_s
            start_cpu.setdefault(tid, cpu)
            tu.cpu_s = cpu - start_cpu[tid]
            cls = wait_class(state, wchan)
            tu.waits[cls] += 1
            if wchan:
                tu.top_wchan[wchan] += 1
    conns = [r["connections"] for r in records if "connections" in r]
    return ProcessSummary(
        records=len(records),
        elapsed_s=(last["t_ns"] - first["t_ns"]) / 1e9,
        cpu_s=(last["cpu_user_s"] + last["cpu_system_s"]) - (first["cpu_user_s"] + first["cpu_system_s"]),
        ncpu=int(last.get("ncpu") or 1),
        threads=threads,
        comm={int(n["tid"]): str(n.get("comm") or "") for n in names if "tid" in n},
        sys_delta=_delta(first.get("sys_cpu_s", {}), last.get("sys_cpu_s", {})),
        io_read_bytes=_diff(first, last, "io_read_bytes"),
        io_write_bytes=_diff(first, last, "io_write_bytes"),
        ctx_vol=last.get("ctx_vol", 0) - first.get("ctx_vol", 0),
        ctx_invol=last.get("ctx_invol", 0) - first.get("ctx_invol", 0),
        rss_max_bytes=max(r.get("rss_bytes", 0) for r in records),
        connections_max=max(conns) if conns else None,
        children_cpu_s=_children_cpu(records),
    )


def _children_cpu(records: list[dict[str, Any]]) -> float | None:
    """Summed CPU seconds of descendant processes between their first and last reading."""
    if not any("children" in r for r in records):
        return None
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for rec in records:
        for c in rec.get("children", []):
            cpu = c["cpu_user_s"] + c["cpu_system_s"]
            first.setdefault(c["pid"], cpu)
            last[c["pid"]] = cpu
    return sum(last[p] - first[p] for p in last)


def _delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b[k] - a.get(k, 0.0) for k in b}


def _diff(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    return b[key] - a[key] if key in a and key in b else None


def process_signals(s: ProcessSummary | None, reason: str, python_tids: set[int] | None,
                    parked_tids: frozenset[int] = frozenset()) -> dict[str, Signal]:
    """CPU, thread, wait and host signals.

    ``python_tids``: tids py-spy saw (None without py-spy). ``parked_tids``: threads py-spy saw
    mostly waiting for work (e.g. keep-alive reads of the next request); their kernel waits are
    not counted as blocked work.
    """
    names = (
        "cpu.process_util_pct", "cpu.cores_util_pct", "cpu.max_thread_util_pct",
        "cpu.busy_threads", "threads.blocked_io_share_pct", "threads.blocked_lock_share_pct",
        "sys.cpu_util_pct", "sys.iowait_pct", "sys.steal_pct", "cpu.native_thread_cpu_share_pct",
        "cpu.python_util_pct",
    )
    if s is None or s.elapsed_s <= 0:
        return {n: missing(n, "%", SRC + ")", reason) for n in names}
    out: dict[str, Signal] = {}

    def put(name: str, value: float | None, unit: str, src: str, why: str | None = None) -> None:
        out[name] = Signal(name, value, unit, src, None if value is not None else why)

    util = {tid: 100.0 * t.cpu_s / s.elapsed_s for tid, t in s.threads.items()}
    put("cpu.process_util_pct", 100.0 * s.cpu_s / s.elapsed_s, "%", SRC + " cpu_times; 100% = one core)")
    put("cpu.cores_util_pct", 100.0 * s.cpu_s / s.elapsed_s / s.ncpu, "%",
        f"{SRC} cpu_times / {s.ncpu} logical CPUs)")
    if util:
        busiest = max(util, key=util.get)
        label = s.comm.get(busiest, "")
        put("cpu.max_thread_util_pct", util[busiest], "%",
            f"{SRC} /proc/<pid>/task/{busiest}/stat, thread {busiest} {label})".replace(" )", ")"))
    put("cpu.busy_threads", float(sum(1 for u in util.values() if u >= 50.0)), "threads",
        SRC + " threads with >= 50% of a core)")
    out.update(_wait_signals(s, parked_tids))
    out.update(_host_signals(s))
    if python_tids is None:
        put("cpu.python_util_pct", None, "%", SRC + " + py-spy)",
            "py-spy stacks unavailable: cannot tell Python threads from native ones")
        put("cpu.native_thread_cpu_share_pct", None, "%", SRC + " + py-spy)",
            "py-spy stacks unavailable: cannot tell Python threads from native ones")
    else:
        put("cpu.python_util_pct", sum(u for tid, u in util.items() if tid in python_tids), "%",
            SRC + " summed CPU of the threads py-spy saw; ~100% = the GIL is saturated)")
        native = sum(t.cpu_s for tid, t in s.threads.items() if tid not in python_tids)
        total = sum(t.cpu_s for t in s.threads.values())
        put("cpu.native_thread_cpu_share_pct", 100.0 * native / total if total > 0 else None, "%",
            SRC + " CPU of threads py-spy never saw, e.g. OpenMP/MKL/oneDNN workers)",
            "the target used no CPU")
    return out


def _wait_signals(s: ProcessSummary, parked_tids: frozenset[int]) -> dict[str, Signal]:
    """Shares of thread readings blocked in IO or on locks, among readings not parked (sleep/epoll)."""
    totals: Counter = Counter()
    for tid, t in s.threads.items():
        if tid not in parked_tids:
            totals.update(t.waits)
    working = sum(v for k, v in totals.items() if k in ("running", *BLOCKING))
    src = SRC.replace("(psutil", "(/proc/<pid>/task/*/stat state + wchan")
    out = {}
    for name, cls in (("threads.blocked_io_share_pct", "io_wait"), ("threads.blocked_lock_share_pct", "lock_wait")):
        if working == 0:
            out[name] = missing(name, "%", src + ")", "every thread was parked (sleep/epoll): no work in progress")
        else:
            out[name] = Signal(name, 100.0 * totals[cls] / working, "%", src + ", share of non-parked readings)")
    return out


def _host_signals(s: ProcessSummary) -> dict[str, Signal]:
    d = s.sys_delta
    total = sum(d.values())
    src = "process collector (psutil cpu_times, host)"
    if total <= 0:
        return {}
    busy = total - d.get("idle", 0.0) - d.get("iowait", 0.0) - d.get("steal", 0.0)
    out = {
        "sys.cpu_util_pct": Signal("sys.cpu_util_pct", 100.0 * busy / total, "%", src),
        "sys.iowait_pct": Signal("sys.iowait_pct", 100.0 * d.get("iowait", 0.0) / total, "%", src)
        if "iowait" in d else missing("sys.iowait_pct", "%", src, "iowait not reported on this OS"),
        "sys.steal_pct": Signal("sys.steal_pct", 100.0 * d.get("steal", 0.0) / total, "%", src)
        if "steal" in d else missing("sys.steal_pct", "%", src, "steal not reported on this OS"),
    }
    for name, val, unit in (
        ("io.read_bytes_per_s", s.io_read_bytes, "bytes/s"),
        ("io.write_bytes_per_s", s.io_write_bytes, "bytes/s"),
    ):
        out[name] = Signal(name, None if val is None else val / s.elapsed_s, unit,
                           "process collector (psutil io_counters)",
                           None if val is not None else "io_counters not readable for this process")
    out["cpu.ctx_switches_per_s"] = Signal(
        "cpu.ctx_switches_per_s", (s.ctx_vol + s.ctx_invol) / s.elapsed_s, "1/s",
        "process collector (psutil num_ctx_switches)")
    if s.children_cpu_s is not None:
        out["cpu.children_util_pct"] = Signal(
            "cpu.children_util_pct", 100.0 * s.children_cpu_s / s.elapsed_s, "%",
            "process collector (psutil cpu_times of descendants, --subprocesses; 100% = one core)")
    out["mem.rss_max_bytes"] = Signal("mem.rss_max_bytes", float(s.rss_max_bytes), "bytes",
                                      "process collector (psutil memory_info)")
    return out


def dominant_wait(t: ThreadUsage) -> str | None:
    """The thread's most frequent state over the capture, with its top kernel wait channel."""
    if not t.waits:
        return None
    cls = t.waits.most_common(1)[0][0]
    if cls == "running" or not t.top_wchan:
        return cls
    return f"{cls} ({t.top_wchan.most_common(1)[0][0]})"


__all__ = ["ProcessSummary", "ThreadUsage", "dominant_wait", "process_signals", "summarize"]
