"""Temporal breakdown and per-stream idle breakdown, as Holistic Trace Analysis defines them.

Temporal breakdown (HTA ``get_temporal_breakdown``): over the span from the first GPU event's
start to the last one's end on a rank, *idle* is time when no GPU event runs, *compute* is the
union of compute events (HTA's ``is_compute_kernel``: not NCCL, not Memcpy/Memset, not Sync),
*non-compute* is the rest. HTA first drops GPU events launched in the last ProfilerStep (the
profiler stops inside it) when a trace has at least two steps; ``hta_window`` reproduces that.

Idle breakdown (HTA ``get_idle_time_breakdown``): on each stream, the gap before each kernel is
*host wait* when the host call that launched it started after the previous kernel ended (the CPU
was late), *kernel wait* when the gap is shorter than 30 µs (back-to-back launch overhead; HTA's
default ``consecutive_kernel_delay=30`` is compared with µs intervals), else *other* (syncs,
waits on other streams).

Communication/computation overlap (HTA ``get_comm_comp_overlap``): the share of the time
communication kernels (NCCL/RCCL collectives) run during which a compute kernel runs too, over the
same GPU events as the temporal breakdown; the rest of their time is *exposed* communication.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.traces.intervals import merge, overlap_each
from diagnose.traces.schema import CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET
from diagnose.traces.view import CATEGORIES, GROUP_OF, TraceView, steps

KERNEL_WAIT_NS = 30_000


def _times(view: TraceView, rounded: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU start/end and launch-call start (ns). ``rounded``: HTA's whole-µs rounding.

    HTA rounds fractional-µs timestamps inwards (start up, end down; pytorch/pytorch#122425) before
    any analysis; applying the same rounding keeps the figures comparable with HTA's. Integer-µs
    traces are unchanged by it.
    """
    g, base = view.gpu, view.trace.meta.base_time_ns or 0
    start, end = g["start_ns"], g["end_ns"]
    launch = np.full(len(g), np.iinfo(np.int64).max, np.int64)  # unknown launch: never host wait
    linked = view.launch_row >= 0
    launch[linked] = view.runtime["start_ns"][view.launch_row[linked]]
    if rounded:
        up = lambda t: -((base - t) // 1000) * 1000 + base  # noqa: E731 - ceil to whole µs
        start, end = up(start), (end - base) // 1000 * 1000 + base
        end = np.maximum(end, start)
        launch = np.where(linked, up(launch), launch)
    return start, end, launch


@dataclass(frozen=True)
class TemporalBreakdown:
    """Times in ns over [first_start_ns, last_end_ns) of the selected GPU events."""

    first_start_ns: int
    last_end_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    events: int

    @property
    def span_ns(self) -> int:
        return self.last_end_ns - self.first_start_ns

    def pct(self, part_ns: int) -> float | None:
        return 100.0 * part_ns / self.span_ns if self.span_ns > 0 else None

    def to_json(self) -> dict:
        return {"first_start_ns": self.first_start_ns, "last_end_ns": self.last_end_ns,
                "span_ns": self.span_ns, "events": self.events, "idle_ns": self.idle_ns,
                "compute_ns": self.compute_ns, "non_compute_ns": self.non_compute_ns,
                "idle_pct": self.pct(self.idle_ns), "compute_pct": self.pct(self.compute_ns),
                "non_compute_pct": self.pct(self.non_compute_ns)}


@dataclass(frozen=True)
class StreamIdle:
    device: int
    stream: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int

    @property
    def idle_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns

    def to_json(self) -> dict:
        total = self.idle_ns

        def share(v: float) -> float | None:
            return round(100.0 * v / total, 2) if total > 0 else None

        return {"device": self.device, "stream": self.stream, "idle_ns": total,
                "host_wait_ns": self.host_wait_ns, "kernel_wait_ns": self.kernel_wait_ns,
                "other_ns": self.other_ns, "host_wait_pct": share(self.host_wait_ns),
                "kernel_wait_pct": share(self.kernel_wait_ns), "other_pct": share(self.other_ns)}


def hta_window(view: TraceView) -> np.ndarray:
    """Mask of GPU events HTA keeps: with >= 2 ProfilerSteps, those enqueued before the last one."""
    keep = np.ones(len(view.gpu), bool)
    st = steps(view)
    if len({n for n, _, _ in st}) < 2:
        return keep
    last_start = max(s for _, s, _ in st)
    linked = view.launch_row >= 0
    launched_before = np.zeros(len(view.gpu), bool)
    launched_before[linked] = view.runtime["start_ns"][view.launch_row[linked]] < last_start
    # events with no launch correlation are host-side to HTA: kept when they start in time
    no_corr = view.gpu["correlation"] < 0
    return np.where(no_corr, view.gpu["start_ns"] < last_start, launched_before)


def temporal_breakdown(view: TraceView, mask: np.ndarray | None = None,
                       rounded: bool = True) -> TemporalBreakdown | None:
    """None when no GPU event is selected (e.g. a CPU-only trace)."""
    sel = np.ones(len(view.gpu), bool) if mask is None else mask
    g_start, g_end, _ = _times(view, rounded)
    start, end = g_start[sel], g_end[sel]
    if not len(start):
        return None
    s, e = merge(start, end)
    span = int(e[-1] - s[0])
    busy = int((e - s).sum())
    comp = view.temporal_compute[sel]
    cs, ce = merge(start[comp], end[comp])
    compute = int((ce - cs).sum())
    idle = span - busy
    return TemporalBreakdown(int(s[0]), int(e[-1]), idle, compute, span - compute - idle, int(sel.sum()))


def idle_by_stream(view: TraceView, mask: np.ndarray | None = None,
                   kernel_wait_ns: int = KERNEL_WAIT_NS, rounded: bool = True) -> list[StreamIdle]:
    """Idle time on each (device, stream) split into host wait, kernel wait and other."""
    g = view.gpu
    sel = np.isin(g["cat"], (CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET))
    if mask is not None:
        sel &= mask
    rows = np.flatnonzero(sel)
    start, end, launch = _times(view, rounded)
    out = []
    keys = (np.unique(np.stack([g["device"][rows], g["stream"][rows]], axis=1), axis=0) if len(rows)
            else np.zeros((0, 2), np.int64))
    for dev, stream in ((int(a), int(b)) for a, b in keys):
        r = rows[(g["device"][rows] == dev) & (g["stream"][rows] == stream)]
        r = r[np.argsort(start[r], kind="stable")]
        if len(r) < 2:
            out.append(StreamIdle(dev, stream, 0, 0, 0))
            continue
        prev_end = end[r][:-1]
        cur = r[1:]
        gap = start[cur] - prev_end
        host = (launch[cur] > prev_end) & (launch[cur] != np.iinfo(np.int64).max)
        kern = ~host & (gap < kernel_wait_ns)
        other = ~host & ~kern
        out.append(StreamIdle(dev, stream, int(gap[host].sum()), int(gap[kern].sum()),
                              int(gap[other].sum())))
    return out


_COMM = np.array([GROUP_OF[c] == "communication" for c in CATEGORIES])


def comm_overlap(view: TraceView, mask: np.ndarray | None = None, rounded: bool = False) -> dict | None:
    """Communication kernel time (union per device, ns), the part of it overlapped by compute
    kernels on the same device, and its share (HTA's comp_comm_overlap_pctg, per rank); None
    without communication kernels."""
    sel = np.ones(len(view.gpu), bool) if mask is None else mask
    comm = _COMM[view.category] & sel
    if not comm.any():
        return None
    start, end, _ = _times(view, rounded)
    compute = view.temporal_compute & ~_COMM[view.category] & sel
    comm_ns = overlapped = 0
    for dev in np.unique(view.gpu["device"][comm]).tolist():
        on = view.gpu["device"] == dev
        cs, ce = merge(start[comm & on], end[comm & on])
        ks, ke = merge(start[compute & on], end[compute & on])
        comm_ns += int((ce - cs).sum())
        overlapped += int(overlap_each(ks, ke, cs, ce).sum())
    return {"comm_ns": comm_ns, "overlapped_ns": overlapped, "exposed_ns": comm_ns - overlapped,
            "overlap_pct": 100.0 * overlapped / comm_ns if comm_ns else None}


__all__ = ["KERNEL_WAIT_NS", "StreamIdle", "TemporalBreakdown", "comm_overlap", "hta_window", "idle_by_stream",
           "temporal_breakdown"]
