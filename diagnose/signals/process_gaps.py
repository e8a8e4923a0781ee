"""Gaps in the process collector's readings (pure).

The process collector reads /proc every ``period_s`` (each record says its own, since the overhead
budget can change it; older bundles: the manifest's ``process_hz``). A reading missing for more
than GAP_PERIODS periods (a saturated host, a slow /proc, a stopped collector thread) leaves the
thread states, CPU times and connections of that stretch unknown: counted and stated.
"""
from __future__ import annotations

from collections.abc import Iterable

from diagnose.bundle.records.process import ProcessReading
from diagnose.results.quality import ProcessQuality

GAP_PERIODS = 3.0
MAX_LISTED = 3


def process_gaps(records: Iterable[ProcessReading], default_period_s: float | None) -> ProcessQuality:
    """The gap figures of the process section, for readings ``t_ns``-ordered: how many gaps longer
    than GAP_PERIODS periods (None with fewer than two readings), the longest and their total (s),
    and a statement when there is one. ``records`` is left to the caller."""
    times = sorted(((r.t_ns, r.period_s if r.period_s is not None else default_period_s) for r in records),
                   key=lambda tp: (tp[0], tp[1] or 0.0))
    gaps = [((b - a) / 1e9, p) for (a, p), (b, _) in zip(times, times[1:]) if p and (b - a) / 1e9 > GAP_PERIODS * p]
    if not gaps:
        return ProcessQuality(gaps=0 if len(times) > 1 else None)
    longest = max(g for g, _ in gaps)
    total = sum(g for g, _ in gaps)
    period = min(p for _, p in gaps if p)
    return ProcessQuality(
        gaps=len(gaps), gap_max_s=round(longest, 2), gaps_total_s=round(total, 2),
        gaps_statement=(
            f"the process collector missed readings {len(gaps)} time(s) for longer than {GAP_PERIODS:g}x its "
            f"{period:g} s interval (longest {longest:.1f} s, {total:.1f} s in all): thread states, CPU and "
            "connections are unknown there"))


__all__ = ["GAP_PERIODS", "process_gaps"]
