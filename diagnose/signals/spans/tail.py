"""Tail analysis: what the slowest 1% of requests have in common (pure).

Compared with all requests: the stage whose share grows most in the tail, the numeric request
attribute (catalogs/stages.py SIZE_ATTRIBUTES) whose median grows most, and how many tail
requests overlap a garbage-collection pause (the GC stream: start_ns/end_ns/generation).
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from diagnose.bundle.records.spans import attribute_number
from diagnose.catalogs.stages import SIZE_ATTRIBUTES, STAGES
from diagnose.signals.spans.analytics import Request
from diagnose.traces.intervals import merge, overlap_each

TAIL_FRACTION = 0.01
MIN_SIZE_RATIO = 1.5


def tail_requests(reqs: list[Request]) -> tuple[list[Request], float | None]:
    """The slowest 1% (at least one request) and the latency cut (ms)."""
    if not reqs:
        return [], None
    ranked = sorted(reqs, key=lambda r: r.span.dur_ns, reverse=True)
    n = max(1, math.ceil(len(ranked) * TAIL_FRACTION))
    return ranked[:n], ranked[n - 1].span.dur_ns / 1e6


def _stage_shares(reqs: list[Request]) -> dict[str, float]:
    total = sum(r.span.dur_ns for r in reqs)
    return {st: 100.0 * sum(r.stage_ns.get(st, 0) for r in reqs) / total if total else 0.0 for st in STAGES}


def _size_attribute(tail: list[Request], reqs: list[Request]) -> dict[str, Any] | None:
    rx = re.compile(SIZE_ATTRIBUTES)
    keys = {k for r in reqs for k, v in r.span.attributes.items()
            if rx.search(k) and type(v) in (int, float)}
    best: dict[str, Any] | None = None
    for k in sorted(keys):  # sizes the target wrote: a number too large for a float is none
        all_v = [v for r in reqs if (v := attribute_number(r.span.attributes, k)) is not None]
        tail_v = [v for r in tail if (v := attribute_number(r.span.attributes, k)) is not None]
        if len(all_v) < 5 or not tail_v:
            continue
        med_all, med_tail = float(np.median(all_v)), float(np.median(tail_v))
        ratio = med_tail / med_all if med_all > 0 else None
        if ratio and ratio >= MIN_SIZE_RATIO and (best is None or ratio > best["ratio"]):
            best = {"attribute": k, "tail_median": med_tail, "all_median": med_all, "ratio": ratio}
    return best


def gc_overlap(reqs: list[Request], pauses: list[tuple[int, int]]) -> tuple[int, int]:
    """(requests overlapping a GC pause, GC ns inside them)."""
    if not reqs or not pauses:
        return 0, 0
    p = np.array(pauses, np.int64)
    s, e = merge(p[:, 0], p[:, 1])
    lo = np.array([r.span.start_ns for r in reqs], np.int64)
    hi = np.array([r.span.end_ns for r in reqs], np.int64)
    inside = overlap_each(s, e, lo, hi)
    return int((inside > 0).sum()), int(inside.sum())


def tail_summary(reqs: list[Request], pauses: list[tuple[int, int]]) -> dict[str, Any]:
    tail, cut_ms = tail_requests(reqs)
    if not tail:
        return {"requests": 0}
    all_sh, tail_sh = _stage_shares(reqs), _stage_shares(tail)
    grown = max(STAGES, key=lambda st: tail_sh[st] - all_sh[st])
    n_gc, gc_ns = gc_overlap(tail, pauses)
    n_gc_all, _ = gc_overlap(reqs, pauses)
    tail_ns = sum(r.span.dur_ns for r in tail)
    names: dict[str, int] = {}
    for r in tail:
        names[r.span.name] = names.get(r.span.name, 0) + 1
    return {
        "requests": len(tail), "cut_ms": cut_ms,
        "stage_share_pct": tail_sh, "all_stage_share_pct": all_sh,
        "dominant_stage": max(STAGES, key=lambda st: tail_sh[st]) if any(tail_sh.values()) else None,
        "grown_stage": grown if tail_sh[grown] - all_sh[grown] > 0 else None,
        "size_attribute": _size_attribute(tail, reqs),
        "gc_overlap_pct": 100.0 * n_gc / len(tail) if pauses else None,
        "gc_overlap_all_pct": 100.0 * n_gc_all / len(reqs) if pauses else None,
        "gc_share_of_tail_time_pct": 100.0 * gc_ns / tail_ns if pauses and tail_ns else None,
        "names": names,
        "windows": [(r.span.start_ns, r.span.end_ns) for r in tail],
    }


__all__ = ["gc_overlap", "tail_requests", "tail_summary"]
