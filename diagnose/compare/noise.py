"""Run-to-run noise from the bundles themselves (pure, numpy).

A capture is cut into ``k`` windows of equal length (``window_count``: one per ~1 s, 5 to 20); the
spread of a metric across its windows is the noise that capture shows. A difference between two
captures is *significant* when it exceeds ``Z`` standard errors of the difference of the window
means (Welch: sqrt(sd_a^2/k_a + sd_b^2/k_b)), never less than ``MIN_REL`` of the base value
(``MIN_REL_SERVICE`` for P50 and QPS, ``MIN_REL_TAIL`` for P90 and above; ``floor_for``): the
windows of one capture do not see what differs between two runs (host load, warm-up, placement).
Twelve identical 2.5 s captures of one traced service on a shared 2-core VM (tests/traced_service.py)
varied with a coefficient of variation of 11% in QPS, 9% in P50, 11% in P90 and 13% in P99 (636-880
req/s); the floors are about 2 x sqrt(2) x those, so two such captures differ by less than the floor
about 19 times in 20. The same service captured twice *at the same time* differed by at most 3% in
QPS and 11% in P99: what the floor covers is drift between runs. A quieter host can pass its own
measured floor (``compare --noise-floor``). For
latency percentiles the 95% bootstrap interval of the difference
(Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, percentile method; requests
resampled with replacement) must also exclude zero. Each estimate says which test decided.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from diagnose.compare.samples import Points, Samples

Z = 2.0  # ~95% two-sided
MIN_REL = 0.10  # sampled levels (CPU, GPU activity, in-flight)
MIN_REL_SERVICE = 0.30  # P50 and QPS (module docstring: measured run-to-run noise)
MIN_REL_TAIL = 0.40  # latency percentiles from P90 up
WINDOW_S = 1.0
MIN_WINDOWS, MAX_WINDOWS = 5, 20
BOOTSTRAP_RESAMPLES = 400
BOOTSTRAP_MAX_N = 20_000  # more requests than this: resample a fixed random subset (bounded cost)
MIN_WINDOW_REQUESTS = 5


@dataclass(frozen=True)
class Spread:
    """A metric's values per window of one capture."""

    values: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.values)

    @property
    def sd(self) -> float:
        return float(np.std(self.values, ddof=1)) if self.k >= 2 else 0.0


@dataclass(frozen=True)
class Significance:
    significant: bool | None  # None: no per-window data in one of the captures
    band: float | None  # |difference| beyond which it counts, in the metric's unit
    ci: tuple[float, float] | None  # bootstrap 95% interval of new - base (latency percentiles)
    method: str


def window_count(duration_s: float | None) -> int:
    if not duration_s or duration_s <= 0:
        return 0
    return int(min(MAX_WINDOWS, max(MIN_WINDOWS, round(duration_s / WINDOW_S))))


def _edges(s: Samples) -> np.ndarray | None:
    k, d = window_count(s.duration_s), s.duration_s
    return np.linspace(0.0, d, k + 1) if k and d else None


def rate_spread(s: Samples) -> Spread | None:
    """Requests ended per second in each window."""
    edges = _edges(s)
    if edges is None or not len(s.end_s):
        return None
    counts, _ = np.histogram(s.end_s, bins=edges)
    return Spread(tuple(float(c) / (edges[1] - edges[0]) for c in counts))


def latency_spread(s: Samples, q: float) -> Spread | None:
    """Percentile ``q`` of the latencies of the requests that ended in each window (windows with
    fewer than MIN_WINDOW_REQUESTS requests left out)."""
    edges = _edges(s)
    if edges is None or not len(s.end_s):
        return None
    idx = np.clip(np.searchsorted(edges, s.end_s, side="right") - 1, 0, len(edges) - 2)
    vals = [float(np.percentile(s.latency_ms[idx == i], q)) for i in range(len(edges) - 1)
            if int((idx == i).sum()) >= MIN_WINDOW_REQUESTS]
    return Spread(tuple(vals)) if len(vals) >= 2 else None


def level_spread(s: Samples, points: Points) -> Spread | None:
    """Mean of the sampled points inside each window (windows without a point left out)."""
    edges = _edges(s)
    if edges is None or not points or s.window_ns is None:
        return None
    t = (np.array([p[0] for p in points], np.float64) - s.window_ns[0]) / 1e9
    v = np.array([p[1] for p in points], np.float64)
    keep = (t >= 0) & (t <= edges[-1]) & np.isfinite(v)
    t, v = t[keep], v[keep]
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    vals = [float(v[idx == i].mean()) for i in range(len(edges) - 1) if (idx == i).any()]
    return Spread(tuple(vals)) if len(vals) >= 2 else None


def bootstrap_diff_ci(base: np.ndarray, new: np.ndarray, q: float, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of percentile_q(new) - percentile_q(base), ms."""
    if len(base) < MIN_WINDOW_REQUESTS or len(new) < MIN_WINDOW_REQUESTS:
        return None
    rng = np.random.default_rng(seed)
    a = rng.choice(base, BOOTSTRAP_MAX_N, replace=False) if len(base) > BOOTSTRAP_MAX_N else base
    b = rng.choice(new, BOOTSTRAP_MAX_N, replace=False) if len(new) > BOOTSTRAP_MAX_N else new
    diffs = np.empty(BOOTSTRAP_RESAMPLES)
    for i in range(BOOTSTRAP_RESAMPLES):
        diffs[i] = (np.percentile(b[rng.integers(0, len(b), len(b))], q)
                    - np.percentile(a[rng.integers(0, len(a), len(a))], q))
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def floor_for(kind: str, percentile: float | None, service_floor: float | None = None) -> float:
    """The least relative difference that can count for a metric of noise model ``kind`` (``latency``,
    ``rate``, ``level``); ``service_floor`` (a fraction) replaces the latency and QPS floors."""
    if kind not in ("latency", "rate"):
        return MIN_REL
    if service_floor is not None:
        return service_floor
    return MIN_REL_TAIL if percentile is not None and percentile >= 90 else MIN_REL_SERVICE


def judge(delta: float, base_value: float, a: Spread | None, b: Spread | None,
          ci: tuple[float, float] | None = None, floor: float = MIN_REL) -> Significance:
    """Is ``delta`` (new - base) beyond the noise of the two captures' window spreads (and outside
    the bootstrap interval's reach of zero, when ``ci`` is given)?"""
    if a is None or b is None:
        return Significance(None, None, ci, "no per-window data in both captures")
    se = math.sqrt(a.sd ** 2 / a.k + b.sd ** 2 / b.k)
    band = max(Z * se, floor * abs(base_value))
    beyond = abs(delta) > band
    method = f"|diff| > {Z:g} x SE of window means ({a.k} and {b.k} windows)"
    if ci is not None:
        method += " and the 95% bootstrap interval excludes 0"
        beyond = beyond and (ci[0] > 0 or ci[1] < 0)
    return Significance(beyond, band, ci, method)


__all__ = ["Significance", "Spread", "bootstrap_diff_ci", "floor_for", "judge", "latency_spread", "level_spread",
           "rate_spread", "window_count"]
