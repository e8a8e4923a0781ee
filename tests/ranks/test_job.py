"""The job analysis on small typed inputs (pure): straggler floor and robust deviation, skew
without a straggler, ranks that share no clock, and the reader keeping the collective args."""
from __future__ import annotations

import gzip
import json

from diagnose.ranks.job import STRAGGLER_MIN_NS, analyze_job
from diagnose.ranks.model import JobBound, RankBound, RankInput
from diagnose.traces.ranktime import Collective, RankBreakdown, RankTimeline

MS = 1_000_000
BD = RankBreakdown(span_ns=100 * MS, compute_ns=60 * MS, communication_ns=20 * MS, memcpy_ns=5 * MS,
                   other_ns=0, idle_ns=15 * MS)


def _rank(rank: int, starts_ms: list[float], dur_ms: float = 2.0, ends_ms: list[float] | None = None,
          seq: bool = False, clock: bool = True, step_ms: float | None = None) -> RankInput:
    colls = tuple(Collective("0", "allreduce", i if seq else -1, i, int(s * MS),
                             int((ends_ms[i] if ends_ms else s + dur_ms) * MS)) for i, s in enumerate(starts_ms))
    step = int((starts_ms[0] if step_ms is None else step_ms) * MS)
    return RankInput(rank, f"rank-{rank}.json", clock, RankTimeline(BD, colls, ((1, step),)))


def test_a_lag_under_the_floor_is_no_straggler():
    lag = (STRAGGLER_MIN_NS - 1) / MS
    job = analyze_job([_rank(r, [10.0 + (lag if r == 3 else 0), 50.0 + (lag if r == 3 else 0)]) for r in range(6)])
    assert not any(s.straggler for s in job.stragglers)
    assert job.verdict.bound is not JobBound.STRAGGLER


def test_noisy_ranks_need_several_deviations_to_straggle():
    # ranks jitter by up to 2 ms; rank 4 at +3 ms is inside 3.5 robust deviations, rank 7 at +30 ms is not
    offsets = {0: 0.0, 1: 1.0, 2: 2.0, 3: 0.5, 4: 3.0, 5: 1.5, 6: 0.2, 7: 30.0}
    job = analyze_job([_rank(r, [100.0 + o, 200.0 + o, 300.0 + o], ends_ms=[135.0, 235.0, 335.0])
                       for r, o in offsets.items()])
    assert [s.rank for s in job.stragglers if s.straggler] == [7]
    assert job.verdict.ranks == (7,)
    late = next(s for s in job.stragglers if s.rank == 7)
    assert late.last_arrivals == 3 and late.collective_lag_ns == (30.0 - 1.25) * MS


def test_true_communication_is_measured_after_the_last_arrival():
    # both end at 20 ms; rank 1 arrives at 18 ms: 2 ms moving data, the median rank's 6 ms kernel is 4 ms skew
    job = analyze_job([_rank(0, [10.0], ends_ms=[20.0]), _rank(1, [18.0], ends_ms=[20.0])])
    assert job.comm is not None and job.comm.true_comm_ns == 2 * MS and job.comm.skew_ns == 4 * MS
    assert [s.rank for s in job.stragglers if s.straggler] == [1]  # two ranks: the floor decides


def test_skew_without_a_single_late_rank():
    # a different rank is last at each collective: everyone waits, nobody always late
    starts = [[10.0, 20.0, 30.0], [13.0, 20.0, 30.0], [10.0, 23.0, 30.0], [10.0, 20.0, 33.0]]
    ends = [13.5, 23.5, 33.5]
    job = analyze_job([_rank(r, s, ends_ms=ends, step_ms=5.0) for r, s in enumerate(starts)])
    assert not any(s.straggler for s in job.stragglers)
    assert job.verdict.bound is JobBound.SKEW and job.comm is not None and job.comm.skew_pct > 50


