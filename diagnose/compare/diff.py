"""compare(base, new) -> Comparison: verdicts, quadrant shares, key metrics with deltas and their
significance against the captures' own noise (diagnose/compare/noise.py), findings that appeared
or disappeared. Pure: reads two Reports and their bundles."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diagnose.compare import noise
from diagnose.compare.metrics import METRICS, MetricSpec, Noise
from diagnose.compare.samples import Samples, samples_of
from diagnose.compare.steps import StepMetric, step_metrics
from diagnose.model import Report
from diagnose.signals.catalog import Worse
from diagnose.signals.spans.sampling import sampling_of


@dataclass(frozen=True)
class Side:
    """One capture as the comparison names it."""

    bundle: str
    target: str
    started_ns: int | None
    quadrant: str
    layer: str | None
    confidence: float
    headline: str

    @property
    def verdict(self) -> str:
        return self.quadrant + (f" / {self.layer} layer" if self.layer else "")


@dataclass(frozen=True)
class MetricDelta:
    key: str
    label: str
    unit: str
    worse: Worse
    base: float | None
    new: float | None
    significant: bool | None
    band: float | None
    ci: tuple[float, float] | None
    method: str
    too_few: bool = False  # too few requests past the percentile to judge: neither a change nor noise

    @property
    def delta(self) -> float | None:
        return self.new - self.base if self.base is not None and self.new is not None else None

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return 100.0 * d / abs(self.base) if d is not None and self.base else None

    @property
    def direction(self) -> str:
        """worse / better / neutral / within noise / too few / unknown."""
        d = self.delta
        if self.too_few:
            return "too few"
        if d is None:
            return "unknown"
        if self.significant is False:
            return "within noise"
        if self.worse is Worse.NEITHER or d == 0:
            return "neutral"
        return "worse" if (d > 0) == (self.worse is Worse.HIGHER) else "better"


@dataclass(frozen=True)
class FindingChange:
    rule_id: str
    title: str
    severity: str
    change: str  # appeared / disappeared / kept


@dataclass(frozen=True)
class Comparison:
    base: Side
    new: Side
    shares: tuple[tuple[str, float, float], ...]  # quadrant, base share, new share
    metrics: tuple[MetricDelta, ...]
    findings: tuple[FindingChange, ...]

    @property
    def verdict_changed(self) -> bool:
        return (self.base.quadrant, self.base.layer) != (self.new.quadrant, self.new.layer)

    def metric(self, key: str) -> MetricDelta | None:
        return next((m for m in self.metrics if m.key == key), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "base": _side_json(self.base), "new": _side_json(self.new), "verdict_changed": self.verdict_changed,
            "quadrant_shares": [{"quadrant": q, "base": a, "new": b} for q, a, b in self.shares],
            "metrics": [_metric_json(m) for m in self.metrics],
            "findings": [vars(f) for f in self.findings],
        }


def _side_json(s: Side) -> dict[str, Any]:
    return {**vars(s), "verdict": s.verdict}


def _metric_json(m: MetricDelta) -> dict[str, Any]:
    return {"key": m.key, "label": m.label, "unit": m.unit, "worse": m.worse.value, "base": m.base, "new": m.new,
            "delta": m.delta, "delta_pct": m.delta_pct, "significant": m.significant, "noise_band": m.band,
            "bootstrap_ci": list(m.ci) if m.ci else None, "method": m.method, "direction": m.direction}


def _side(r: Report) -> Side:
    t = r.bundle.info.target
    cmd = " ".join(t.cmdline) or t.name or "?"
    v = r.analysis.verdict
    return Side(str(r.bundle.path), cmd, r.bundle.info.started_ns, v.quadrant.value,
                v.layer.value if v.layer else None, v.confidence, v.headline)


def _value(r: Report, spec: MetricSpec) -> float | None:
    s = r.analysis.signals.get(spec.signal)
    return s.value if s is not None else None


def _spreads(spec: MetricSpec, s: Samples) -> noise.Spread | None:
    if spec.noise is Noise.LATENCY and spec.percentile is not None:
        return noise.latency_spread(s, spec.percentile)
    if spec.noise is Noise.RATE:
        return noise.rate_spread(s)
    if spec.noise is Noise.LEVEL and spec.series:
        return noise.level_spread(s, s.series.get(spec.series, []))
    return None


def metric_delta(spec: MetricSpec, base: float | None, new: float | None, sa: Samples, sb: Samples,
                 service_floor: float | None = None, sampled: str = "") -> MetricDelta:
    """``sampled``: what to add to a too-few-requests reason when a capture's spans were sampled."""
    if base is None or new is None:
        return MetricDelta(spec.key, spec.label, spec.unit, spec.worse, base, new, None, None, None,
                           "measured in one capture only" if (base is None) != (new is None) else "not measured")
    ci = None
    if spec.noise is Noise.LATENCY and spec.percentile is not None:
        need = int(10 / (1 - spec.percentile / 100))  # ten requests past the percentile in each capture
        if min(len(sa.latency_ms), len(sb.latency_ms)) < need:
            return MetricDelta(spec.key, spec.label, spec.unit, spec.worse, base, new, None, None, None,
                               f"fewer than {need} requests in a capture ({len(sa.latency_ms):,} and "
                               f"{len(sb.latency_ms):,}{sampled}): too few past {spec.label} to judge its noise",
                               too_few=True)
        ci = noise.bootstrap_diff_ci(sa.latency_ms, sb.latency_ms, spec.percentile)
    floor = noise.floor_for(spec.noise.value, spec.percentile, service_floor)
    sig = noise.judge(new - base, base, _spreads(spec, sa), _spreads(spec, sb), ci, floor)
    return MetricDelta(spec.key, spec.label, spec.unit, spec.worse, base, new, sig.significant, sig.band, sig.ci,
                       sig.method)


