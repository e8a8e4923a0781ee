"""Typed results of the job analysis of several ranks (diagnose/ranks/job.py). Times in ns."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from diagnose.traces.ranktime import RankBreakdown, RankTimeline


class RankBound(Enum):
    """The largest term of one rank's GPU window (ranktime.RankBreakdown)."""

    COMPUTE = "compute"
    COMMUNICATION = "communication"
    MEMCPY = "memcpy"
    IDLE = "idle"
    NO_GPU = "no_gpu"


class JobBound(Enum):
    """What holds the job back: a straggler (named ranks arrive late), synchronisation skew with no
    single late rank, exposed communication, nothing across ranks (each rank's own bound), or cannot tell
    (the collectives matched across ranks do not end together, so they are not the same collectives)."""

    STRAGGLER = "straggler"
    SKEW = "sync_skew"
    COMMUNICATION = "communication"
    PER_RANK = "per_rank"
    UNDETERMINED = "cannot_tell"  # the matched collectives' timing disagrees: not the same collectives


@dataclass(frozen=True)
class RankInput:
    """One rank as the job analysis reads it: its number, file, whether its times are Unix ns
    (comparable with other ranks'), its RankTimeline and the job's world size its trace states."""

    rank: int
    path: str
    unix_clock: bool
    timeline: RankTimeline
    world_size: int | None = None  # distributedInfo.world_size: the job's ranks, given or not


@dataclass(frozen=True)
class RankRow:
    rank: int
    file: str
    breakdown: RankBreakdown | None
    bound: RankBound
    bound_pct: float | None  # share of the GPU window of ``bound``
    collectives: int
    steps: int

    def to_json(self) -> dict[str, Any]:
        b = self.breakdown
        parts = {} if b is None else {
            "span_ns": b.span_ns, "compute_ns": b.compute_ns, "communication_ns": b.communication_ns,
            "memcpy_ns": b.memcpy_ns, "other_ns": b.other_ns, "idle_ns": b.idle_ns,
            **{f"{k}_pct": b.pct(v) for k, v in (*b.terms().items(), ("other", b.other_ns))}}
        return {"rank": self.rank, "file": self.file, "verdict": self.bound.value, "verdict_pct": self.bound_pct,
                "collectives": self.collectives, "steps": self.steps, **parts}


@dataclass(frozen=True)
class StragglerRow:
    """How late one rank arrives: the median over matched collectives of its start minus the
    median rank's start (``collective_lag_ns``), the same over ProfilerSteps (``step_lag_ns``),
    how often it was the last to arrive, and the time it waited at collectives for the last rank
    (``wait_ns``, summed: the part of its collective kernels before the last arrival, never more
    than those kernels ran). ``clock_offset_ns``: the rank's starts were late by this much while
    the others' kernels did not wait for it (a host clock offset; the lags are measured after
    aligning it), None when not."""

    rank: int
    collectives_matched: int
    last_arrivals: int
    collective_lag_ns: int | None
    steps_matched: int
    step_lag_ns: int | None
    wait_ns: int
    straggler: bool
    clock_offset_ns: int | None = None  # this rank's clock ahead of the others' by this much (times aligned)

    @property
    def lag_ns(self) -> int:
        return max(self.collective_lag_ns or 0, self.step_lag_ns or 0)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "collectives_matched": self.collectives_matched,
                "last_arrivals": self.last_arrivals, "collective_lag_ns": self.collective_lag_ns,
                "steps_matched": self.steps_matched, "step_lag_ns": self.step_lag_ns,
                "lag_ns": self.lag_ns, "wait_ns": self.wait_ns, "straggler": self.straggler,
                "clock_offset_ns": self.clock_offset_ns}


@dataclass(frozen=True)
class CommSplit:
    """Matched collectives' time split (sums over collectives of the median rank's figure):
    ``comm_ns`` the collective kernels' duration, ``true_comm_ns`` the part after the last rank
    arrived (data moving), ``skew_ns`` the rest (waiting for the last rank)."""

    matched_by: str  # "seq" (Process Group Name + Seq) or "occurrence" (group + name + aligned position)
    collectives: int  # matched on at least two ranks
    unmatched: int  # collective instances seen on one rank only
    comm_ns: int
    true_comm_ns: int
    skew_ns: int

    @property
    def skew_pct(self) -> float | None:
        return 100.0 * self.skew_ns / self.comm_ns if self.comm_ns > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"matched_by": self.matched_by, "collectives": self.collectives, "unmatched": self.unmatched,
                "comm_ns": self.comm_ns, "true_comm_ns": self.true_comm_ns, "skew_ns": self.skew_ns,
                "skew_pct": self.skew_pct}


@dataclass(frozen=True)
class JobVerdict:
    bound: JobBound
    ranks: tuple[int, ...]  # the ranks that hold the job back (stragglers); empty when none does
    headline: str


@dataclass(frozen=True)
class JobAnalysis:
    ranks: tuple[RankRow, ...]
    stragglers: tuple[StragglerRow, ...]  # one row per rank, empty when the ranks share no clock
    comm: CommSplit | None  # None: no collective matched across ranks
    verdict: JobVerdict
    notes: tuple[str, ...] = ()
    world_size: int | None = None  # the job's ranks (distributedInfo.world_size), when more than those given

    @property
    def scope(self) -> str:
        """"8 ranks", or "2 of 128 ranks" when the traces' world size is larger than the ranks given."""
        n = len(self.ranks)
        return f"{n} of {self.world_size} ranks" if self.world_size and self.world_size > n else f"{n} ranks"

    def to_json(self) -> dict[str, Any]:
        return {"world": len(self.ranks), "world_size": self.world_size, "scope": self.scope,
                "ranks": [r.to_json() for r in self.ranks],
                "stragglers": [s.to_json() for s in self.stragglers],
                "collectives": self.comm.to_json() if self.comm else None,
                "verdict": {"bound": self.verdict.bound.value, "ranks": list(self.verdict.ranks),
                            "headline": self.verdict.headline},
                "notes": list(self.notes)}


__all__ = ["CommSplit", "JobAnalysis", "JobBound", "JobVerdict", "RankBound", "RankInput", "RankRow",
           "StragglerRow"]
