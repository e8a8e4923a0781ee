"""Corrections of the thread-time pieces against what /proc measured and what the observer did.

py-spy says where a thread is, not whether it ran: its "running" samples are checked against the
thread's CPU time (utime + stime) both ways, the agent's own torch-profiler holds are cut out,
and an event loop that ran (almost) nothing waited for work. Pure.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from diagnose.account.kinds import ON_CPU
from diagnose.account.pieces import Piece
from diagnose.signals.threads import ThreadUsage

CALIBRATED = ON_CPU - {"cpu.compute"}
CPU_SLACK, CPU_SLACK_NS = 1.25, 100_000_000  # sampled "running" may exceed measured CPU by this much
LOOP_MIN_RUN = 0.005  # an event loop running less than this share of its samples serves nobody


def outside(pieces: list[Piece], holds: list[tuple[int, int]]) -> tuple[list[Piece], int]:
    """``pieces`` with the ``holds`` cut out, and the thread-ns cut."""
    if not holds:
        return pieces, 0
    out: list[Piece] = []
    cut = 0
    for p in pieces:
        parts = [(p.start_ns, p.end_ns)]
        for a, b in holds:
            if b <= p.start_ns or a >= p.end_ns:
                continue
            parts = [q for lo, hi in parts for q in ((lo, min(hi, a)), (max(lo, b), hi)) if q[1] > q[0]]
        if parts == [(p.start_ns, p.end_ns)]:  # no hold in it (most pieces): the piece itself, not a copy
            out.append(p)
            continue
        kept = sum(hi - lo for lo, hi in parts)
        cut += p.end_ns - p.start_ns - kept
        out.extend(replace(p, start_ns=lo, end_ns=hi) for lo, hi in parts)
    return out, cut


def calibrate(pieces: list[Piece], usage: dict[int, ThreadUsage]) -> tuple[list[Piece], int]:
    """py-spy says where a thread is, not whether it ran: a thread whose "running" samples add up to
    more than the CPU time /proc measured for it (utime + stime) was asleep for the rest, most
    likely in a futex (a lock, a condition, the GIL) where no kernel reading caught it. That part
    of each of its on-CPU pieces becomes a lock wait (attributed like one). Framework compute is
    left alone: its work runs on native pool threads (OpenMP, intra-op), not the caller's."""
    running: dict[int, int] = defaultdict(int)
    for p in pieces:
        if p.kind in CALIBRATED:
            running[p.tid] += p.end_ns - p.start_ns
    keep: dict[int, float] = {}
    for tid, ns in running.items():
        cpu_ns = _cpu_ns(usage, tid)
        if cpu_ns is not None and ns > CPU_SLACK * cpu_ns + CPU_SLACK_NS:
            keep[tid] = cpu_ns / ns
    out = _split(pieces, keep, lambda p: p.kind in CALIBRATED, lambda p: p,
                 lambda p: replace(p, kind="io.wait" if p.kind == "io.copy" else "lock"))
    return out, len(keep)


def _cpu_ns(usage: dict[int, ThreadUsage], tid: int) -> float | None:
    """The thread's CPU time over the capture (ns; /proc utime + stime), or None with < 2 readings."""
    tu = usage.get(tid)
    return max(0.0, tu.cpu_s) * 1e9 if tu is not None and len(tu.readings) >= 2 else None


def _split(pieces: list[Piece], share: dict[int, float], chosen: Callable[[Piece], bool],
           head: Callable[[Piece], Piece], tail: Callable[[Piece], Piece]) -> list[Piece]:
    """Each ``chosen`` piece of a thread in ``share`` cut at that share of its length: ``head`` of
    the first part, ``tail`` of the rest; other pieces as they are."""
    if not share:
        return pieces
    out = []
    for p in pieces:
        f = share.get(p.tid)
        if f is None or not chosen(p):
            out.append(p)
            continue
        cut = p.start_ns + int((p.end_ns - p.start_ns) * f)
        if cut > p.start_ns:
            out.append(head(replace(p, end_ns=cut)))
        if p.end_ns > cut:
            out.append(tail(replace(p, start_ns=cut)))
    return out


def ran_through_futex(pieces: list[Piece], usage: dict[int, ThreadUsage]) -> tuple[list[Piece], int]:
    """The reverse of calibrate: a thread read asleep in a futex (``wait.gil``) whose /proc CPU time
    covers its running pieces and more ran through those readings: a reading is one instant (a GIL
    handoff between two ops, a short mutex), the CPU clock counts all of it. That much of its
    ``wait.gil`` time (in proportion, at most all) goes back to the kind its stacks show. Seen on a
    model worker in ``Linear.forward``: read in a futex for 5.3 of 11.8 sampled s, 11.9 s of CPU."""
    running: dict[int, int] = defaultdict(int)
    waiting: dict[int, int] = defaultdict(int)
    for p in pieces:
        if p.kind in ON_CPU:
            running[p.tid] += p.end_ns - p.start_ns
        elif p.kind == "wait.gil" and p.ran is not None:
            waiting[p.tid] += p.end_ns - p.start_ns
    share: dict[int, float] = {}
    for tid, ns in waiting.items():
        cpu_ns = _cpu_ns(usage, tid)
        spare = cpu_ns - running[tid] if cpu_ns is not None else 0.0
        if spare > CPU_SLACK_NS:
            share[tid] = min(1.0, spare / ns)
    out = _split(pieces, share, lambda p: p.kind == "wait.gil" and p.ran is not None,
                 lambda p: replace(p, kind=p.ran or p.kind, ran=None), lambda p: p)
    return out, len(share)


def idle_loops(pieces: list[Piece], usage: dict[int, ThreadUsage] | None = None) -> list[Piece]:
    """An event loop that itself ran (almost) nothing was not serving those connections: they
    are idle keep-alive ones, and its waits are waiting for work. Ran: its on-CPU pieces, or its
    /proc CPU time where that is more: a loop awaiting an upstream spends its CPU in socket system
    calls (a new connection per request), which py-spy reads as idle (0.4% of its samples, 9% of a
    core by /proc)."""
    ran: dict[int, float] = defaultdict(float)
    total: dict[int, int] = defaultdict(int)
    for p in pieces:
        total[p.tid] += p.end_ns - p.start_ns
        if p.kind in ON_CPU:
            ran[p.tid] += p.end_ns - p.start_ns
    for tid in total:
        ran[tid] = max(ran[tid], _cpu_ns(usage or {}, tid) or 0.0)
    idle = {t for t in total if ran[t] < LOOP_MIN_RUN * total[t]}
    return [replace(p, kind="idle.work") if p.kind == "await" and p.tid in idle else p for p in pieces]


__all__ = ["calibrate", "idle_loops", "outside", "ran_through_futex"]
