"""Which ranks share one run's time, and how their collectives line up without a sequence number. Pure.

Windows: a rank's GPU window (RankTimeline.window_ns; else the span of its collectives and step
starts) on the Unix clock. Ranks of one job run at the same time, so only ranks whose windows
overlap (a chain of overlaps) form the job; the largest such set is compared, the others are left
apart with a note (a trace of an earlier run of the same script, or a host clock off by more than
the window, would otherwise read as a rank hours late).

Occurrences: without "Seq" the i-th collective of one rank is not necessarily the i-th of another
(each rank's profiler window may begin a few collectives apart). Each rank's collectives of the
(process group, collective name) pairs it shares with the lowest rank are aligned with that rank's
by the shift (in positions) at which the name sequences agree and the collective kernels' *ends*
agree best (a blocking collective ends on every rank once the last one arrived: a straggler
starts late but ends with the others). When a second shift fits almost as well (its median end
difference within twice the best's plus the straggler floor), the alignment is ambiguous and the
collectives are not matched. A shifted rank's steps are not compared (its ProfilerStep numbers
count from its own window).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from diagnose.ranks.model import RankInput
from diagnose.traces.ranktime import Collective

OUTSIDE = 1 << 40  # collectives of a (group, name) the reference lacks: positions below -OUTSIDE
MAX_SHIFT = 512  # positions tried either way when aligning a rank's collectives with the reference's


def window(r: RankInput) -> tuple[int, int] | None:
    """The rank's GPU window (Unix ns), else the span of its collectives and step starts; None without any."""
    tl = r.timeline
    if tl.window_ns is not None:
        return tl.window_ns
    times = [t for c in tl.collectives for t in (c.start_ns, c.end_ns)] + [s for _, s in tl.step_starts]
    return (min(times), max(times)) if times else None


def overlapping(ranks: list[RankInput]) -> tuple[list[RankInput], list[RankInput]]:
    """(the largest set of ranks whose windows overlap in a chain, the others). Ranks without a
    window join the set (nothing of theirs to compare); ties go to the earliest set."""
    timed = sorted((w, r.rank) for r in ranks if (w := window(r)) is not None)
    sets: list[list[int]] = []
    end: int | None = None
    for (start, e), rank in timed:
        if end is not None and start < end:
            sets[-1].append(rank)
            end = max(end, e)
        else:
            sets.append([rank])
            end = e
    if not sets:
        return list(ranks), []
    largest: list[int] = max(sets, key=len)
    best = set(largest)
    inside = [r for r in ranks if r.rank in best or window(r) is None]
    return inside, [r for r in ranks if r not in inside]


def apart_note(inside: list[RankInput], apart: list[RankInput]) -> str:
    """One line naming the ranks left out of the job, their windows and the job's."""
    def span(rs: list[RankInput]) -> str:
        ws = [w for r in rs if (w := window(r)) is not None]
        return f"Unix {min(w[0] for w in ws) / 1e9:.3f}-{max(w[1] for w in ws) / 1e9:.3f} s" if ws else "no window"

    who = ", ".join(f"rank {r.rank} ({r.path.rsplit('/', 1)[-1]}, {span([r])})" for r in apart)
    return (f"{who} left out of the job: its GPU window does not overlap the other ranks' ({span(inside)}), so it "
            "is not the same run's time (a trace of another run, or a host clock off by more than the window); "
            "only the overlapping ranks are compared")


def _codes(colls: tuple[Collective, ...], table: dict[tuple[str, str], int]) -> np.ndarray:
    return np.array([table.setdefault((c.group, c.name), len(table)) for c in colls], dtype=np.int64)


