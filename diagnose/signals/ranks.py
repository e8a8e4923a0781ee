"""JobAnalysis -> gpu.straggler_lag_ms and gpu.sync_skew_pct (diagnose/ranks/job.py). Pure."""
from __future__ import annotations

from diagnose.model import Signal, missing
from diagnose.ranks.model import JobAnalysis, JobBound

NOT_A_JOB = "one rank only (or traces without distinct distributedInfo.rank): nothing to compare across ranks"
SRC = "torch traces of several ranks (diagnose/ranks)"


def rank_signals(job: JobAnalysis | None, why_not: str | None = None) -> dict[str, Signal]:
    """``gpu.straggler_lag_ms``: the latest straggler's lag after the median rank (0.0 when no rank
    straggles); ``gpu.sync_skew_pct``: synchronisation skew as a share of the matched collectives'
    time. Missing (with the reason) without a job, or without matched collectives for the skew."""
    lag, skew = "gpu.straggler_lag_ms", "gpu.sync_skew_pct"
    if job is not None and job.verdict.bound is JobBound.UNDETERMINED:
        return {lag: missing(lag, "ms", SRC, job.verdict.headline), skew: missing(skew, "%", SRC, job.verdict.headline)}
    if job is None or not job.stragglers:
        why = (job.notes[0] if job and job.notes else why_not) or NOT_A_JOB
        return {lag: missing(lag, "ms", SRC, why), skew: missing(skew, "%", SRC, why)}
    late = [s.lag_ns for s in job.stragglers if s.straggler]
    out = {lag: Signal(lag, max(late) / 1e6 if late else 0.0, "ms", SRC + ", start after the median rank's")}
    pct = job.comm.skew_pct if job.comm else None
    out[skew] = (Signal(skew, pct, "%", SRC + ", waiting for the last rank / collective time") if pct is not None
                 else missing(skew, "%", SRC, "no collective kernel matched across ranks"))
    return out


__all__ = ["rank_signals"]
