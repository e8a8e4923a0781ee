"""Interval arithmetic on numpy arrays of [start, end) in ns."""
from __future__ import annotations

import numpy as np


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end); touching intervals are joined."""
    if not len(start):
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def covered_ns(start: np.ndarray, end: np.ndarray) -> int:
    s, e = merge(start, end)
    return int((e - s).sum())


def overlap_ns(a_start: np.ndarray, a_end: np.ndarray, lo: int, hi: int) -> int:
    """Time within [lo, hi) covered by the union of the a intervals."""
    s, e = merge(a_start, a_end)
    return int(np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None).sum())


def overlap_each(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window [lo_i, hi_i): time covered by the disjoint sorted intervals (s, e)."""
    if not len(s) or not len(lo):
        return np.zeros(len(lo), np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))

    def covered_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - s[np.maximum(i - 1, 0)], 0,
                                       (e - s)[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + last, 0)

    covered: np.ndarray = covered_before(hi) - covered_before(lo)  # numpy types ndarray - ndarray as Any
    return covered


def gaps(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The holes between disjoint sorted intervals: (gap_start, gap_end)."""
    return e[:-1], s[1:]


__all__ = ["covered_ns", "gaps", "merge", "overlap_each", "overlap_ns"]