def _fits(ref: tuple[Collective, ...], mine: tuple[Collective, ...]) -> list[tuple[int, int]]:
    """(|median end difference| ns, shift) for every shift at which the names agree on every pair:
    ``mine[j]`` matches ``ref[j + shift]``; at least half of the shorter sequence overlaps."""
    table: dict[tuple[str, str], int] = {}
    rc, mc = _codes(ref, table), _codes(mine, table)
    re = np.array([c.end_ns for c in ref], dtype=np.int64)
    me = np.array([c.end_ns for c in mine], dtype=np.int64)
    need = max(1, min(len(ref), len(mine)) // 2)
    out = []
    for k in range(max(-MAX_SHIFT, -(len(mine) - 1)), min(MAX_SHIFT, len(ref) - 1) + 1):
        lo, hi = max(0, -k), min(len(mine), len(ref) - k)
        if hi - lo < need or not np.array_equal(mc[lo:hi], rc[lo + k:hi + k]):
            continue
        out.append((int(abs(np.median(me[lo:hi] - re[lo + k:hi + k]))), k))
    return sorted(out)


def align_occurrences(ranks: list[RankInput], floor_ns: int) -> tuple[list[RankInput], str | None, bool]:
    """``ranks`` (sorted by rank) with each collective's ``index`` set to its aligned position in
    the lowest rank's sequence, a note when a rank was shifted, and whether the alignment held
    (False: ambiguous or no fit for some rank: the note says which; collectives must not be matched).
    ``floor_ns``: a second shift whose median end difference is under twice the best's plus this
    makes the alignment ambiguous."""
    ref = ranks[0].timeline.collectives
    out = [_positioned(ranks[0], {i: i for i in range(len(ref))}, False)]
    shifted, ambiguous = [], []
    for r in ranks[1:]:
        mine = r.timeline.collectives
        ri, mi = _common(ref, mine)
        if not mi:  # no (group, name) in common with the reference: nothing to align
            out.append(_positioned(r, {}, False))
            continue
        fits = _fits(tuple(ref[i] for i in ri), tuple(mine[j] for j in mi))
        if not fits:
            ambiguous.append(f"rank {r.rank}: no position at which its collective names follow rank {ranks[0].rank}'s")
            continue
        (best, k), second = fits[0], (fits[1] if len(fits) > 1 else None)
        if second is not None and second[0] < 2 * best + floor_ns:
            ambiguous.append(f"rank {r.rank} lines up {k:+d} and {second[1]:+d} position(s) from rank "
                             f"{ranks[0].rank}'s (collective ends {best / 1e6:.2f} and {second[0] / 1e6:.2f} ms apart)")
            continue
        if k:
            shifted.append(f"rank {r.rank} by {k:+d}")
        out.append(_positioned(r, {j: _at(ri, len(ref), p + k) for p, j in enumerate(mi)}, k != 0))
    if ambiguous:
        return ranks, ("without sequence numbers (Seq) the collectives cannot be matched across ranks: "
                       + "; ".join(ambiguous) + "; collectives are not compared (torch >= 2.x writes Seq on NCCL "
                       "kernels), steps still are"), False
    note = (f"without sequence numbers (Seq) the ranks' profiler windows begin at different collectives: "
            f"matched by position with {', '.join(shifted)} (where their collective names and kernel ends line up); "
            "a shifted rank's ProfilerStep numbers count from its own window, so its steps are not compared"
            if shifted else None)
    return out, note, True


def _common(ref: tuple[Collective, ...], mine: tuple[Collective, ...]) -> tuple[list[int], list[int]]:
    """Positions in ``ref`` and in ``mine`` of the collectives whose (group, name) both ranks have
    (ranks in different process groups align on the groups they share)."""
    keys = {(c.group, c.name) for c in ref} & {(c.group, c.name) for c in mine}
    return ([i for i, c in enumerate(ref) if (c.group, c.name) in keys],
            [j for j, c in enumerate(mine) if (c.group, c.name) in keys])


def _at(ref_positions: list[int], ref_len: int, q: int) -> int:
    """The reference position of the ``q``-th shared collective (before or after its window: outside)."""
    if 0 <= q < len(ref_positions):
        return ref_positions[q]
    return q if q < 0 else ref_len + q - len(ref_positions)


def _positioned(r: RankInput, index: dict[int, int], drop_steps: bool) -> RankInput:
    """The rank's collectives indexed by aligned position (``index``: own position -> the
    reference's; the others get positions no other rank shares); a shifted rank's ProfilerStep
    numbers count from its own window's start, so its steps are dropped from the comparison."""
    colls = tuple(replace(c, index=index.get(j, -OUTSIDE - j)) for j, c in enumerate(r.timeline.collectives))
    steps = () if drop_steps else r.timeline.step_starts
    return replace(r, timeline=replace(r.timeline, collectives=colls, step_starts=steps))


__all__ = ["MAX_SHIFT", "align_occurrences", "apart_note", "overlapping", "window"]