def _step_delta(m: StepMetric) -> MetricDelta:
    """A training-step metric of the torch traces (compare/steps.py) as the comparison's delta."""
    sig, s = m.significance, m.spec
    return MetricDelta(s.key, s.label, s.unit, s.worse, m.base, m.new, sig.significant if sig else None,
                       sig.band if sig else None, None, m.method)


def _findings(base: Report, new: Report) -> tuple[FindingChange, ...]:
    a = {f.rule_id: f for f in base.analysis.findings}
    b = {f.rule_id: f for f in new.analysis.findings}
    out = [FindingChange(k, f.title, f.severity.value, "appeared") for k, f in b.items() if k not in a]
    out += [FindingChange(k, f.title, f.severity.value, "disappeared") for k, f in a.items() if k not in b]
    out += [FindingChange(k, f.title, f.severity.value, "kept") for k, f in b.items() if k in a]
    return tuple(out)


def compare(base: Report, new: Report, service_floor: float | None = None) -> Comparison:
    """The comparison of ``new`` against ``base``; ``service_floor`` (a fraction, e.g. 0.1) replaces the
    default least relative difference that counts for latency and QPS (noise.floor_for)."""
    sa, sb = samples_of(base), samples_of(new)
    va, vb = base.analysis.verdict.scores, new.analysis.verdict.scores
    quads = list(dict.fromkeys([*va, *vb]))
    shares = tuple((q.value, va.get(q, 0.0), vb.get(q, 0.0)) for q in quads)
    one_in = [f"{'BASE' if r is base else 'NEW'} 1 in {s.one_in}" for r in (base, new)
              if (s := sampling_of(r.bundle.info)) is not None]
    sampled = f"; the agent sampled spans: {', '.join(one_in)}" if one_in else ""
    metrics = tuple(metric_delta(m, _value(base, m), _value(new, m), sa, sb, service_floor, sampled) for m in METRICS
                    if _value(base, m) is not None or _value(new, m) is not None)
    metrics += tuple(_step_delta(m) for m in step_metrics(base, new))
    return Comparison(_side(base), _side(new), shares, metrics, _findings(base, new))


__all__ = ["Comparison", "FindingChange", "MetricDelta", "Side", "compare", "metric_delta"]
