"""find_knee(steps) -> Knee: the offered load where P99 latency starts to degrade. Pure.

Method: a continuous two-segment ("hinge") least-squares fit of P99 against offered load, the join point
estimated by Hudson's exact method (D. J. Hudson, "Fitting segmented curves whose join points have to be
estimated", JASA 61(316), 1966): for each split of the sorted steps into a left run and a right run, fit
one line to each; where the two lines meet inside the gap between the runs, that meeting point is the
optimal join for that split; otherwise the optimum lies on an edge of the gap, and the hinge model
``p99 = a + b1 x + (b2 - b1) max(0, x - c)`` is fitted there with ``c`` fixed. The split and join with
the least total squared error win. (Kneedle, Satopää et al., "Finding a 'Kneedle' in a Haystack", ICDCS
workshops 2011, is the non-parametric alternative; a fitted pair of slopes gives the acceptance tests
below something to stand on.)

How it relates to GuideLLM (vllm-project/guidellm, ``benchmark/analysis/knee.py``, read, not copied):
GuideLLM fits two independent OLS lines to *output throughput against concurrency* (a closed-loop sweep)
and accepts a breakpoint where the tail is much *flatter* (tail slope <= 0.25x the rising slope), the
segmented fit cuts the one-line error by at least half, and the breakpoint reaches 85% of the peak
throughput, with at least 5 points. Here the sweep is open-loop (offered rate, not concurrency), so the
knee shows in latency: the tail is much *steeper*, the mirror image of GuideLLM's test, and the join is
constrained continuous (Hudson) instead of two free lines whose intersection is clamped.

A step is *saturated* when its achieved throughput is under ``SATURATED_FRACTION`` (0.9x) the load that
arrived in it (open loop: the arrivals counted in the window; otherwise the offered rate). Steps past the
first saturated one are left out of the fit: there the backlog grows for the whole step, so their P99
measures the step's length, not the service.

Acceptance criteria (all must hold for a knee from the fit):

1. At least ``MIN_STEPS`` (4) steps with a P99, so at least 2 steps lie on each side of the join.
2. P99 degraded: P99 at the last step is at least ``MIN_RISE`` (2x) the P99 at the first, or some step
   is saturated. Otherwise the sweep stayed below the knee ("step higher"); a saturated first step
   means it started above it ("step lower").
3. The shape is a knee: the slope after the join is positive and at least ``MIN_SLOPE_RATIO`` (3x) the
   slope before it (a flat or falling first segment counts as slope 0), and the segmented fit cuts the
   squared error of one straight line by at least ``MIN_FIT_IMPROVEMENT`` (50%, as GuideLLM).
4. The knee step, whose measured throughput and P99 are reported, is the highest unsaturated step at or
   below the join (so a measured point, on the flat side) whose P99 did not jump ``MIN_JUMP`` (3x) from
   the step below it: a plateau after a jump (a loaded host: 15, 23, 272, 242, 209, 475 ms) pulls the
   join past a step that has already degraded. The same holds for a knee by saturation.

When 3 fails (or fewer than 4 steps remain to fit) but a step is saturated, the knee is the last step
before the first saturated one (``basis`` "saturation"): throughput that stops following the offered
load is a knee by itself.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

MIN_STEPS = 4
MIN_RISE = 2.0
MIN_JUMP = 3.0
MIN_SLOPE_RATIO = 3.0
MIN_FIT_IMPROVEMENT = 0.5
SATURATED_FRACTION = 0.9
MIN_OFFERED_QPS = 0.001  # the rates' resolution; denormal loads made the least-squares fit fail to converge
METHOD = ("two-segment least-squares fit of P99 against offered load, join point by Hudson (JASA 1966); "
          f"accepted when the slope after the join is >= {MIN_SLOPE_RATIO:g}x the slope before it, the fit cuts "
          f"one line's squared error by >= {MIN_FIT_IMPROVEMENT:.0%}, and P99 rose >= {MIN_RISE:g}x or throughput "
          f"fell under {SATURATED_FRACTION:g}x the offered load")


class KneeError(ValueError):
    """A step is not valid (non-finite or non-positive load, duplicate offered rates)."""


@dataclass(frozen=True)
class LoadStep:
    """One step of a sweep: the offered load and what the service did with it."""

    offered_qps: float
    achieved_qps: float
    p99_ms: float | None  # None: no request succeeded
    p50_ms: float | None = None
    mean_ms: float | None = None
    requests: int | None = None  # requests counted in the step (answered, failed and unfinished)
    errors: int = 0
    unfinished: int = 0  # open loop: unanswered when the step ended (their latency is censored there)
    arrival_qps: float | None = None  # open loop: arrivals in the measured window per second (chance varies it)

    @property
    def error_fraction(self) -> float:
        return (self.errors + self.unfinished) / self.requests if self.requests else 0.0

    @property
    def saturated(self) -> bool:
        """Throughput under 0.9x the load that arrived (the offered rate when the arrivals are not known)."""
        return self.achieved_qps < SATURATED_FRACTION * (self.arrival_qps or self.offered_qps)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Knee:
    accepted: bool
    reason: str  # one line: what was found, or why no knee was
    basis: str | None = None  # "two-segment fit" or "saturation" when accepted
    breakpoint_qps: float | None = None  # the fitted join, in offered QPS
    step: int | None = None  # index of the knee step in the steps given
    offered_qps: float | None = None  # the knee step's offered load
    achieved_qps: float | None = None  # ... its measured throughput: what one instance serves at the knee
    p99_ms: float | None = None
    slope_before_ms_per_qps: float | None = None
    slope_after_ms_per_qps: float | None = None
    fit_improvement: float | None = None  # 1 - segmented SSE / one-line SSE

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class _Fit:
    sse: float
    join: float
    slope_before: float
    slope_after: float


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Intercept, slope and squared error of the OLS line through (x, y)."""
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope), float(np.sum((y - (intercept + slope * x)) ** 2))


