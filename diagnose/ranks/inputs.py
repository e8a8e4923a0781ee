"""TraceReports -> the job analysis' inputs: one RankInput per distinct rank. Pure."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from diagnose.ranks.job import analyze_job
from diagnose.ranks.model import JobAnalysis, RankInput
from diagnose.traces.report import TraceReport


def _rankless(reports: list[TraceReport], ranked: int, names: dict[str, str]) -> str | None:
    """The traces without a rank beside ranked ones: one line naming them (they are not compared)."""
    files = [f"{n} ({names[n]})" if n in names else n for r in reports if r.meta.rank is None
             for n in [Path(r.path).name]]
    if not files or not ranked:
        return None
    return (f"{', '.join(files)}: no rank (distributedInfo.rank missing from the trace): left out of the comparison "
            f"of the {ranked} ranked trace(s); its lags and waits are not measured (profile every rank with "
            "torch.distributed initialised, or leave the file out)")


def rank_inputs(reports: list[TraceReport], names: dict[str, str] | None = None
                ) -> tuple[list[RankInput], str | None]:
    """The reports as ranks of one job, and a line on what is not compared (None: nothing to say):
    a job takes at least two traces with a rank (``distributedInfo.rank``), each rank once (the
    agent's consecutive windows of one process share a rank: they are one rank's time, not a job);
    traces without a rank beside ranked ones are named (left out of the job; ``names``: a member
    file name -> the file it was imported from)."""
    ranked = [(r.meta.rank, r, r.timeline) for r in reports if r.meta.rank is not None and r.timeline is not None]
    rankless = _rankless(reports, len(ranked), names or {})
    if len(ranked) < 2:
        return [], rankless
    twice = sorted(k for k, n in Counter(rank for rank, _, _ in ranked).items() if n > 1)
    if twice:
        return [], "; ".join(w for w in (
            f"rank(s) {', '.join(map(str, twice))} appear in more than one trace: the traces are read as "
            "windows of one job, not compared rank by rank", rankless) if w)
    return [RankInput(rank, r.path, r.meta.unix_clock, tl, r.meta.world_size) for rank, r, tl in ranked], rankless


def job_of(reports: list[TraceReport], names: dict[str, str] | None = None
           ) -> tuple[JobAnalysis | None, str | None]:
    """The job analysis of ``reports`` when they are two or more distinct ranks, and what is not
    compared: why there is no job, or the traces without a rank left out of it (None when there
    is nothing to say: one trace, no rank at all)."""
    ranks, why = rank_inputs(reports, names)
    return (analyze_job(ranks) if ranks else None), why


__all__ = ["job_of", "rank_inputs"]
