"""rank_timeline(view) -> RankTimeline: what the job analysis (diagnose/ranks) needs of one rank.

The temporal breakdown split four ways over the rank's GPU window (first GPU event's start to the
last one's end), each instant counted once, in this order: *compute* when a compute kernel runs
(HTA's ``is_compute_kernel``), else *communication* when a collective (NCCL/RCCL) kernel runs,
else *memcpy* when a memcpy/memset runs, else *other* (syncs, unclassified non-compute), and
*idle* when nothing runs. The four busy terms and idle add up to the span.

Collectives: one row per collective kernel instance with the trace's own keys: the args
"Process Group Name", "Collective name" and "Seq"/"seq" (torch >= 2.x writes them on NCCL kernels),
and its occurrence index among the rank's kernels of that group and name, which matches ranks
where a trace has no sequence number. Step starts: ProfilerStep#N on the host (Unix ns).
Small and picklable: this is what travels from a worker, never the events.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.traces.intervals import merge
from diagnose.traces.schema import CAT_MEMCPY, CAT_MEMSET
from diagnose.traces.view import CATEGORIES, GROUP_OF, TraceView, steps

_COMM = np.array([GROUP_OF[c] == "communication" for c in CATEGORIES])


@dataclass(frozen=True)
class RankBreakdown:
    """One rank's GPU window split into compute / communication / memcpy / other / idle (ns)."""

    span_ns: int
    compute_ns: int
    communication_ns: int
    memcpy_ns: int
    other_ns: int
    idle_ns: int

    def pct(self, part_ns: int) -> float | None:
        return 100.0 * part_ns / self.span_ns if self.span_ns > 0 else None

    def terms(self) -> dict[str, int]:
        """The four terms a rank's verdict picks from (``other`` is left out: never the answer)."""
        return {"compute": self.compute_ns, "communication": self.communication_ns,
                "memcpy": self.memcpy_ns, "idle": self.idle_ns}


@dataclass(frozen=True)
class Collective:
    """One collective kernel on one rank: process group, collective name, sequence number (-1 when
    the trace has none), occurrence index among this rank's (group, name) kernels, Unix ns times."""

    group: str
    name: str
    seq: int
    index: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RankTimeline:
    breakdown: RankBreakdown | None  # None: no GPU event
    collectives: tuple[Collective, ...]
    step_starts: tuple[tuple[int, int], ...]  # (ProfilerStep number, start Unix ns), by start
    window_ns: tuple[int, int] | None = None  # the whole trace's GPU window (first start, last end; Unix ns)


def _covered(start: np.ndarray, end: np.ndarray, sel: np.ndarray) -> int:
    s, e = merge(start[sel], end[sel])
    return int((e - s).sum())


def rank_breakdown(view: TraceView, mask: np.ndarray | None = None) -> RankBreakdown | None:
    """The four-way split of the selected GPU events (all when ``mask`` is None); None without any."""
    g = view.gpu
    sel = np.ones(len(g), bool) if mask is None else mask
    if not sel.any():
        return None
    start, end = g["start_ns"], g["end_ns"]
    comm = _COMM[view.category] & sel
    compute = view.temporal_compute & ~comm & sel
    copy = np.isin(g["cat"], (CAT_MEMCPY, CAT_MEMSET)) & sel
    c1 = _covered(start, end, compute)
    c2 = _covered(start, end, compute | comm)
    c3 = _covered(start, end, compute | comm | copy)
    busy = _covered(start, end, sel)
    span = int(end[sel].max() - start[sel].min())
    return RankBreakdown(span, c1, c2 - c1, c3 - c2, busy - c3, span - busy)


def collectives(view: TraceView) -> tuple[Collective, ...]:
    """Collective kernels by start: those with a "Collective name" arg, and communication kernels
    (kernel catalog) without one, named by their kernel name in process group "?"."""
    g, names = view.gpu, view.trace.names
    rows = np.flatnonzero((g["coll"] >= 0) | _COMM[view.category])
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in rows.tolist():
        coll, pg = int(g["coll"][r]), int(g["pg"][r])
        name = names[coll] if coll >= 0 else names[int(g["name"][r])]
        group = names[pg] if pg >= 0 else "?"
        index = seen.get((group, name), 0)
        seen[(group, name)] = index + 1
        out.append(Collective(group, name, int(g["seq"][r]), index, int(g["start_ns"][r]), int(g["end_ns"][r])))
    return tuple(out)


def rank_timeline(view: TraceView, mask: np.ndarray | None = None) -> RankTimeline:
    """Breakdown over ``mask`` (the report's window); collectives, step starts and the GPU window
    (Unix ns) over the whole trace."""
    g = view.gpu
    window = (int(g["start_ns"].min()), int(g["end_ns"].max())) if len(g) else None
    return RankTimeline(rank_breakdown(view, mask), collectives(view),
                        tuple(sorted(((n, s) for n, s, _ in steps(view)), key=lambda t: t[1])), window)


__all__ = ["Collective", "RankBreakdown", "RankTimeline", "collectives", "rank_breakdown", "rank_timeline"]
