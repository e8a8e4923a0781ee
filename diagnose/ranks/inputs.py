"""TraceReports -> the job analysis' inputs: one RankInput per distinct rank. Pure."""
from __future__ import annotations

from collections import Counter

from diagnose.ranks.job import analyze_job
from diagnose.ranks.model import JobAnalysis, RankInput
from diagnose.traces.report import TraceReport


def rank_inputs(reports: list[TraceReport]) -> tuple[list[RankInput], str | None]:
    """The reports as ranks of one job, or ([], why not): it takes at least two traces with a
    rank (``distributedInfo.rank``), each rank once (the agent's consecutive windows of one
    process share a rank: they are one rank's time, not a job)."""
    ranked = [(r.meta.rank, r, r.timeline) for r in reports if r.meta.rank is not None and r.timeline is not None]
    if len(ranked) < 2:
        return [], None
    twice = sorted(k for k, n in Counter(rank for rank, _, _ in ranked).items() if n > 1)
    if twice:
        return [], (f"rank(s) {', '.join(map(str, twice))} appear in more than one trace: the traces are read as "
                    "windows of one job, not compared rank by rank")
    return [RankInput(rank, r.path, r.meta.unix_clock, tl) for rank, r, tl in ranked], None


def job_of(reports: list[TraceReport]) -> tuple[JobAnalysis | None, str | None]:
    """The job analysis of ``reports`` when they are two or more distinct ranks, and why not when
    they are not (None when there is nothing to say: one trace, no rank)."""
    ranks, why = rank_inputs(reports)
    return (analyze_job(ranks) if ranks else None), why


__all__ = ["job_of", "rank_inputs"]
