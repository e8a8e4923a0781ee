"""analyze_job(ranks) -> JobAnalysis: per-rank table, stragglers and the job's verdict. Pure.

Collectives are matched across ranks by (process group, sequence number) when every collective
of every rank carries one, else by (process group, collective name, occurrence index). For each
collective matched on at least two ranks: the *last arrival* is the latest start; a rank's *lag*
is its start minus the median rank's start, its *wait* the last arrival minus its own start. The
median rank's kernel duration is split into *true communication* (median end minus the last
arrival: the data moving once everyone is there) and *synchronisation skew* (the rest). Steps
(ProfilerStep#N) are matched by number the same way.

A rank is a straggler when its lag (collectives or steps, the larger) exceeds the median rank's
by at least STRAGGLER_MIN_NS and by ROBUST_Z robust deviations (1.4826 x MAD of the ranks' lags;
with two ranks the floor alone decides). Times must be Unix ns on every rank (distinct hosts: as
good as their clock sync, typically well under a millisecond with NTP/PTP).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from pathlib import Path
from statistics import median

from diagnose.ranks.model import (
    CommSplit,
    JobAnalysis,
    JobBound,
    JobVerdict,
    RankBound,
    RankInput,
    RankRow,
    StragglerRow,
)
from diagnose.traces.ranktime import Collective, RankBreakdown

STRAGGLER_MIN_NS = 500_000  # a rank later than the median rank by less than 0.5 ms is not a straggler
ROBUST_Z = 3.5  # and by at least this many robust deviations of the ranks' lags
SKEW_BOUND_PCT = 50.0  # skew this share of communication time with no straggler: JobBound.SKEW
COMM_BOUND_RANKS = 0.5  # more than this share of ranks communication-bound: JobBound.COMMUNICATION


def rank_bound(b: RankBreakdown | None) -> tuple[RankBound, float | None]:
    """The largest of compute / communication / memcpy / idle and its share (%) of the window."""
    if b is None or b.span_ns <= 0:
        return RankBound.NO_GPU, None
    name, ns = max(b.terms().items(), key=lambda kv: kv[1])
    return RankBound(name), b.pct(ns)


def _rank_row(r: RankInput) -> RankRow:
    bound, pct = rank_bound(r.timeline.breakdown)
    return RankRow(r.rank, Path(r.path).name, r.timeline.breakdown, bound, pct, len(r.timeline.collectives),
                   len(r.timeline.step_starts))


def _key_of(ranks: list[RankInput]) -> tuple[str, object]:
    every = [c for r in ranks for c in r.timeline.collectives]
    if every and all(c.seq >= 0 for c in every):
        return "seq", lambda c: (c.group, c.seq)
    return "occurrence", lambda c: (c.group, c.name, c.index)


def _matched(ranks: list[RankInput]) -> tuple[str, dict[Hashable, dict[int, Collective]], int]:
    by, key = _key_of(ranks)
    table: dict[Hashable, dict[int, Collective]] = defaultdict(dict)
    for r in ranks:
        for c in r.timeline.collectives:
            table[key(c)].setdefault(r.rank, c)  # type: ignore[operator]
    single = sum(1 for v in table.values() if len(v) < 2)
    return by, {k: v for k, v in table.items() if len(v) >= 2}, single


def _lags(groups: Iterable[dict[int, int]]) -> dict[int, list[int]]:
    """Per rank, its start minus the median rank's start, over every matched group."""
    out: dict[int, list[int]] = defaultdict(list)
    for g in groups:
        mid = median(g.values())
        for rank, s in g.items():
            out[rank].append(int(s - mid))
    return out


def _comm(matched: dict[Hashable, dict[int, Collective]], by: str, single: int
          ) -> tuple[CommSplit | None, dict[int, int], dict[int, int]]:
    wait: dict[int, int] = defaultdict(int)
    last_n: dict[int, int] = defaultdict(int)
    comm = true = 0
    for g in matched.values():
        last = max(c.start_ns for c in g.values())
        for rank, c in g.items():
            wait[rank] += last - c.start_ns
            last_n[rank] += c.start_ns == last
        dur = int(median(c.end_ns - c.start_ns for c in g.values()))
        t = min(dur, max(0, int(median(c.end_ns for c in g.values())) - last))
        comm, true = comm + dur, true + t
    split = CommSplit(by, len(matched), single, comm, true, comm - true) if matched else None
    return split, wait, last_n


