"""Which torch traces of a bundle belong together (ranks or windows of one job) and which do not.

Traces belong together when they ran on the same GPU model and their GPU windows (a CPU-only
trace: its host window) lie within MAX_GAP_NS of each other on the Unix clock (ranks of one job
run at the same time; the agent's consecutive profiler windows of one capture follow each other
within seconds). Traces that do not are analysed one group at a time: blending a V100 trace from
March with an A100 trace from May into one verdict says nothing about either; only the group the
verdict reads can form a job of several ranks (diagnose/ranks). Pure: input is the TraceReports.
"""
from __future__ import annotations

from diagnose.results.traces import trace_view
from diagnose.traces.report import TraceReport

MAX_GAP_NS = 600 * 10**9  # no capture spans ten minutes between two of its windows


def _window(r: TraceReport) -> tuple[int, int] | None:
    """The trace's GPU window on the Unix clock, else (a CPU-only trace) its host window: a trace
    without GPU events still ran at a time, and never belongs with a job run months apart."""
    if not r.meta.unix_clock:
        return None
    t = r.temporal
    if t is not None and t.span_ns > 0:
        return t.first_start_ns, t.last_end_ns
    cov = trace_view(r.tables).coverage
    start, span = (cov.host_start_ns, cov.host_span_ns) if cov is not None else (None, None)
    return (start, start + span) if start is not None and span is not None and span > 0 else None


def _models(r: TraceReport) -> frozenset[str]:
    return frozenset(r.meta.devices)


def trace_groups(reports: list[TraceReport], capture: tuple[int, int] | None = None) -> list[list[int]]:
    """Indices of ``reports`` in groups that belong together: same GPU models, each window within
    MAX_GAP_NS of the group's previous one (a job profiled every few minutes stays one group).
    Groups whose windows overlap the bundle's ``capture`` window come first (a foreign trace
    indexed into a bundle never speaks for it), then the largest GPU window."""
    order = sorted(range(len(reports)), key=lambda i: (w[0] if (w := _window(reports[i])) else -1, i))
    groups: list[list[int]] = []
    ends: list[int | None] = []
    for i in order:
        w = _window(reports[i])
        for gi, g in enumerate(groups):
            first = reports[g[0]]
            same = not (_models(first) and _models(reports[i]) and _models(first) != _models(reports[i]))
            end = ends[gi]
            if same and (w is None or end is None or w[0] - end <= MAX_GAP_NS):
                g.append(i)
                if w is not None:
                    ends[gi] = w[1] if end is None else max(end, w[1])
                break
        else:
            groups.append([i])
            ends.append(w[1] if w else None)

    def inside(g: list[int]) -> bool:
        return capture is not None and any((w := _window(reports[j])) and w[0] < capture[1] and capture[0] < w[1]
                                           for j in g)

    def size(g: list[int]) -> int:
        return sum(t.span_ns for j in g if (t := reports[j].temporal) is not None)

    return sorted((sorted(g) for g in groups), key=lambda g: (not inside(g), -size(g)))


def why_apart(reports: list[TraceReport], groups: list[list[int]]) -> str:
    """One line saying how the groups differ (GPU models, time windows)."""
    parts = []
    for g in groups:
        models = sorted({m for j in g for m in reports[j].meta.devices}) or ["no GPU"]
        wins = [w for j in g if (w := _window(reports[j]))]
        what = "GPU window" if any((t := reports[j].temporal) is not None and t.span_ns > 0 for j in g) else "window"
        when = f", {what} from Unix {min(w[0] for w in wins) / 1e9:.0f} s" if wins else ""
        parts.append(f"{len(g)} trace(s) on {', '.join(models)}{when}")
    return "; ".join(parts)


__all__ = ["trace_groups", "why_apart"]
