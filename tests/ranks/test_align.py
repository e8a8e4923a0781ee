"""Ranks that do not share one run's time are left out of the job, and collectives without a
sequence number are matched by aligned position or not at all (diagnose/ranks/align.py). Pure."""
from __future__ import annotations

from diagnose.ranks.job import analyze_job
from diagnose.ranks.model import JobBound, RankInput
from diagnose.traces.ranktime import Collective, RankBreakdown, RankTimeline

MS = 1_000_000
HOUR_MS = 3_600_000.0
BD = RankBreakdown(span_ns=100 * MS, compute_ns=60 * MS, communication_ns=20 * MS, memcpy_ns=5 * MS,
                   other_ns=0, idle_ns=15 * MS)


def _rank(rank: int, starts_ms: list[float], seq: bool = True, dur_ms: float = 2.0,
          ends_ms: list[float] | None = None) -> RankInput:
    colls = tuple(Collective("0", "allreduce", i if seq else -1, i, int(s * MS),
                             int((ends_ms[i] if ends_ms else s + dur_ms) * MS)) for i, s in enumerate(starts_ms))
    return RankInput(rank, f"/x/rank-{rank}.json", True, RankTimeline(BD, colls, ((1, int(starts_ms[0] * MS)),)))


def test_a_rank_trace_of_another_hour_is_left_out_not_a_clock_offset():
    ranks = [_rank(r, [10.0, 50.0, 90.0]) for r in range(3)] + [_rank(3, [10.0 + HOUR_MS, 50.0 + HOUR_MS])]
    job = analyze_job(ranks)
    assert job.verdict.bound is not JobBound.STRAGGLER, job.verdict.headline
    assert [s.rank for s in job.stragglers] == [0, 1, 2] and [r.rank for r in job.ranks] == [0, 1, 2]
    assert all(s.clock_offset_ns is None for s in job.stragglers)
    assert len(job.notes) == 1 and job.notes[0].startswith("rank 3 (rank-3.json, Unix 3600.010-3600.052 s) left out")


def test_no_two_windows_overlapping_is_no_comparison():
    job = analyze_job([_rank(0, [10.0]), _rank(1, [10.0 + HOUR_MS])])
    assert job.stragglers == () and job.comm is None and "no two ranks' GPU windows overlap" in job.notes[0]


def test_without_seq_a_window_one_collective_later_is_aligned_not_a_40_ms_offset():
    starts = [10.0 + 40.0 * i for i in range(6)]
    ranks = [_rank(r, starts, seq=False) for r in range(4)]
    ranks[1] = _rank(1, starts[1:], seq=False)
    job = analyze_job(ranks)
    assert job.verdict.bound is not JobBound.STRAGGLER, job.verdict.headline
    assert all(s.clock_offset_ns is None for s in job.stragglers)
    one = next(s for s in job.stragglers if s.rank == 1)
    assert one.collectives_matched == 5 and one.collective_lag_ns == 0 and one.steps_matched == 0
    assert job.comm is not None and job.comm.collectives == 6
    assert any("rank 1 by +1" in n for n in job.notes), job.notes


def test_without_seq_an_ambiguous_alignment_matches_no_collective():
    # rank 1 20 ms after rank 0 with a 40 ms period, nobody waiting: +20 ms or -20 ms a position later
    job = analyze_job([_rank(0, [10.0, 50.0, 90.0], seq=False, dur_ms=0.05),
                       _rank(1, [30.0, 70.0, 110.0], seq=False, dur_ms=0.05)])
    assert job.comm is None and all(s.collectives_matched == 0 for s in job.stragglers)
    assert all(s.clock_offset_ns is None for s in job.stragglers)
    assert job.notes[0].startswith("without sequence numbers (Seq) the collectives cannot be matched"), job.notes


def test_without_seq_a_straggler_the_others_wait_for_still_straggles():
    on_time = [10.0, 50.0, 90.0]
    ends = [s + 20.05 for s in on_time]  # the others wait inside their kernels until rank 2 arrives
    ranks = [_rank(r, on_time, seq=False, ends_ms=ends) for r in range(2)]
    ranks.append(_rank(2, [s + 20.0 for s in on_time], seq=False, dur_ms=0.05))
    job = analyze_job(ranks)
    assert job.verdict.bound is JobBound.STRAGGLER and job.verdict.ranks == (2,), job.verdict.headline
    assert not job.notes


def test_without_seq_ranks_in_different_groups_align_on_the_group_they_share():
    # rank 1 also runs a group "pp" collective rank 0 never sees, and its window began one "0" allreduce later
    starts = [10.0 + 40.0 * i for i in range(6)]
    zero = _rank(0, starts, seq=False)
    own = [Collective("0", "allreduce", -1, i, int(s * MS), int((s + 2.0) * MS)) for i, s in enumerate(starts[1:])]
    own.insert(2, Collective("pp", "send", -1, 0, int(95.0 * MS), int(96.0 * MS)))
    one = RankInput(1, "/x/rank-1.json", True, RankTimeline(BD, tuple(own), ((1, int(starts[1] * MS)),)))
    job = analyze_job([zero, one])
    assert job.comm is not None and job.comm.collectives == 5 and job.comm.unmatched == 2, job.notes
    assert all(s.collective_lag_ns == 0 and s.clock_offset_ns is None for s in job.stragglers)
