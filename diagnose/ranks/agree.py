"""Whether collectives matched across ranks are one collective: their ends agree. Pure.

A blocking collective (all-reduce, all-gather, send/recv pairs) ends on every rank once the last one
arrived and the data moved: a straggler starts late but ends with the others. Collectives matched by
sequence number and name, or by name and position, whose kernels end further apart than
END_AGREE_NS (plus END_AGREE_SHARE of the collective's median duration: the ring's last steps) on
different ranks, after any host clock offset is aligned, are not the same collective (two sampled or
filtered traces, windows that begin at different collectives of one name): their starts say nothing
about which rank is late. When more than MAX_DISAGREE_SHARE of the matched collectives disagree the
job analysis cannot tell whether a rank holds the job back; below that, the disagreeing ones are left
out of the lags and waits, with a note.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from statistics import median

from diagnose.traces.ranktime import Collective

END_AGREE_NS = 1_000_000  # ends within 1 ms on every rank (clock sync of distinct hosts: well under it)
END_AGREE_SHARE = 0.1  # plus a tenth of the collective's median kernel duration
MAX_DISAGREE_SHARE = 0.2  # more than a fifth of the matched collectives disagreeing: cannot tell

Matched = dict[Hashable, dict[int, Collective]]


@dataclass(frozen=True)
class Agreement:
    """The matched collectives whose ends agree (``agreeing``), how many did not and how far apart their
    ends were (``spread_ns``: the smallest and largest end spread among them)."""

    agreeing: Matched
    disagreeing: int
    spread_ns: tuple[int, int] | None

    @property
    def matched(self) -> int:
        return len(self.agreeing) + self.disagreeing

    @property
    def can_tell(self) -> bool:
        return self.disagreeing <= MAX_DISAGREE_SHARE * self.matched

    def statement(self, by: str) -> str | None:
        """One line on the collectives left out or why the analysis cannot tell; None when all agree."""
        if not self.disagreeing or self.spread_ns is None:
            return None
        lo, hi = (v / 1e6 for v in self.spread_ns)
        what = (f"{self.disagreeing} of {self.matched} collectives matched across ranks by {by} end {lo:.1f}-{hi:.1f} "
                "ms apart on different ranks (a blocking collective ends on every rank together): they are not the "
                "same collective")
        if not self.can_tell:
            return (what + " (sampled or filtered traces, or windows that begin at different collectives), so which "
                    "rank is late cannot be told from them")
        return what + "; left out of the lags and waits"


def end_spread(group: dict[int, Collective]) -> int:
    ends = [c.end_ns for c in group.values()]
    return max(ends) - min(ends)


def agrees(group: dict[int, Collective]) -> bool:
    dur = median(c.end_ns - c.start_ns for c in group.values())
    return end_spread(group) <= END_AGREE_NS + END_AGREE_SHARE * dur


def agreement(matched: Matched) -> Agreement:
    """Split ``matched`` (key -> rank -> collective, on at least two ranks) by whether the ends agree."""
    keep: Matched = {}
    spreads: list[int] = []
    for k, g in matched.items():
        if agrees(g):
            keep[k] = g
        else:
            spreads.append(end_spread(g))
    return Agreement(keep, len(spreads), (min(spreads), max(spreads)) if spreads else None)


__all__ = ["END_AGREE_NS", "END_AGREE_SHARE", "MAX_DISAGREE_SHARE", "Agreement", "agreement", "agrees", "end_spread"]
