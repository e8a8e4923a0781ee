"""Training/serving steps (``ProfilerStep#N``), the input pipeline's share of each step, and how
much of the trace is backward/optimizer work (what tells a training loop from serving)."""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from diagnose.catalogs.kernels import DATALOADER, GRADIENT_SYNC, TRAINING_OPS
from diagnose.traces.gaps import MAX_COLLECTIVE_CHARS
from diagnose.traces.intervals import merge, overlap_each
from diagnose.traces.view import TraceView, steps

_DATALOADER_RX = re.compile(DATALOADER)
_TRAINING_RX = re.compile(TRAINING_OPS)
_GRADIENT_SYNC_RX = re.compile(GRADIENT_SYNC)


def training_ops_pct(view: TraceView, host_span_ns: int | None) -> float | None:
    """Share (%) of the profiled host time inside backward or optimizer ops (catalogs/kernels.py
    TRAINING_OPS) or, in a CPU-only trace with ProfilerStep#N steps, gradient all-reduces (GRADIENT_SYNC),
    overlaps counted once; None without host events."""
    if not host_span_ns:
        return None
    m = view.name_mask(view.cpu, _TRAINING_RX)
    # CPU-only traces only: a GPU trace's training step shows its backward ops, and a GPU serving loop
    # under a profiler schedule all-reduces too (tensor parallel). A process group's label is short:
    # a 10 kB name that starts like one is none.
    if not view.has_gpu and steps(view):
        sync = [i for i, n in enumerate(view.names) if len(n) <= MAX_COLLECTIVE_CHARS and _GRADIENT_SYNC_RX.search(n)]
        m = m | np.isin(view.cpu["name"], np.asarray(sync, np.int64))
    s, e = merge(view.cpu["start_ns"][m], view.cpu["end_ns"][m])
    return min(100.0, 100.0 * float((e - s).sum()) / host_span_ns)


def step_stats(view: TraceView) -> dict[str, Any]:
    """Per step: duration, time in DataLoader annotations, GPU busy time within the step."""
    st = steps(view)
    if not st:
        return {"steps": [], "count": 0, "p50_ms": None, "max_ms": None, "dataloader_share_pct": None,
                "gpu_busy_pct": None}
    lo = np.array([s for _, s, _ in st], np.int64)
    hi = np.array([e for _, _, e in st], np.int64)
    dl = view.name_mask(view.cpu, _DATALOADER_RX)
    ds, de = merge(view.cpu["start_ns"][dl], view.cpu["end_ns"][dl])
    gs, ge = merge(view.gpu["start_ns"], view.gpu["end_ns"])
    loader = overlap_each(ds, de, lo, hi)
    busy = overlap_each(gs, ge, lo, hi)
    dur = hi - lo
    rows = [{"step": n, "start_ns": int(a), "dur_ms": d / 1e6, "dataloader_ms": ld / 1e6,
             "dataloader_pct": 100.0 * ld / d if d else None,
             "gpu_busy_pct": 100.0 * b / d if d and view.has_gpu else None}
            for (n, _, _), a, d, ld, b in zip(st, lo, dur, loader, busy)]
    total = int(dur.sum())
    return {
        "steps": rows, "count": len(rows),
        "p50_ms": float(np.percentile(dur, 50) / 1e6), "max_ms": float(dur.max() / 1e6),
        "dataloader_share_pct": 100.0 * int(loader.sum()) / total if total and dl.any() else None,
        "gpu_busy_pct": 100.0 * int(busy.sum()) / total if total and view.has_gpu else None,
    }


__all__ = ["step_stats", "training_ops_pct"]
