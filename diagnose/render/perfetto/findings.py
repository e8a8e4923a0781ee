"""Findings carry no time; each is a global instant (``i``, ``s: "g"``) at the moment its evidence
describes: the longest GPU idle gap (evidence on gaps: ``join.gap_*``, ``gpu.idle_gap_*``), the
slowest request (``spans.*``, ``llm.*``, ``join.slow_*``), the kernel window's start (first signal
from the torch trace; both windows from ``analysis.details``), else the capture's start
(capture-wide averages); ``placed_at`` says which."""
from __future__ import annotations

from typing import TYPE_CHECKING

from diagnose.model import Finding, Report
from diagnose.render.perfetto.events import FINDINGS, Event
from diagnose.results.traces import trace_views

if TYPE_CHECKING:
    from diagnose.signals.spans.analytics import Span


def _phase(f: Finding) -> str:
    """Which moment a finding refers to: GPU gaps or requests if any evidence is about them, the
    kernel window if its first signal comes from the torch trace, else the whole capture."""
    from diagnose.signals.catalog import spec_for

    names = [e.signal for e in f.evidence]
    if any(n.startswith(("join.gap_", "gpu.idle_gap")) for n in names):
        return "gap"
    if any(n.startswith(("spans.", "llm.", "join.slow_")) for n in names):
        return "request"
    spec = spec_for(names[0]) if names else None
    return "kernels" if spec is not None and spec.source == "timeline" else "capture"


def _moments(report: Report, slowest: Span | None, events: list[Event]) -> dict[str, tuple[int, str]]:
    started = report.bundle.info.started_ns
    first = min((e.t_ns for e in events), default=0)
    out = {"capture": (started if started is not None else first, "capture start")}
    traces = trace_views(report.analysis.details.torch_traces)
    kernel = [t.temporal.first_start_ns for t in traces if t.temporal is not None]
    if kernel and kernel[0] is not None:
        out["kernels"] = (kernel[0], "start of the kernel window (first GPU event)")
    gaps = [g for t in traces for g in t.gaps]
    if gaps:
        out["gap"] = (max(gaps, key=lambda g: g.dur_us).start_ns, "start of the longest GPU idle gap")
    if slowest is not None:
        out["request"] = (slowest.start_ns, f"start of the slowest request ({slowest.dur_ns / 1e6:.1f} ms)")
    return out


def finding_events(report: Report, slowest: Span | None, events: list[Event]) -> list[Event]:
    moments = _moments(report, slowest, events)
    t0, _ = moments["capture"]
    v = report.verdict
    out = [Event("i", t0, FINDINGS, 0, f"verdict: {v.headline}", "verdict", scope="g",
                 args={"quadrant": v.quadrant.value, "layer": v.layer.value if v.layer else None,
                       "confidence": round(v.confidence, 3)})]
    for f in report.analysis.findings:
        t, where = moments.get(_phase(f), moments["capture"])
        evidence = [f"{e.signal} = {e.value:g} {e.unit} ({e.op} {e.threshold:g})" for e in f.evidence]
        out.append(Event("i", t, FINDINGS, 0, f"{f.severity.value}: {f.title}", "finding", scope="g", args={
            "rule_id": f.rule_id, "summary": f.summary, "quadrant": f.quadrant.value if f.quadrant else "secondary",
            "layer": f.layer.value, "confidence": round(f.confidence, 3), "evidence": evidence, "placed_at": where}))
    return out