def test_ranks_off_the_unix_clock_are_not_compared():
    job = analyze_job([_rank(0, [10.0]), _rank(1, [90.0], clock=False)])
    assert job.stragglers == () and job.comm is None and "not on the Unix clock" in job.notes[0]
    assert job.ranks[0].bound is RankBound.COMPUTE and job.ranks[0].bound_pct == 60.0


def test_reader_keeps_collective_args_of_kernels(tmp_path):
    from diagnose.traces.ranktime import collectives
    from diagnose.traces.reader import read_trace
    from diagnose.traces.view import build_view

    k = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "dur": 5.0,
         "args": {"device": 0, "stream": 7, "correlation": 1}}
    evs = [{**k, "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "ts": 1.0,
            "args": {**k["args"], "Collective name": "allreduce", "Process Group Name": "pg7", "Seq": 41}},
           {**k, "name": "ncclDevKernel_AllGather_RING_LL", "ts": 10.0,
            "args": {**k["args"], "Collective name": "allgather", "Process Group Name": "pg7", "seq": "42"}},
           {**k, "name": "ncclKernel_Broadcast_RING_LL", "ts": 20.0},
           {**k, "name": "gemm", "ts": 30.0}]
    p = tmp_path / "t.json.gz"
    doc = {"traceEvents": evs, "baseTimeNanoseconds": 1_700_000_000 * 10**9}
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    got = collectives(build_view(read_trace(p)))
    assert [(c.group, c.name, c.seq, c.index) for c in got] == [
        ("pg7", "allreduce", 41, 0), ("pg7", "allgather", 42, 0), ("?", "ncclKernel_Broadcast_RING_LL", -1, 0)]


def test_hostile_collective_args_are_read_as_text_or_no_sequence(tmp_path):
    from diagnose.traces.ranktime import collectives
    from diagnose.traces.reader import read_trace
    from diagnose.traces.view import build_view

    k = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "dur": 5.0, "name": "ncclKernel_AllReduce"}
    args = ({"Collective name": ["all", "reduce"], "Process Group Name": 7, "Seq": "x"},
            {"Collective name": "allreduce\u0007", "Process Group Name": None, "Seq": 1e30},
            {"Collective name": "a" * 10_000, "seq": -5})
    evs = [{**k, "ts": 10.0 * i, "args": {"device": 0, "stream": 7, **a}} for i, a in enumerate(args)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs, "baseTimeNanoseconds": 1_700_000_000 * 10**9}))
    got = collectives(build_view(read_trace(p)))
    assert [(c.group, c.name[:12], c.seq) for c in got] == [
        ("7", "['all', 'red", -1), ("?", "allreduce\ufffd", -1), ("?", "a" * 12, -5)]
    assert len(got[2].name) <= 4096


def test_late_starts_the_others_did_not_wait_for_are_a_clock_offset():
    # rank 1 starts 20 ms after rank 0 at every collective, yet rank 0's kernels last 0.05 ms:
    # rank 0 never waited for it (its host clock is 20 ms ahead); with a 20 ms wait the same lag straggles
    # (with Seq: without it a 20 ms shift of a 40 ms period is ambiguous, test_align.py)
    short = analyze_job([_rank(0, [10.0, 50.0, 90.0], dur_ms=0.05, seq=True),
                         _rank(1, [30.0, 70.0, 110.0], dur_ms=0.05, seq=True)])
    assert not any(s.straggler for s in short.stragglers) and short.verdict.bound is not JobBound.STRAGGLER
    assert [s.clock_offset_ns for s in short.stragglers] == [None, 20 * MS]
    assert all(s.wait_ns <= 3 * 0.05 * MS for s in short.stragglers)  # never more than the kernels ran
    assert short.notes and short.notes[0].startswith("clock offset between ranks: rank 1 +20.0 ms")
    waited = analyze_job([_rank(0, [10.0, 50.0, 90.0], ends_ms=[30.05, 70.05, 110.05]),
                          _rank(1, [30.0, 70.0, 110.0], dur_ms=0.05)])
    assert [s.rank for s in waited.stragglers if s.straggler] == [1] and not waited.notes
    assert waited.stragglers[0].wait_ns == 3 * 20 * MS
