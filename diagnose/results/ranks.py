"""What the renderers read of the job analysis of several ranks (``details.ranks``, diagnose/ranks/model.py
``JobAnalysis.to_json``), as msgspec types.

``details.ranks`` stays the job analysis' JSON in findings.json (its schema is ``$defs/ranks``);
``job_view`` decodes it once into these types (unknown keys ignored), so the terminal lines and the
report's "Ranks" section read attributes. Times in ns, shares in % of each rank's GPU window.
"""
from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from diagnose.results.details import scalar


class RankRowView(Struct, frozen=True, kw_only=True):
    """One rank: its verdict (and the share of its GPU window it stands for), its four-way breakdown."""

    rank: int
    verdict: str
    verdict_pct: float | None = None
    collectives: int = 0
    span_ns: int | None = None
    compute_pct: float | None = None
    communication_pct: float | None = None
    memcpy_pct: float | None = None
    idle_pct: float | None = None


class StragglerView(Struct, frozen=True, kw_only=True):
    """How late one rank arrives at collectives and steps (ns after the median rank)."""

    rank: int
    straggler: bool = False
    lag_ns: int = 0
    collective_lag_ns: int | None = None
    step_lag_ns: int | None = None
    last_arrivals: int = 0
    collectives_matched: int = 0
    wait_ns: int = 0


class CommSplitView(Struct, frozen=True, kw_only=True):
    """Matched collectives' time: true communication plus synchronisation skew."""

    matched_by: str
    collectives: int
    unmatched: int
    comm_ns: int
    true_comm_ns: int
    skew_ns: int
    skew_pct: float | None = None


class JobVerdictView(Struct, frozen=True, kw_only=True):
    bound: str
    headline: str


class JobView(Struct, frozen=True, kw_only=True):
    """The job: how many ranks (``world``, ``scope`` in words), per-rank rows, stragglers, collectives."""

    world: int
    scope: str
    verdict: JobVerdictView
    ranks: tuple[RankRowView, ...] = ()
    stragglers: tuple[StragglerView, ...] = ()
    collectives: CommSplitView | None = None
    notes: tuple[str, ...] = ()


def job_view(job: dict[str, Any]) -> JobView:
    """``details.ranks`` as a JobView (its numpy scalars as their numbers)."""
    return msgspec.convert(msgspec.to_builtins(job, enc_hook=scalar), JobView)


__all__ = ["CommSplitView", "JobVerdictView", "JobView", "RankRowView", "StragglerView", "job_view"]
