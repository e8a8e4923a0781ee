"""Wait attribution of the thread-time pieces: a wait on another thread is the time of what the
others did meanwhile.

Lock waits and handoff waits (events, conditions, queues, joins) are attributed to what the other
threads did in the same 50 ms bin: a lock around an upstream call is IO, a queue in front of a busy
model worker is time behind model work. Threads that only ever waited for work (a listener, an
idle pool) are left out, unless no thread did anything. Pure.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from diagnose.account.kinds import GIL_HOLDING
from diagnose.account.pieces import Piece
from diagnose.model import STOPPED

WAITS = ("lock", "handoff", "await")  # waits on other threads (or, for "await", on the loop's sockets)
UNSEEN = {"lock": "wait.lock", "handoff": "idle.work", "await": "io.wait"}  # ... when no thread worked meanwhile
BIN_NS = 50_000_000  # waits are attributed to what other threads did within the same 50 ms
ONLY_WAITING = 0.95  # a thread waiting for work this much of its sampled time is not part of the work
GIL_HOLDER_MIN = 0.25  # of a core, within a bin: below it nobody held the GIL long enough to be waited on
NOT_WORK = frozenset({"idle.work", STOPPED})  # what other threads' waits are never attributed to


def _bins(p: Piece) -> Iterator[tuple[int, float]]:
    t = p.start_ns
    while t < p.end_ns:
        b = t // BIN_NS
        nxt = min(p.end_ns, (b + 1) * BIN_NS)
        yield b, (nxt - t) / 1e9
        t = nxt


def included(pieces: list[Piece]) -> list[Piece]:
    """Leave out threads that did nothing but wait for work (unless every thread did)."""
    total: dict[int, float] = defaultdict(float)
    idle: dict[int, float] = defaultdict(float)
    for p in pieces:
        total[p.tid] += p.end_ns - p.start_ns
        if p.kind == "idle.work":
            idle[p.tid] += p.end_ns - p.start_ns
    keep = {t for t, s in total.items() if s > 0 and idle[t] / s < ONLY_WAITING}
    return [p for p in pieces if p.tid in keep] if keep else pieces


def attribute(pieces: list[Piece]) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Own seconds per kind, and waits (lock/handoff/await) per (wait, kind of the work they waited
    on): the work the *other* threads did in the same bin, in proportion.

    A Python thread asleep in a futex waits for the GIL only while another thread holds it, so runs
    Python code on a CPU: in a bin where the threads together ran Python less than GIL_HOLDER_MIN
    of it, the futex sleep is a lock (or condition) wait and is attributed like one."""
    own: dict[str, float] = defaultdict(float)
    total: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # bin -> kind -> s
    mine: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))  # (bin, tid)
    waits: dict[int, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))
    gil: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    holding: dict[int, float] = defaultdict(float)
    for p in pieces:
        for b, s in _bins(p):
            if p.kind in WAITS:
                waits[b][(p.kind, p.tid)] += s
            elif p.kind == "wait.gil":
                gil[b][p.tid] += s
            else:
                own[p.kind] += s
                if p.kind not in NOT_WORK:
                    total[b][p.kind] += s
                    mine[(b, p.tid)][p.kind] += s
                if p.kind in GIL_HOLDING:
                    holding[b] += s
    for b, by_tid in gil.items():
        for tid, s in by_tid.items():
            if holding[b] >= GIL_HOLDER_MIN * BIN_NS / 1e9:
                own["wait.gil"] += s
                total[b]["wait.gil"] += s
                mine[(b, tid)]["wait.gil"] += s
            else:
                waits[b][("lock", tid)] += s
    attributed: dict[tuple[str, str], float] = defaultdict(float)
    for b, by_wait in waits.items():
        everyone = total.get(b, {})
        for (wait, tid), s in by_wait.items():
            self_ = mine.get((b, tid), {})
            work = {k: v - self_.get(k, 0.0) for k, v in everyone.items() if v - self_.get(k, 0.0) > 1e-12}
            busy = sum(work.values())
            if busy <= 0:  # nobody else worked meanwhile: a lock's holder unseen, a handoff with no
                own[UNSEEN[wait]] += s  # producer, an event loop awaiting sockets
                continue
            for kind, k_s in work.items():
                attributed[(wait, kind)] += s * k_s / busy
    return own, attributed


__all__ = ["BIN_NS", "WAITS", "attribute", "included"]
