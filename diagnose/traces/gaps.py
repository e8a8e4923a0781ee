"""GPU idle gaps: holes in the union of GPU events longer than a threshold, and what the host's
profiled threads (torch ops and record_function labels) were inside while the GPU waited."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnose.catalogs.kernels import HOST_COLLECTIVES
from diagnose.traces.intervals import gaps, merge, overlap_each
from diagnose.traces.schema import CAT_CPU_OP, Table
from diagnose.traces.view import TraceView

GAP_MIN_NS = 100_000  # 10x a typical launch latency: shorter holes are launch overhead
HOST_GAP_MIN_NS = 1_000_000  # torch-op gaps on a CPU-only trace: shorter ones are Python glue
MAX_LISTED = 20
MAX_NAMES = 200  # host op names considered for the aggregate (by total time)
_COLLECTIVES_RX = re.compile(HOST_COLLECTIVES)
# A process group's label is short ("gloo:reduce_scatter_tensor_coalesced"): a longer name that the
# pattern matches (TraceView.name_mask reads the first 512 characters only, so its ``$`` holds there) is
# no collective.
MAX_COLLECTIVE_CHARS = 64


def collective_mask(view: TraceView, table: Table) -> np.ndarray:
    """Rows of ``table`` named as host collectives (HOST_COLLECTIVES, whole name, at most
    MAX_COLLECTIVE_CHARS characters)."""
    ids = [i for i, n in enumerate(view.names) if len(n) <= MAX_COLLECTIVE_CHARS and _COLLECTIVES_RX.fullmatch(n)]
    return np.isin(table["name"], np.asarray(ids, np.int64))


@dataclass(frozen=True)
class IdleGaps:
    start_ns: np.ndarray  # sorted, disjoint
    end_ns: np.ndarray
    window_ns: int  # first event start .. last end
    min_gap_ns: int
    busy_ns: int | None = None  # time covered by the events themselves
    comm_ns: int | None = None  # CPU-only traces: time in host collectives while no torch op ran

    @property
    def total_ns(self) -> int:
        return int((self.end_ns - self.start_ns).sum())

    @property
    def share_pct(self) -> float | None:
        return 100.0 * self.total_ns / self.window_ns if self.window_ns > 0 else None


def idle_gaps(view: TraceView, mask: np.ndarray | None = None, min_gap_ns: int = GAP_MIN_NS) -> IdleGaps:
    g = view.gpu
    sel = np.ones(len(g), bool) if mask is None else mask
    s, e = merge(g["start_ns"][sel], g["end_ns"][sel])
    if not len(s):
        return IdleGaps(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, min_gap_ns)
    lo, hi = gaps(s, e)
    long = (hi - lo) >= min_gap_ns
    return IdleGaps(lo[long], hi[long], int(e[-1] - s[0]), min_gap_ns, int((e - s).sum()))


def torch_op_gaps(view: TraceView, min_gap_ns: int = HOST_GAP_MIN_NS) -> IdleGaps:
    """CPU-only traces: holes in the union of torch ops (``cpu_op``, collectives excepted) on all host threads, over the
    profiled host window (first to last host event, record_function labels included: a step whose
    ops all sit at its end is mostly not ops).

    Without kernels the host's op timeline stands in for the GPU's: a hole is time in which the
    model ran nothing, e.g. while the threads pre- or post-processed in plain Python, or waited in a
    collective (``comm_ns``: host collectives, catalogs/kernels.py HOST_COLLECTIVES, outside ops).
    Collectives recorded as ``cpu_op`` (record_param_comms, c10d::allreduce_) count as collectives, not
    ops; a trace of collectives and no op has a window (all of it collectives or neither) and no gaps.
    """
    cpu = view.cpu
    coll = collective_mask(view, cpu)
    # collectives recorded as ops (record_param_comms, c10d::allreduce_) are communication, not ops
    ops = (cpu["cat"] == CAT_CPU_OP) & ~coll
    s, e = merge(cpu["start_ns"][ops], cpu["end_ns"][ops])
    cs, ce = merge(cpu["start_ns"][coll], cpu["end_ns"][coll])
    if not len(s) and not len(cs):
        return IdleGaps(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, min_gap_ns)
    first, last = int(cpu["start_ns"].min()), int(cpu["end_ns"].max())
    comm = int((ce - cs).sum() - overlap_each(s, e, cs, ce).sum()) if len(cs) else 0
    if not len(s):  # collectives and no op at all: the whole window is communication or neither
        return IdleGaps(np.zeros(0, np.int64), np.zeros(0, np.int64), last - first, min_gap_ns, 0, max(0, comm))
    lo, hi = gaps(s, e)
    long = (hi - lo) >= min_gap_ns
    return IdleGaps(lo[long], hi[long], last - first, min_gap_ns, int((e - s).sum()), max(0, comm))


def host_during_gaps(view: TraceView, ig: IdleGaps) -> list[dict[str, Any]]:
    """Share of gap time each host op/label was open (per name, nested ones counted each)."""
    cpu = view.cpu
    total = ig.total_ns
    if not total or not len(cpu):
        return []
    totals = np.bincount(cpu["name"], weights=cpu["dur_ns"], minlength=len(view.names))
    names = np.argsort(-totals)[:MAX_NAMES]
    names = names[totals[names] > 0]
    order = np.argsort(cpu["name"], kind="stable")  # rows grouped by name, by start within a name
    sorted_names = cpu["name"][order]
    out: list[dict[str, Any]] = []
    for nid in names.tolist():
        rows = order[np.searchsorted(sorted_names, nid):np.searchsorted(sorted_names, nid, side="right")]
        s, e = merge(cpu["start_ns"][rows], cpu["end_ns"][rows])
        covered = int(overlap_each(s, e, ig.start_ns, ig.end_ns).sum())
        if covered:
            out.append({"name": view.name(nid), "share_pct": 100.0 * covered / total, "time_ns": covered})
    return sorted(out, key=lambda r: -r["time_ns"])[:10]


def host_op_coverage_pct(view: TraceView, ig: IdleGaps) -> float | None:
    """Share of gap time during which some profiled torch op or label was open on the host."""
    if not ig.total_ns:
        return None
    s, e = merge(view.cpu["start_ns"], view.cpu["end_ns"])
    return 100.0 * int(overlap_each(s, e, ig.start_ns, ig.end_ns).sum()) / ig.total_ns


def gap_rows(view: TraceView, ig: IdleGaps, n: int = MAX_LISTED) -> list[dict[str, Any]]:
    """The longest gaps with the host op that covered most of each (innermost of the dominant)."""
    order = np.argsort(-(ig.end_ns - ig.start_ns))[:n]
    cpu = view.cpu
    rows = []
    for i in sorted(order.tolist(), key=lambda k: ig.start_ns[k]):
        lo, hi = int(ig.start_ns[i]), int(ig.end_ns[i])
        rows.append({"start_ns": lo, "end_ns": hi, "dur_us": (hi - lo) / 1e3,
                     "host_op": _dominant_op(view, cpu, lo, hi)})
    return rows


def _dominant_op(view: TraceView, cpu: Table, lo: int, hi: int) -> str | None:
    """The shortest host event covering at least half of [lo, hi): the innermost busy op."""
    hit = (cpu["start_ns"] < hi) & (cpu["end_ns"] > lo)
    if not hit.any():
        return None
    idx = np.flatnonzero(hit)
    cover = np.minimum(cpu["end_ns"][idx], hi) - np.maximum(cpu["start_ns"][idx], lo)
    big = idx[cover * 2 >= hi - lo]
    if not len(big):
        return None
    return view.name(int(cpu["name"][big[np.argmin(cpu["dur_ns"][big])]]))


__all__ = ["GAP_MIN_NS", "HOST_GAP_MIN_NS", "MAX_COLLECTIVE_CHARS", "IdleGaps", "collective_mask", "gap_rows",
           "host_during_gaps", "host_op_coverage_pct", "idle_gaps", "torch_op_gaps"]