def _hinge(x: np.ndarray, y: np.ndarray, join: float) -> _Fit:
    """Least squares of y = a + b1 x + d max(0, x - join), the join fixed."""
    design = np.column_stack([np.ones_like(x), x, np.maximum(0.0, x - join)])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    sse = float(np.sum((y - design @ coef) ** 2))
    return _Fit(sse, join, float(coef[1]), float(coef[1] + coef[2]))


def _best_fit(x: np.ndarray, y: np.ndarray) -> _Fit:
    """Hudson's exact two-segment fit with a continuous join, at least 2 points each side."""
    best: _Fit | None = None
    for j in range(1, len(x) - 2):  # left run x[:j+1], right run x[j+1:]
        a1, b1, e1 = _line(x[: j + 1], y[: j + 1])
        a2, b2, e2 = _line(x[j + 1:], y[j + 1:])
        meet = (a2 - a1) / (b1 - b2) if b1 != b2 else math.nan
        if x[j] <= meet <= x[j + 1]:
            fits = [_Fit(e1 + e2, meet, b1, b2)]
        else:
            fits = [_hinge(x, y, float(x[j])), _hinge(x, y, float(x[j + 1]))]
        for fit in fits:
            if best is None or fit.sse < best.sse - 1e-12:
                best = fit
    if best is None:  # unreachable with MIN_STEPS points
        raise KneeError("too few steps for a two-segment fit")
    return best


def _check(steps: Sequence[LoadStep]) -> None:
    for s in steps:
        values = (s.offered_qps, s.achieved_qps) + ((s.p99_ms,) if s.p99_ms is not None else ())
        if not all(math.isfinite(v) for v in values) or s.offered_qps < MIN_OFFERED_QPS or s.achieved_qps < 0:
            raise KneeError(f"step at {s.offered_qps} QPS: offered load must be at least {MIN_OFFERED_QPS:g} QPS, "
                            "throughput and P99 finite")
    offered = [s.offered_qps for s in steps]
    if len(set(offered)) != len(offered):
        raise KneeError("two steps offer the same load; give distinct rates")


def _knee_step(steps: Sequence[LoadStep], upto_qps: float) -> int | None:
    """The highest unsaturated step offered at most ``upto_qps``."""
    found = [i for i, s in enumerate(steps) if s.offered_qps <= upto_qps * (1 + 1e-9) and not s.saturated]
    return found[-1] if found else None


def _degraded(steps: Sequence[LoadStep], i: int) -> bool:
    """Step ``i``'s P99 jumped: at least MIN_JUMP x the P99 of the step below it (P99 that climbs
    gently as the load rises, 7, 14, 24, 28 ms, is the flat side; 23 to 272 ms is past the knee)."""
    below, p99 = steps[i - 1].p99_ms, steps[i].p99_ms
    return below is not None and p99 is not None and p99 >= MIN_JUMP * below


def _no_knee(reason: str, fit: _Fit | None = None, improvement: float | None = None) -> Knee:
    return Knee(False, reason, None, fit.join if fit else None, None, None, None, None,
                fit.slope_before if fit else None, fit.slope_after if fit else None, improvement)


