"""analyze_job(ranks) -> JobAnalysis: per-rank table, stragglers and the job's verdict. Pure.

Collectives are matched across ranks by (process group, sequence number, name) when every collective
of every rank carries a sequence number, else by (process group, collective name, position) once each
rank's sequence is aligned with the lowest rank's (ranks/align.py: by names and kernel ends; an ambiguous
alignment matches nothing, with a note). A matched collective whose kernels do not end together on its
ranks is not one collective (ranks/agree.py): too many such and the verdict is "cannot tell", never a
straggler named from them. Only ranks whose GPU windows overlap form the job (the largest such set; the
others are named in a note); traces whose world size is larger than the ranks given say "N of WORLD
ranks", and a straggler among them is only the latest of those given. For each
collective matched on at least two ranks: the *last arrival* is the latest start; a rank's *lag*
is its start minus the median rank's start, its *wait* the part of its own collective kernel
before the last arrival (min(end, last) - start: a rank waits inside NCCL, never longer than its
kernel ran). The median rank's kernel duration is split into *synchronisation skew* (the ranks'
median wait) and *true communication* (the rest: data moving once everyone is there). Steps
(ProfilerStep#N) are matched by number the same way.

Clock offset: a rank whose collectives start at least STRAGGLER_MIN_NS after the others' while
the others' collective kernels ran less than CLOCK_EXPLAINED of that lag before it arrived (they
had already finished: physically impossible for a late rank of a blocking collective) has a host
clock ahead of theirs. It is no straggler: a note says so, and its times are moved back by the
offset before lags, waits and skew are measured (Kineto stamps each rank's events with its own
host's clock, baseTimeNanoseconds: nothing in the trace aligns ranks for us).

A rank is a straggler when its lag (collectives or steps, the larger) exceeds the median rank's
by at least STRAGGLER_MIN_NS and by ROBUST_Z robust deviations (1.4826 x MAD of the ranks' lags;
with two ranks the floor alone decides). Times must be Unix ns on every rank (distinct hosts: as
good as their clock sync, typically well under a millisecond with NTP/PTP).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from pathlib import Path
from statistics import median

from diagnose.ranks.agree import agreement
from diagnose.ranks.align import align_occurrences, apart_note, overlapping
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
CLOCK_EXPLAINED = 0.5  # a lag the others' collective kernels cover less than half of: a clock offset
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


def _key_of(ranks: list[RankInput]) -> tuple[str, Callable[[Collective], Hashable]]:
    """By (process group, sequence number, name) when every collective has a sequence number (one
    seq with two names on two ranks is not one collective), else by (group, name, aligned position)."""
    every = [c for r in ranks for c in r.timeline.collectives]
    if every and all(c.seq >= 0 for c in every):
        return "seq", lambda c: (c.group, c.seq, c.name)
    return "occurrence", lambda c: (c.group, c.name, c.index)


BY = {"seq": "sequence number and name", "occurrence": "name and position (no sequence numbers)"}


def _matched(ranks: list[RankInput], by: str, key: Callable[[Collective], Hashable]
             ) -> tuple[str, dict[Hashable, dict[int, Collective]], int]:
    table: dict[Hashable, dict[int, Collective]] = defaultdict(dict)
    for r in ranks:
        for c in r.timeline.collectives:
            table[key(c)].setdefault(r.rank, c)
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


def _waits(g: dict[int, Collective]) -> tuple[int, dict[int, int]]:
    """The last arrival of one matched collective and each rank's wait for it: the part of its own
    kernel before the last arrival (``min(end, last) - start``, >= 0). A rank waits inside the
    collective kernel, so no wait can exceed what that kernel spent."""
    last = max(c.start_ns for c in g.values())
    return last, {rank: max(0, min(c.end_ns, last) - c.start_ns) for rank, c in g.items()}


def _comm(matched: dict[Hashable, dict[int, Collective]], by: str, single: int
          ) -> tuple[CommSplit | None, dict[int, int], dict[int, int]]:
    wait: dict[int, int] = defaultdict(int)
    last_n: dict[int, int] = defaultdict(int)
    comm = skew = 0
    for g in matched.values():
        last, waits = _waits(g)
        for rank, c in g.items():
            wait[rank] += waits[rank]
            last_n[rank] += c.start_ns == last
        dur = int(median(c.end_ns - c.start_ns for c in g.values()))
        comm, skew = comm + dur, skew + min(dur, int(median(waits.values())))
    split = CommSplit(by, len(matched), single, comm, comm - skew, skew) if matched else None
    return split, wait, last_n


def _behind(matched: dict[Hashable, dict[int, Collective]], rank: int) -> tuple[int, int] | None:
    """Medians over the collectives ``rank`` is in of (its start minus the other ranks' median
    start) and of (how long the other ranks' kernels ran before it arrived: their median). A
    real straggler makes the others wait inside their collective kernels for as long as it is late."""
    late, ran = [], []
    for g in matched.values():
        me = g.get(rank)
        if me is not None:
            others = [c for r, c in g.items() if r != rank]
            late.append(int(me.start_ns - median(c.start_ns for c in others)))
            ran.append(int(median(max(0, min(c.end_ns, me.start_ns) - c.start_ns) for c in others)))
    return (int(median(late)), int(median(ran))) if late else None


def _clock_offsets(ranks: list[RankInput], matched: dict[Hashable, dict[int, Collective]]
                   ) -> dict[int, tuple[int, int]]:
    """Ranks whose collectives start later than the others' by at least STRAGGLER_MIN_NS while the
    others' collective kernels ran less than CLOCK_EXPLAINED of that before they arrived: rank ->
    (offset ns, the others' kernel time before it arrived, ns). Starts that late with the others'
    kernels already ended are a clock offset between the ranks' hosts, not a straggler."""
    out = {}
    for r in ranks:
        b = _behind(matched, r.rank)
        if b is not None and b[0] >= STRAGGLER_MIN_NS and b[1] < CLOCK_EXPLAINED * b[0]:
            out[r.rank] = b
    return out


def _aligned(ranks: list[RankInput], offsets: dict[int, tuple[int, int]]) -> list[RankInput]:
    """``ranks`` with each offset rank's collectives and step starts moved back by its offset."""
    out = []
    for r in ranks:
        off = offsets.get(r.rank, (0, 0))[0]
        if off:
            tl = r.timeline
            r = replace(r, timeline=replace(
                tl, collectives=tuple(replace(c, start_ns=c.start_ns - off, end_ns=c.end_ns - off)
                                      for c in tl.collectives),
                step_starts=tuple((n, s - off) for n, s in tl.step_starts)))
        out.append(r)
    return out


def _offset_note(offsets: dict[int, tuple[int, int]]) -> str:
    parts = ", ".join(f"rank {r} +{off / 1e6:.1f} ms (the others' collective kernels ran {ex / 1e6:.2f} ms before "
                      "it arrived)" for r, (off, ex) in sorted(offsets.items()))
    return (f"clock offset between ranks: {parts}; a late rank would make the others wait inside their collective "
            "kernels for as long as it is late, so these are host clocks that disagree, not stragglers: their "
            "times were aligned by the offset before the ranks were compared (sync the hosts' clocks, NTP/PTP)")


def _stragglers(ranks: list[RankInput], coll_lags: dict[int, list[int]], step_lags: dict[int, list[int]],
                wait: dict[int, int], last_n: dict[int, int], offsets: dict[int, int]) -> tuple[StragglerRow, ...]:
    def med(v: list[int]) -> int | None:
        return int(median(v)) if v else None

    rows = [StragglerRow(r.rank, len(coll_lags.get(r.rank, [])), last_n.get(r.rank, 0),
                         med(coll_lags.get(r.rank, [])), len(step_lags.get(r.rank, [])),
                         med(step_lags.get(r.rank, [])), wait.get(r.rank, 0), False,
                         offsets.get(r.rank)) for r in ranks]
    lags = [s.lag_ns for s in rows]
    mid = median(lags)
    mad = 1.4826 * median(abs(x - mid) for x in lags)
    floor = max(STRAGGLER_MIN_NS, ROBUST_Z * mad if len(rows) > 2 else 0)
    return tuple(StragglerRow(s.rank, s.collectives_matched, s.last_arrivals, s.collective_lag_ns,
                              s.steps_matched, s.step_lag_ns, s.wait_ns,
                              (s.collectives_matched > 0 or s.steps_matched > 0) and s.lag_ns - mid >= floor
                              and s.clock_offset_ns is None, s.clock_offset_ns)
                 for s in rows)


def _world(ranks: list[RankInput]) -> int | None:
    """The job's world size the traces state (the largest), None where none does."""
    sizes = [r.world_size for r in ranks if r.world_size]
    return max(sizes) if sizes else None


def _verdict(rows: tuple[RankRow, ...], stragglers: tuple[StragglerRow, ...], comm: CommSplit | None,
             world: int | None = None) -> JobVerdict:
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
        among = (f" (the latest of the {len(rows)} of {world} ranks given: the job's other ranks may be later)"
                 if world and world > len(rows) else "")
        return JobVerdict(JobBound.STRAGGLER, tuple(s.rank for s in late),
                          f"{names} {verb} the job back: {'the latest ' if len(late) > 1 else ''}{what}{skew}{among}")
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
    world = _world(ranks)
    if not all(r.unix_clock for r in ranks):
        off = ", ".join(str(r.rank) for r in ranks if not r.unix_clock)
        notes.append(f"rank(s) {off} not on the Unix clock: collectives and steps are not compared across ranks")
        return JobAnalysis(rows, (), None, _verdict(rows, (), None), tuple(notes), world)
    inside, apart = overlapping(ranks)
    if len(inside) < 2:
        notes.append("no two ranks' GPU windows overlap: they are not one run's time (traces of different runs, "
                     "or host clocks far apart); collectives and steps are not compared across ranks")
        return JobAnalysis(rows, (), None, _verdict(rows, (), None), tuple(notes), world)
    if apart:
        notes.append(apart_note(inside, apart))
        ranks, rows = inside, tuple(r for r in rows if r.rank in {i.rank for i in inside})
    by, key = _key_of(ranks)
    comparable = True
    if by == "occurrence":
        ranks, note, comparable = align_occurrences(ranks, STRAGGLER_MIN_NS)
        notes += [note] if note else []
    by, matched, single = _matched(ranks, by, key) if comparable else (by, {}, 0)
    offsets = _clock_offsets(ranks, matched)
    if offsets:
        notes.append(_offset_note(offsets))
        ranks = _aligned(ranks, offsets)
        by, matched, single = _matched(ranks, by, key)
    agreed = agreement(matched)
    stmt = agreed.statement(BY[by])
    if not agreed.can_tell and stmt:
        return JobAnalysis(rows, (), None, JobVerdict(JobBound.UNDETERMINED, (), "cannot tell whether a rank holds "
                                                      f"the job back: {stmt}"), tuple(notes), world)
    notes += [stmt] if stmt else []
    matched = agreed.agreeing
    comm, wait, last_n = _comm(matched, by, single)
    steps: dict[int, dict[int, int]] = defaultdict(dict)
    for r in ranks:
        for n, s in r.timeline.step_starts:
            steps[n].setdefault(r.rank, s)
    step_groups = [g for g in steps.values() if len(g) >= 2]
    coll_lags = _lags({rank: c.start_ns for rank, c in g.items()} for g in matched.values())
    stragglers = _stragglers(ranks, coll_lags, _lags(step_groups), wait, last_n,
                             {r: off for r, (off, _) in offsets.items()})
    if not matched and comparable:
        notes.append("no collective kernel matched across ranks (no NCCL/RCCL kernels, or none in common)")
    return JobAnalysis(rows, stragglers, comm, _verdict(rows, stragglers, comm, world), tuple(notes), world)


__all__ = ["BY", "CLOCK_EXPLAINED", "COMM_BOUND_RANKS", "ROBUST_Z", "SKEW_BOUND_PCT", "STRAGGLER_MIN_NS", "analyze_job",
           "rank_bound"]
