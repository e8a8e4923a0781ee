"""Predicted against measured: did the remedy applied between BASE and NEW gain what BASE's analysis
predicted for it (diagnose/verdict/gain.py)? Pure: reads two Reports and their Comparison.

Throughput is judged where BASE predicted one: the QPS ratio when both captures are saturated (the
busiest thread demanded most of a core and hardly waited for work); else one served the offered load
and its QPS is no capacity, so the judged ratio is the capacity at the busiest thread (QPS / the share
of its time spent on requests: waits for work and for a core left out) of NEW over BASE's. Whatever
the outcome, it says what the remedy's term cost per request before and after (thread-ms), and the
largest other change: whether the remedy removed what it was assumed to.
Without a throughput prediction (BASE below capacity) the P50 ratio is judged. The measured ratio
counts as within the band when its noise interval (the QPS or P50 noise band of the comparison,
compare/noise.py) overlaps the predicted band.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from diagnose.account.kinds import KINDS, UNBATCHED
from diagnose.compare.diff import Comparison
from diagnose.model import Account, Report
from diagnose.results.gain import Band, BusiestThread, PredictedGain
from diagnose.verdict.account import SATURATED_PCT
from diagnose.verdict.gain import NAMED, NOT_BUSY, STAGE_OF, account_of, busy_fraction, gain_for

STARVED_SHARE = 0.2  # NEW waited for a core this share of its thread-time: its host set the pace
WAITING_MAX = 0.05  # the busiest thread waited for work under this share: saturated


@dataclass(frozen=True)
class GainCheck:
    """``measured``: the judged ratio NEW/BASE (``metric`` says which: throughput or p50); ``noise``:
    its relative noise band (fraction); ``outcome``: held, beat, fell short, or cannot tell."""

    change: str | None
    chosen: str  # how the predicted remedy was picked
    predicted: PredictedGain | None
    metric: str | None  # "throughput" or "p50"
    basis: str  # what the measured ratio is
    measured: float | None
    noise: float | None
    qps_x: float | None
    p50_x: float | None
    p99_x: float | None
    outcome: str
    why: str

    @property
    def band(self) -> Band | None:
        if self.predicted is None:
            return None
        return self.predicted.throughput_x if self.metric == "throughput" else self.predicted.p50_x

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "chosen": self.chosen,
                "predicted": msgspec.to_builtins(self.predicted) if self.predicted else None,
                "metric": self.metric, "basis": self.basis, "measured": self.measured, "noise": self.noise,
                "qps_x": self.qps_x, "p50_x": self.p50_x, "p99_x": self.p99_x, "outcome": self.outcome,
                "why": self.why}


def _value(r: Report, name: str) -> float | None:
    s = r.analysis.signals.get(name)
    return s.value if s is not None else None


def _ratio(a: float | None, b: float | None) -> float | None:
    r = b / a if a and b is not None and a > 0 and b >= 0 else None
    return round(r, 3) if r is not None and math.isfinite(r) else None


def _account(r: Report, resource: str) -> Account | None:
    return account_of(r.analysis.accounts, resource)


def _busiest(r: Report) -> BusiestThread | None:
    acc = _account(r, "threads")
    return acc.busiest if acc is not None else None


def _saturated(r: Report) -> bool:
    """The busiest thread demanded most of a core and hardly waited for work: QPS is its capacity."""
    b, demand = _busiest(r), _value(r, "cpu.max_thread_demand_pct") or _value(r, "cpu.max_thread_util_pct")
    waiting = (b.kinds.get("idle.work", 0.0) + b.kinds.get("handoff", 0.0)) if b is not None else 1.0
    return demand is not None and demand >= SATURATED_PCT and waiting < WAITING_MAX


def _capacity(r: Report) -> float | None:
    """QPS at which the busiest thread would spend all its time on requests: QPS / its busy share
    (verdict/gain.py busy_fraction: waits for work and for a core left out)."""
    qps, b = _value(r, "spans.qps"), _busiest(r)
    busy = busy_fraction(b) if b is not None else 0.0
    return qps / busy if qps and busy > 0 else None


def _per_request_ms(r: Report, kind: str) -> float | None:
    """ms per request ``kind`` holds: request-ms of a stage (its share of request time x the mean
    latency), else thread-ms of a thread-time term (its seconds / requests)."""
    qps = _value(r, "spans.qps")
    if kind.startswith("stage."):
        acc, mean = _account(r, "requests"), _value(r, "spans.mean_ms")
        if acc is None or mean is None:
            return None
        return mean * sum(t.share for t in acc.terms if t.kind == kind)
    acc, b = _account(r, "threads"), _busiest(r)
    if acc is None or not qps or b is None or b.sampled_s <= 0:
        return None
    seconds = sum(t.seconds for t in acc.terms if t.kind == kind)
    return 1000.0 * seconds / (qps * b.sampled_s)


def _label(kind: str) -> str:
    k = KINDS.get(kind) or (UNBATCHED if kind == UNBATCHED.kind else None)
    return k.label if k is not None else kind


def _per_request(base: Report, new: Report, g: PredictedGain) -> str:
    """What the remedy's term cost per request before and after (the request stage it maps to where
    both captures have stage spans: a thread-time term can be renamed when the workload changes, a
    stage cannot), and the largest other change."""
    kind = g.term.rsplit(">", 1)[-1]
    stage = kind if kind.startswith("stage.") else STAGE_OF.get(kind)
    if stage and _account(base, "requests") is not None and _account(new, "requests") is not None:
        kind, what, others_of = stage, "request-ms", _account(base, "requests")
    else:
        what, others_of = "thread-ms", _account(base, "threads")
    a, b = _per_request_ms(base, kind), _per_request_ms(new, kind)
    if a is None or b is None or a <= 0:
        return ""
    removed = f"removed {1 - b / a:.0%}" if b <= a else f"grew {b / a - 1:.0%}"
    assumed = f", assumed {g.removed.low:.0%}-{g.removed.high:.0%}" if g.removed else ""
    out = f"per request, {_label(kind)}: {a:.2f} -> {b:.2f} {what} ({removed}{assumed})"
    others = []
    for t in others_of.terms if others_of is not None else ():
        if t.kind != kind and ">" not in t.kind and t.kind not in NOT_BUSY:
            x, y = _per_request_ms(base, t.kind), _per_request_ms(new, t.kind)
            if x is not None and y is not None:
                others.append((abs(x - y), t.kind, x, y))
    if others:
        change, k, x, y = max(others)
        out += f"; the largest other change: {_label(k)} {x:.2f} -> {y:.2f} {what}"
        if change > abs(a - b):
            out += " (more than the remedy's own term moved: the gain may come from elsewhere)"
    return out


def _rel_noise(comp: Comparison, key: str) -> float | None:
    m = comp.metric(key)
    if m is None or m.band is None or not m.base:
        return None
    return round(abs(m.band / m.base), 3)


def _judge(measured: float, noise: float, band: Band, higher_better: bool) -> str:
    """``noise``: the comparison's noise band over BASE's value, so the ratio NEW/BASE is known to
    +-noise (not +-noise x the ratio: a noise past 100% would reach below zero and hold anything).
    A noise interval that holds 1.0x (no change) is inconclusive, whatever band it also overlaps."""
    lo, hi = measured - noise, measured + noise
    if lo <= 1.0 <= hi:
        return "inconclusive"
    if hi >= band.low and lo <= band.high:
        return "held"
    above = lo > band.high
    return "beat" if above == higher_better else "fell short"


def _share(r: Report, kind: str) -> float | None:
    acc = _account(r, "threads")
    if acc is None:
        return None
    base = kind.rsplit(">", 1)[-1]
    if acc.busiest is not None and base in acc.busiest.kinds:
        return acc.busiest.kinds[base]
    return sum(t.share for t in acc.terms if t.kind.rsplit(">", 1)[-1] == base)


def _held(measured: float, noise: float, band: Band) -> str:
    if band.low <= measured <= band.high:
        return "the measured ratio falls within the predicted band"
    side = "below" if measured < band.low else "above"
    edge = band.low if measured < band.low else band.high
    return (f"within the noise only: {measured:.2f}x is {side} the band's {edge:.2f}x by less than the "
            f"comparison's noise (±{noise:.0%}); capture longer or on a quieter host (--noise-floor) to tell")


def _why(outcome: str, base: Report, new: Report, g: PredictedGain) -> str:
    """Why the measurement left the band, from what NEW's own analysis shows."""
    if outcome == "held":
        return ""
    if outcome == "inconclusive":
        return ("the measured ratio cannot be told from no change within the comparison's noise: capture longer, "
                "on a quieter host, or pass the host's own --noise-floor")
    acc = _account(new, "threads")
    core = sum(t.share for t in acc.terms if t.kind.rsplit(">", 1)[-1] == "wait.core") if acc else 0.0
    reasons = []
    if core >= STARVED_SHARE:
        reasons.append(f"NEW's host starved it: its threads waited for a core {core:.0%} of their sampled time, so "
                       "the host, not the remedy, set its pace")
    before, after = _share(base, g.term), _share(new, g.term)
    if outcome == "fell short" and before is not None and after is not None and after > 0.5 * before:
        reasons.append(f"the remedy removed less than assumed: {g.term} still holds {after:.0%} of the time it "
                       f"was measured on (was {before:.0%})")
    nv, bv = new.analysis.verdict, base.analysis.verdict
    if (nv.quadrant, nv.layer) != (bv.quadrant, bv.layer):
        reasons.append(f"the limit moved: NEW reads {nv.quadrant.value}" + (f" / {nv.layer.value} layer" if nv.layer
                                                                          else ""))
    if outcome == "beat":
        reasons.append("the remedy cut more than its term (other terms shrank too, or the next bottleneck is "
                       "further off than the thread table showed)")
    return "; ".join(reasons) or "no cause found in NEW's analysis: the assumed band does not fit this service"