def _accept(steps: Sequence[LoadStep], i: int, basis: str, why: str, fit: _Fit | None = None,
            improvement: float | None = None) -> Knee:
    while i > 0 and _degraded(steps, i):  # a step already degraded is past the knee, whatever the basis
        i -= 1
    s = steps[i]
    return Knee(True, why, basis, fit.join if fit else None, i, s.offered_qps, s.achieved_qps, s.p99_ms,
                fit.slope_before if fit else None, fit.slope_after if fit else None, improvement)


def _by_saturation(steps: Sequence[LoadStep], first: int, fit: _Fit | None = None,
                   improvement: float | None = None) -> Knee:
    sat = steps[first]
    return _accept(steps, first - 1, "saturation", f"throughput stopped following the load at {sat.offered_qps:g} "
                   f"QPS offered ({sat.achieved_qps:.1f} achieved): the knee is the last step before it with P99 "
                   "still flat",
                   fit, improvement)


def _find(pts: tuple[LoadStep, ...]) -> Knee:
    """find_knee on valid steps with a P99, sorted by offered load; ``step`` indexes ``pts``."""
    if len(pts) < MIN_STEPS:
        return _no_knee(f"too few steps: {len(pts)} with a P99 (a knee needs at least {MIN_STEPS}, 2 each side); "
                        "add rates")
    first_sat = next((i for i, s in enumerate(pts) if s.saturated), None)
    lo, hi = pts[0], pts[-1]
    if first_sat is None and hi.p99_ms is not None and lo.p99_ms is not None and hi.p99_ms < MIN_RISE * lo.p99_ms:
        return _no_knee(f"P99 never degraded ({lo.p99_ms:.1f} ms at {lo.offered_qps:g} QPS, {hi.p99_ms:.1f} ms at "
                        f"{hi.offered_qps:g} QPS) and throughput kept up: the sweep stayed below the knee; step higher")
    if first_sat == 0:
        return _no_knee(f"the first step is already saturated ({lo.achieved_qps:.1f} QPS achieved of "
                        f"{lo.offered_qps:g} offered): the service was past its knee from the start; step lower")
    # past the first saturated step the backlog grows for the whole step: P99 measures the step's length
    fit_pts = pts if first_sat is None else pts[: first_sat + 1]
    if len(fit_pts) < MIN_STEPS and first_sat is not None:
        return _by_saturation(pts, first_sat)
    x = np.array([s.offered_qps for s in fit_pts])
    y = np.array([s.p99_ms for s in fit_pts], dtype=float)
    fit = _best_fit(x, y)
    line_sse = _line(x, y)[2]
    improvement = 1.0 - fit.sse / line_sse if line_sse > 1e-12 else 0.0
    steep = fit.slope_after > 0 and fit.slope_after >= MIN_SLOPE_RATIO * max(fit.slope_before, 0.0)
    if not (steep and improvement >= MIN_FIT_IMPROVEMENT):
        if first_sat is not None:
            return _by_saturation(pts, first_sat, fit, improvement)
        return _no_knee(f"P99 rises without a knee: the slope after the best join ({fit.slope_after:.3g} ms/QPS) is "
                        f"not {MIN_SLOPE_RATIO:g}x the slope before it ({fit.slope_before:.3g}) with a fit "
                        f"{MIN_FIT_IMPROVEMENT:.0%} better than one line ({improvement:.0%}); plan within an SLO "
                        "(--slo-p99)", fit, improvement)
    i = _knee_step(fit_pts, fit.join)
    if i is None:  # not reached: the join lies at or past the second step, and only the last step is saturated
        return _no_knee("no unsaturated step below the join; step lower", fit, improvement)
    return _accept(pts, i, "two-segment fit", f"P99 climbs {fit.slope_after:.3g} ms per QPS past {fit.join:.1f} QPS "
                   f"offered ({fit.slope_before:.3g} before)", fit, improvement)


def find_knee(steps: Sequence[LoadStep]) -> Knee:
    """The knee of a sweep (steps in any order; steps without a P99 are left out). Raises KneeError for
    invalid steps; a sweep without a knee is a Knee with ``accepted`` False and the reason."""
    _check(steps)
    order = sorted((i for i, s in enumerate(steps) if s.p99_ms is not None), key=lambda i: steps[i].offered_qps)
    knee = _find(tuple(steps[i] for i in order))
    return replace(knee, step=order[knee.step]) if knee.step is not None else knee


__all__ = ["METHOD", "Knee", "KneeError", "LoadStep", "find_knee"]
