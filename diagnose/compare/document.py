"""A Comparison (diff.py) as Markdown (GFM-escaped, ticket-sized) or JSON, with the
gate's results when ``--fail-on`` was given. Pure."""
from __future__ import annotations

import json

from diagnose.compare.diff import Comparison, MetricDelta
from diagnose.compare.gain_check import GainCheck
from diagnose.compare.gate import GateResult
from diagnose.render.markdown.gfm import code, text
from diagnose.render.markdown.gfm import table as _table
from diagnose.render.units import fmt_value, utc_datetime

MARK = {"worse": "worse", "better": "better", "neutral": "changed", "within noise": "within noise",
        "too few": "too few requests", "unknown": "-"}


def _delta(m: MetricDelta) -> str:
    if m.delta is None:
        return "-"
    pct = f" ({m.delta_pct:+.1f}%)" if m.delta_pct is not None else ""
    unit = "pp" if m.unit == "%" else m.unit  # a change of a percentage is in percentage points
    return f"{m.delta:+.3g} {unit}{pct}"


def _noise(m: MetricDelta) -> str:
    if m.band is None:
        return m.method
    ci = f"; bootstrap 95% [{m.ci[0]:+.3g}, {m.ci[1]:+.3g}] {m.unit}" if m.ci else ""
    return f"±{m.band:.3g} {m.unit}{ci}"


def _title(c: Comparison, gate: tuple[GateResult, ...]) -> str:
    if gate:
        if any(g.failed for g in gate):
            return "Regression"
        return "Gate not judged" if any(g.unjudged for g in gate) else "No regression"
    worse = [m.label for m in c.metrics if m.direction == "worse"]
    better = [m.label for m in c.metrics if m.direction == "better" and m.significant]
    if worse:
        return f"Worse: {', '.join(worse)}"
    return f"Better: {', '.join(better)}" if better else "No significant change in what was measured"


def _unmeasured(c: Comparison) -> list[str]:
    keys = {m.key for m in c.metrics if m.base is not None and m.new is not None}
    if {"p50", "p99", "qps"} <= keys:
        return []
    return ["**Latency and QPS were not measured in both captures** (they need stage spans: start the service "
            "under `diagnose run`, or send OTLP spans): a change in them cannot be seen here.", ""]


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


MAX_CHANGE = 1000  # characters of --change shown (the performance file keeps as many)


def _change(change: str | None) -> str:
    if not change:
        return "(not described)"
    return change if len(change) <= MAX_CHANGE else change[:MAX_CHANGE - 1] + "…"


def gain_markdown(g: GainCheck) -> list[str]:
    """The predicted-vs-measured section: the remedy, BASE's band, what NEW measured, the outcome. The
    cells are plain text: ``table`` escapes each once (escaping them here too showed the backslashes)."""
    out = ["## Predicted vs measured gain", "", f"Change: {text(_change(g.change))}.", ""]
    p = g.predicted
    if p is None:
        return out + _table(["", ""], [
            ["remedy", f"none judged ({g.chosen})"],
            ["QPS, P50, P99 (NEW / BASE)", f"{_x(g.qps_x)}, {_x(g.p50_x)}, {_x(g.p99_x)}"],
            ["outcome", f"{g.outcome}: {g.why}"]])
    band = g.band
    pred = f"{band.low:.2f}x-{band.high:.2f}x" if band else "none"
    noise = f" ±{g.noise:.0%}" if g.noise is not None else ""
    out += _table(["", ""], [
        ["remedy", f"{p.remedy or '(none)'} ({g.chosen})"],
        ["predicted " + (g.metric or "gain"), f"{pred} ({p.method}: {p.assumption})"],
        ["measured", f"{_x(g.measured)}{noise} ({g.basis})" if g.measured is not None else "-"],
        ["QPS, P50, P99 (NEW / BASE)", f"{_x(g.qps_x)}, {_x(g.p50_x)}, {_x(g.p99_x)}"],
        ["outcome", f"{g.outcome}: {g.why}"]])
    return out


def comparison_markdown(c: Comparison, gate: tuple[GateResult, ...] = (), gain: GainCheck | None = None) -> str:
    out = [f"# {text(_title(c, gate))} (compare): {text(c.base.verdict)} → {text(c.new.verdict)}", ""]
    out += _unmeasured(c)
    if c.verdict_changed:
        out += [f"**The verdict changed**: {text(c.base.verdict)} → {text(c.new.verdict)}.", ""]
    else:
        out += [f"The verdict held: {text(c.new.verdict)}.", ""]
    out += _table(["", "base", "new"], [
        ["bundle", code(c.base.bundle), code(c.new.bundle)],
        ["captured", utc_datetime(c.base.started_ns), utc_datetime(c.new.started_ns)],
        ["target", code(c.base.target[:120]), code(c.new.target[:120])],
        ["verdict", c.base.verdict, c.new.verdict],
        ["confidence", f"{c.base.confidence:.2f}", f"{c.new.confidence:.2f}"],
        ["headline", c.base.headline, c.new.headline]])
    if c.shares:
        out += ["## Quadrant shares (of the limiting account)", ""]
        out += _table(["quadrant", "base", "new", "change"],
                      [[q, f"{a:.2f}", f"{b:.2f}", f"{b - a:+.2f}"] for q, a, b in c.shares])
    out += ["## Key metrics", "", "A change is significant only beyond the noise the two captures show "
            "(per-window spread; bootstrap interval for latency percentiles).", ""]
    out += _table(["metric", "base", "new", "change", "significant", "noise", "reading"], [
        [m.label, fmt_value(m.base, m.unit), fmt_value(m.new, m.unit), _delta(m),
         {True: "yes", False: "no", None: "unknown"}[m.significant], _noise(m), MARK[m.direction]]
        for m in c.metrics] or [["no metric measured in either capture", "", "", "", "", "", ""]])
    if gain is not None:
        out += gain_markdown(gain)
    changed = [f for f in c.findings if f.change != "kept"]
    out += ["## Findings", ""]
    out += ([f"- **{f.change}**: {text(f.title)} ({code(f.rule_id)}, {f.severity})" for f in changed]
            or ["No finding appeared or disappeared."]) + [""]
    if gate:
        out += ["## Regression gate (`--fail-on`)", ""]
        out += [f"- {'**FAIL**' if g.failed else 'not judged' if g.unjudged else 'pass'} {code(str(g.condition))}: "
                f"{text(g.reason)}" for g in gate]
        out += [""]
    # a path or --change that was not UTF-8 (surrogate-escaped by Python) is shown as its escape: the
    # document stays text any stdout can write (PYTHONIOENCODING=utf-8 is strict), as -o writes it
    return ("\n".join(out).rstrip() + "\n").encode("utf-8", "backslashreplace").decode("utf-8")


def comparison_json(c: Comparison, gate: tuple[GateResult, ...] = (), gain: GainCheck | None = None) -> str:
    doc = c.to_json()
    if gain is not None:
        doc["gain_check"] = gain.to_json()
    if gate:
        doc["gate"] = {"failed": any(g.failed for g in gate), "unjudged": any(g.unjudged for g in gate),
                       "conditions": [{"condition": str(g.condition), "failed": g.failed, "unjudged": g.unjudged,
                                       "reason": g.reason} for g in gate]}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


__all__ = ["comparison_json", "comparison_markdown", "gain_markdown"]
