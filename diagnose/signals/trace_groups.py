"""Which torch traces of a bundle belong together (ranks or windows of one job) and which do not.

Traces belong together when they ran on the same GPU model and their GPU windows lie within
MAX_GAP_NS of each other on the Unix clock (ranks of one job run at the same time; the agent's
consecutive profiler windows of one capture follow each other within seconds). Traces that do
not are analysed one group at a time: blending a V100 trace from March with an A100 trace from
May into one verdict says nothing about either. Pure: input is the TraceReports.
"""
from __future__ import annotations

from diagnose.traces.report import TraceReport

MAX_GAP_NS = 600 * 10**9  # no capture spans ten minutes between two of its windows


def _window(r: TraceReport) -> tuple[int, int] | None:
    t = r.temporal
    return (t.first_start_ns, t.last_end_ns) if r.meta.unix_clock and t is not None and t.span_ns > 0 else None


def _models(r: TraceReport) -> frozenset[str]:
    return frozenset(r.meta.devices)


def _together(a: TraceReport, b: TraceReport) -> bool:
    if _models(a) and _models(b) and _models(a) != _models(b):
        return False
    wa, wb = _window(a), _window(b)
    if wa is None or wb is None:
        return True  # no clock to tell them apart: one job, as before
    gap_ns = max(wa[0], wb[0]) - min(wa[1], wb[1])  # negative: the windows overlap
    return gap_ns <= MAX_GAP_NS


def trace_groups(reports: list[TraceReport]) -> list[list[int]]:
    """Indices of ``reports`` in groups that belong together, the largest GPU window first."""
    groups: list[list[int]] = []
    for i, r in enumerate(reports):
        for g in groups:
            if all(_together(r, reports[j]) for j in g):
                g.append(i)
                break
        else:
            groups.append([i])

    def size(g: list[int]) -> int:
        return sum(t.span_ns for j in g if (t := reports[j].temporal) is not None)

    return sorted(groups, key=lambda g: -size(g))


def why_apart(reports: list[TraceReport], groups: list[list[int]]) -> str:
    """One line saying how the groups differ (GPU models, time windows)."""
    parts = []
    for g in groups:
        models = sorted({m for j in g for m in reports[j].meta.devices}) or ["no GPU"]
        wins = [w for j in g if (w := _window(reports[j]))]
        when = f", GPU window from Unix {min(w[0] for w in wins) / 1e9:.0f} s" if wins else ""
        parts.append(f"{len(g)} trace(s) on {', '.join(models)}{when}")
    return "; ".join(parts)


__all__ = ["trace_groups", "why_apart"]