def _stragglers(ranks: list[RankInput], coll_lags: dict[int, list[int]], step_lags: dict[int, list[int]],
                wait: dict[int, int], last_n: dict[int, int]) -> tuple[StragglerRow, ...]:
    def med(v: list[int]) -> int | None:
        return int(median(v)) if v else None

    rows = [StragglerRow(r.rank, len(coll_lags.get(r.rank, [])), last_n.get(r.rank, 0),
                         med(coll_lags.get(r.rank, [])), len(step_lags.get(r.rank, [])),
                         med(step_lags.get(r.rank, [])), wait.get(r.rank, 0), False) for r in ranks]
    lags = [s.lag_ns for s in rows]
    mid = median(lags)
    mad = 1.4826 * median(abs(x - mid) for x in lags)
    floor = max(STRAGGLER_MIN_NS, ROBUST_Z * mad if len(rows) > 2 else 0)
    return tuple(StragglerRow(s.rank, s.collectives_matched, s.last_arrivals, s.collective_lag_ns,
                              s.steps_matched, s.step_lag_ns, s.wait_ns,
                              (s.collectives_matched > 0 or s.steps_matched > 0) and s.lag_ns - mid >= floor)
                 for s in rows)


def _verdict(rows: tuple[RankRow, ...], stragglers: tuple[StragglerRow, ...], comm: CommSplit | None) -> JobVerdict:
    late = [s for s in stragglers if s.straggler]
    if late:
        names = ", ".join(f"rank {s.rank}" for s in late)
        worst = max(late, key=lambda s: s.lag_ns)
        what = (f"its collectives start {worst.collective_lag_ns / 1e6:.1f} ms after the median rank's "
                f"(last to arrive at {worst.last_arrivals} of {worst.collectives_matched})"
                if worst.collective_lag_ns is not None and worst.collective_lag_ns >= (worst.step_lag_ns or 0)
                else f"its steps start {(worst.step_lag_ns or 0) / 1e6:.1f} ms after the median rank's")
        skew = (f"; synchronisation skew is {comm.skew_pct:.0f}% of the communication time "
                f"({comm.skew_ns / 1e6:.1f} of {comm.comm_ns / 1e6:.1f} ms)"
                if comm and comm.skew_pct is not None else "")
        verb = "holds" if len(late) == 1 else "hold"
        return JobVerdict(JobBound.STRAGGLER, tuple(s.rank for s in late),
                          f"{names} {verb} the job back: {'the latest ' if len(late) > 1 else ''}{what}{skew}")
    if comm is not None and comm.skew_pct is not None and comm.skew_pct >= SKEW_BOUND_PCT:
        return JobVerdict(JobBound.SKEW, (), f"ranks wait for each other: synchronisation skew is "
                          f"{comm.skew_pct:.0f}% of the communication time, with no single rank always late")
    counts: dict[RankBound, int] = defaultdict(int)
    for r in rows:
        counts[r.bound] += 1
    if counts[RankBound.COMMUNICATION] > COMM_BOUND_RANKS * len(rows):
        true = f" (true communication {comm.true_comm_ns / 1e6:.1f} ms of {comm.comm_ns / 1e6:.1f} ms)" if comm else ""
        return JobVerdict(JobBound.COMMUNICATION, (), f"communication-bound: {counts[RankBound.COMMUNICATION]} of "
                          f"{len(rows)} ranks spend most of their GPU window in collectives{true}")
    mix = ", ".join(f"{b.value} {n}" for b, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return JobVerdict(JobBound.PER_RANK, (), f"no rank holds the job back; the ranks' own bounds: {mix}")


def analyze_job(ranks: list[RankInput]) -> JobAnalysis:
    """The job analysis of ``ranks`` (distinct rank numbers; at least one). Pure."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    rows = tuple(_rank_row(r) for r in ranks)
    notes: list[str] = []
    if not all(r.unix_clock for r in ranks):
        off = ", ".join(str(r.rank) for r in ranks if not r.unix_clock)
        notes.append(f"rank(s) {off} not on the Unix clock: collectives and steps are not compared across ranks")
        return JobAnalysis(rows, (), None, _verdict(rows, (), None), tuple(notes))
    by, matched, single = _matched(ranks)
    comm, wait, last_n = _comm(matched, by, single)
    steps: dict[int, dict[int, int]] = defaultdict(dict)
    for r in ranks:
        for n, s in r.timeline.step_starts:
            steps[n].setdefault(r.rank, s)
    step_groups = [g for g in steps.values() if len(g) >= 2]
    coll_lags = _lags({rank: c.start_ns for rank, c in g.items()} for g in matched.values())
    stragglers = _stragglers(ranks, coll_lags, _lags(step_groups), wait, last_n)
    if not matched:
        notes.append("no collective kernel matched across ranks (no NCCL/RCCL kernels, or none in common)")
    return JobAnalysis(rows, stragglers, comm, _verdict(rows, stragglers, comm), tuple(notes))


__all__ = ["COMM_BOUND_RANKS", "ROBUST_Z", "SKEW_BOUND_PCT", "STRAGGLER_MIN_NS", "analyze_job", "rank_bound"]
