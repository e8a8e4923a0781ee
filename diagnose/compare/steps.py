"""Training steps of two captures' torch traces, compared: step time (P50, P99 of the ProfilerStep#N
durations) and the input pipeline's share of the step (DataLoader / ``enumerate(DataLoader)`` ops
inside each step, catalogs/kernels.py DATALOADER), each with the noise band its own steps show.

Noise: the steps of one capture are its samples. A difference counts when it exceeds ``noise.Z``
standard errors of the difference of the per-step means (Welch, as the windows of a service
capture: noise.judge) and a floor: STEP_FLOOR of the base step time (P50), STEP_TAIL_FLOOR (P99),
noise.MIN_REL of the base share (input pipeline). The steady steps of one training loop vary by about
a percent (the shared A100 NCCL trace's three: 222.4, 219.7, 224.9 ms, coefficient of variation 1.2%),
so a 5% floor leaves run-to-run drift out and a 20% faster step in; warm-up steps (the shared V100
trace's first two, 35 and 72 ms before three of 95.6) widen the per-step spread and so the band.
Pure but for reading the bundle's traces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.compare import noise
from diagnose.compare.metrics import STEP_METRICS, MetricSpec, Noise
from diagnose.model import Report
from diagnose.signals.trace_tasks import read_member_trace, trace_files
from diagnose.traces.reader import TraceReadError
from diagnose.traces.steps import step_stats
from diagnose.traces.view import build_view

STEP_FLOOR = 0.05
STEP_TAIL_FLOOR = 0.10
MIN_STEPS = 2  # per capture: fewer steps have no spread to judge


@dataclass(frozen=True)
class StepSamples:
    """Every ProfilerStep of a capture's traces: duration and time in DataLoader ops, ms."""

    dur_ms: np.ndarray
    loader_ms: np.ndarray
    errors: tuple[str, ...] = ()  # traces that could not be read, one line each

    @property
    def loader_share(self) -> np.ndarray:
        """Per step, the input pipeline's share of it (%)."""
        return np.where(self.dur_ms > 0, 100.0 * self.loader_ms / np.maximum(self.dur_ms, 1e-12), 0.0)


@dataclass(frozen=True)
class StepMetric:
    """One step metric of two captures: values, and whether the change is beyond the steps' noise."""

    spec: MetricSpec
    base: float | None
    new: float | None
    significance: noise.Significance | None
    method: str


def step_samples(report: Report) -> StepSamples:
    """The steps of every torch trace in ``report``'s bundle (read again: the analysis keeps only
    their summary)."""
    dur: list[float] = []
    loader: list[float] = []
    errors = []
    for path, base in trace_files(report.bundle):
        try:
            rows = step_stats(build_view(read_member_trace(report.bundle, path, base)))["steps"]
        except TraceReadError as exc:
            errors.append(str(exc)[:200])
            continue
        dur += [float(r["dur_ms"]) for r in rows]
        loader += [float(r["dataloader_ms"]) for r in rows]
    return StepSamples(np.array(dur, float), np.array(loader, float), tuple(errors))


def _value(spec: MetricSpec, s: StepSamples) -> float | None:
    if not len(s.dur_ms):
        return None
    if spec.noise is Noise.STEP_TIME and spec.percentile is not None:
        return float(np.percentile(s.dur_ms, spec.percentile))
    total = float(s.dur_ms.sum())
    return 100.0 * float(s.loader_ms.sum()) / total if total > 0 and s.loader_ms.any() else None


def _per_step(spec: MetricSpec, s: StepSamples) -> noise.Spread:
    return noise.Spread(tuple((s.dur_ms if spec.noise is Noise.STEP_TIME else s.loader_share).tolist()))


def _floor(spec: MetricSpec) -> float:
    if spec.noise is Noise.STEP_TIME:
        return STEP_TAIL_FLOOR if (spec.percentile or 0) >= 90 else STEP_FLOOR
    return noise.MIN_REL


def step_metric(spec: MetricSpec, a: StepSamples, b: StepSamples) -> StepMetric:
    va, vb = _value(spec, a), _value(spec, b)
    if va is None or vb is None:
        why = "measured in one capture only" if (va is None) != (vb is None) else "not measured"
        return StepMetric(spec, va, vb, None, why)
    if min(len(a.dur_ms), len(b.dur_ms)) < MIN_STEPS:
        return StepMetric(spec, va, vb, None, f"fewer than {MIN_STEPS} ProfilerSteps in a capture "
                                              f"({len(a.dur_ms)} and {len(b.dur_ms)}): no spread to judge")
    sig = noise.judge(vb - va, va, _per_step(spec, a), _per_step(spec, b), None, _floor(spec))
    method = sig.method.replace("window means", "per-step values").replace("windows)", "steps)")
    return StepMetric(spec, va, vb, noise.Significance(sig.significant, sig.band, None, method), method)


def step_metrics(base: Report, new: Report) -> tuple[StepMetric, ...]:
    """Step time P50/P99 and the input pipeline's share, where a capture has ProfilerSteps."""
    a, b = step_samples(base), step_samples(new)
    if not len(a.dur_ms) and not len(b.dur_ms):
        return ()
    return tuple(m for m in (step_metric(spec, a, b) for spec in STEP_METRICS)
                 if m.base is not None or m.new is not None)


__all__ = ["MIN_STEPS", "STEP_FLOOR", "STEP_TAIL_FLOOR", "StepMetric", "StepSamples", "step_metric", "step_metrics",
           "step_samples"]
