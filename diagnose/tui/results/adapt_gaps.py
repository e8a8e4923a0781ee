"""GPU idle gaps -> GapsVM. Pure.

Reads the kernel-timeline analysis' details: ``torch_traces[*].gaps`` (the longest idle gaps of
each trace with the host op that covered most of each, Kineto clock on Unix ns),
``torch_traces[*].host_in_gaps`` (host ops open during the gaps) and ``join.gaps`` (py-spy
samples and stage spans inside the gaps, on the common clock). Without a trace it says why.
"""
from __future__ import annotations

from collections.abc import Sequence

from diagnose.model import Analysis
from diagnose.render.units import fmt_us, utc_clock_ms
from diagnose.results.joins import JoinDetail
from diagnose.results.traces import TraceView, trace_views
from diagnose.tui.viewmodels import GapsVM, TableVM

GAP_SIGNALS = ("gpu.idle_gap_share", "gpu.idle_pct")
TOP = 5
NO_TRACE = "no kernel timeline (torch profiler trace) in this capture"
HOW = ("Gaps come from a torch profiler trace: start the service under `diagnose run` so attach "
       "drives the in-process agent, or pass a trace to `diagnose analyze`.")


def _clock(ns: int | None) -> str:
    """Unix ns as HH:MM:SS.mmm UTC-of-day; gaps are milliseconds apart, seconds are not enough."""
    return utc_clock_ms(int(ns)) if ns else "?"


def _dur(us: float | None) -> str:
    return "?" if us is None else fmt_us(us)


def gap_rows(traces: Sequence[TraceView]) -> tuple[tuple[str, ...], ...]:
    rows = []
    for t in traces:
        label = f"rank {t.rank}" if t.rank is not None else "rank ?"
        for g in t.gaps:
            rows.append((label, _clock(g.start_ns), _dur(g.dur_us), g.host_op or "-"))
    return tuple(rows)


def during_rows(traces: Sequence[TraceView], join: JoinDetail | None) -> tuple[tuple[str, ...], ...]:
    """What ran while the GPU idled: py-spy categories/functions, stage spans, torch host ops."""
    rows: list[tuple[str, ...]] = []
    if join is not None:
        rows += [("py-spy category", c.name, f"{c.share_pct:.0f}%") for c in join.categories[:TOP]]
        rows += [("py-spy function", f.name, f"{f.share_pct:.0f}%") for f in join.functions[:TOP]]
        rows += [("stage span", s.span, f"{s.share_pct:.0f}%") for s in join.spans[:TOP]]
    for t in traces:
        for r in t.host_in_gaps[:TOP]:
            rows.append(("torch host op", r.name, f"{r.share_pct:.0f}%"))
    return tuple(rows)


def gaps_view(a: Analysis) -> GapsVM:
    traces = trace_views(a.details.torch_traces)
    join = a.details.join.gaps
    if not traces:
        reason = next((a.signals[n].reason for n in GAP_SIGNALS
                       if n in a.signals and a.signals[n].reason), NO_TRACE)
        return GapsVM("", TableVM("GPU idle gaps", (), (), f"not captured: {reason}. {HOW}"),
                      TableVM("while the GPU idled", (), (), ""))
    summary = [f"{t.rank}: {g.count} gaps >= {g.min_gap_us:g} us, "
               f"{'?' if g.share_pct is None else format(g.share_pct, '.1f')}% of the "
               f"{'GPU' if g.of == 'gpu' else 'torch-op'} window"
               for t in traces if (g := t.idle_gaps) is not None]
    headline = (join.headline if join else "") or "; ".join(summary)
    table = TableVM("GPU idle gaps (longest, in time order)", ("trace", "start (UTC)", "duration",
                                                               "host op covering it"),
                    gap_rows(traces), "no GPU idle gap above the threshold")
    during = TableVM("while the GPU idled", ("from", "what", "share"), during_rows(traces, join),
                     "no samples or host ops inside the gaps")
    return GapsVM(headline, table, during)