def _throughput(base: Report, new: Report, comp: Comparison, qps_x: float | None
                ) -> tuple[float | None, str, float | None]:
    """The judged throughput ratio, what it is, and its noise: the QPS ratio when both captures are
    saturated, else the capacity at the busiest thread (whose noise is the QPS ratio's scaled by it)."""
    noise, both = _rel_noise(comp, "qps"), _saturated(base) and _saturated(new)
    cap_x = None if both else _ratio(_capacity(base), _capacity(new))
    if cap_x is None:
        return qps_x, ("QPS (both saturated)" if both else "QPS (no capacity at the busiest thread: one capture "
                       "may have served its offered load)"), noise
    basis = (f"capacity at the busiest thread (QPS / its busy share: {'NEW' if _saturated(base) else 'BASE'} "
             "waited for work, so its QPS is not its capacity)")
    # the capacity ratio is the QPS ratio x BASE's busy share / NEW's: its noise scales with it
    return cap_x, basis, (round(noise * cap_x / qps_x, 3) if noise is not None and qps_x else noise)


def check_gain(base: Report, new: Report, comp: Comparison, change: str | None) -> GainCheck:
    """BASE's predicted gain for the remedy ``change`` names, against what NEW measured."""
    g, chosen = gain_for(base.analysis.verdict.gains, change)
    qps_x, p50_x = _ratio(_value(base, "spans.qps"), _value(new, "spans.qps")), _ratio(
        _value(base, "spans.p50_ms"), _value(new, "spans.p50_ms"))
    p99_x = _ratio(_value(base, "spans.p99_ms"), _value(new, "spans.p99_ms"))
    if g is None:
        return GainCheck(change, chosen, None, None, "", None, None, qps_x, p50_x, p99_x, "cannot tell", chosen)
    if chosen != NAMED and change:
        names = "; ".join(f"{i}. {x.remedy[:80]}" for i, x in enumerate(base.analysis.verdict.gains, 1))
        return GainCheck(change, chosen, None, None, "", None, None, qps_x, p50_x, p99_x, "cannot tell",
                         f"the change names none of BASE's remedies, so no prediction is judged; name one in "
                         f"--change: {names}")
    if g.throughput_x is not None:
        metric, band, higher = "throughput", g.throughput_x, True
        measured, basis, noise = _throughput(base, new, comp, qps_x)
    elif g.p50_x is not None:
        metric, measured, basis = "p50", p50_x, "request latency P50 (spans)"
        noise, band, higher = _rel_noise(comp, "p50"), g.p50_x, False
    else:
        return GainCheck(change, chosen, g, None, "", None, None, qps_x, p50_x, p99_x, "cannot tell",
                         "BASE predicted no throughput or latency gain for this remedy (" + g.assumption + ")")
    if measured is None:
        return GainCheck(change, chosen, g, metric, basis, None, noise, qps_x, p50_x, p99_x, "cannot tell",
                         f"{metric} was not measured in both captures (it needs stage spans)")
    outcome = _judge(measured, noise or 0.0, band, higher)
    held = _held(measured, noise or 0.0, band) if outcome == "held" else ""
    why = "; ".join(x for x in (held, _why(outcome, base, new, g), _per_request(base, new, g)) if x)
    return GainCheck(change, chosen, g, metric, basis, measured, noise, qps_x, p50_x, p99_x, outcome, why)


__all__ = ["GainCheck", "check_gain"]
