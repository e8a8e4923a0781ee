"""What the GPU ran: time per kernel category (catalogs/kernels.py), top kernels, memcpy traffic."""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from diagnose.catalogs.kernels import MEMCPY_DIRECTION, MEMCPY_PAGEABLE, MEMCPY_PINNED, KernelGroup
from diagnose.traces.schema import CAT_MEMCPY, CAT_SYNC
from diagnose.traces.view import CATEGORIES, GROUP_OF, TraceView

TOP_KERNELS = 10
_MEMCPY_RX = tuple(re.compile(p) for p in (MEMCPY_DIRECTION, MEMCPY_PAGEABLE, MEMCPY_PINNED))


def category_breakdown(view: TraceView) -> dict[str, Any]:
    """Busy time (sum of durations) per catalog category and group, sync events excluded.

    Shares are of the summed GPU event time, so concurrent streams can add up past the span.
    """
    g = view.gpu
    work = g["cat"] != CAT_SYNC
    dur, cat = g["dur_ns"][work], view.category[work]
    total = int(dur.sum())
    per_cat = np.bincount(cat, weights=dur, minlength=len(CATEGORIES))
    counts = np.bincount(cat, minlength=len(CATEGORIES))
    rows: list[dict[str, Any]] = [
        {"category": c, "group": GROUP_OF[c], "count": int(counts[i]), "time_ns": int(per_cat[i]),
         "share_pct": 100.0 * per_cat[i] / total if total else None}
        for i, c in enumerate(CATEGORIES) if counts[i]]
    groups: dict[str, float] = defaultdict(float)
    for r in rows:
        groups[r["group"]] += r["time_ns"]
    return {
        "total_ns": total,
        "categories": sorted(rows, key=lambda r: -r["time_ns"]),
        "groups": {k: {"time_ns": int(groups.get(k, 0)),
                       "share_pct": 100.0 * groups.get(k, 0) / total if total else None}
                   for k in (KernelGroup.COMPUTE, KernelGroup.MEMORY, KernelGroup.COMMUNICATION)},
    }


def top_kernels(view: TraceView, n: int = TOP_KERNELS) -> list[dict[str, Any]]:
    g = view.gpu
    work = g["cat"] != CAT_SYNC
    names, dur = g["name"][work], g["dur_ns"][work]
    if not len(names):
        return []
    total = dur.sum()
    uniq, inv = np.unique(names, return_inverse=True)
    sums = np.bincount(inv, weights=dur)
    counts = np.bincount(inv)
    cats = view.category[work]
    first = np.zeros(len(uniq), np.int64)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    order = np.argsort(-sums)[:n]
    return [{"name": view.name(int(uniq[i])), "category": CATEGORIES[int(cats[first[i]])],
             "count": int(counts[i]), "time_ns": int(sums[i]), "mean_us": sums[i] / counts[i] / 1e3,
             "share_pct": 100.0 * sums[i] / total if total else None} for i in order]


def memcpy_breakdown(view: TraceView) -> list[dict[str, Any]]:
    """Copies by direction (HtoD, DtoH, ...) and host memory kind (pageable, pinned, device)."""
    g = view.gpu
    rows = np.flatnonzero(g["cat"] == CAT_MEMCPY)
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0])
    direction, pageable, pinned = _MEMCPY_RX
    uniq, inv = np.unique(g["name"][rows], return_inverse=True)
    counts = np.bincount(inv, minlength=len(uniq))
    nbytes = np.bincount(inv, weights=np.nan_to_num(g["bytes"][rows]), minlength=len(uniq))
    times = np.bincount(inv, weights=g["dur_ns"][rows], minlength=len(uniq))
    for i, nid in enumerate(uniq.tolist()):
        name = view.name(nid)
        m = direction.search(name)
        kind = "pageable" if pageable.search(name) else "pinned" if pinned.search(name) else "device/unspecified"
        a = acc[(m.group(1) if m else "unknown", kind)]
        a[0] += int(counts[i])
        a[1] += float(nbytes[i])
        a[2] += int(times[i])
    return [{"direction": d, "host_memory": k, "count": int(c), "bytes": b, "time_ns": int(t),
             "bytes_per_s": b / (t / 1e9) if t > 0 else None}
            for (d, k), (c, b, t) in sorted(acc.items(), key=lambda kv: -kv[1][2])]


__all__ = ["category_breakdown", "memcpy_breakdown", "top_kernels"]
