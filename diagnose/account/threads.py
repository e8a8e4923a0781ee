"""Thread-time account: every sampled second of the target's threads, by what it was spent on.

py-spy's stacks (which code) are joined with the process collector's readings (/proc state,
wchan, schedstat: whether the thread ran, slept in a futex, or waited for a core). On-CPU time
goes by frame category; a thread runnable but not on a core (schedstat run-queue time) waits
for the host; Python code asleep in a futex waits for the GIL. Lock waits and handoff waits
(events, conditions, queues, joins) are attributed to what the other threads did in the same
50 ms bin: a lock around an upstream call is IO, a queue in front of a busy model worker is
time behind model work. Threads that only ever waited for work (a listener, an idle pool) are
left out, unless no thread did anything. Pure apart from reading the bundle.
"""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from diagnose.bundle import Bundle
from diagnose.bundle.streams import PROCESS
from diagnose.model import Account, AccountTerm, Signal
from diagnose.rules.frame_catalog import SYNC_INTERNALS, WORK_LOOPS, Category
from diagnose.signals.cpu import KERNEL_TOLERANCE_NS, load_sources, pyspy_windows, resolve_io, stack_category
from diagnose.signals.stacks import Frame
from diagnose.signals.threads import KernelTimeline, ThreadUsage, thread_usage
from diagnose.signals.timeline import AGENT_THREAD_PREFIX

from .kinds import CATEGORY_KIND, GIL_HOLDERS, KINDS, ON_CPU, UNBATCHED, TermKind

WAITS = ("lock", "handoff", "await")  # waits on other threads (or, for "await", on the loop's sockets)
UNSEEN = {"lock": "wait.lock", "handoff": "idle.work", "await": "io.wait"}  # ... when no thread worked meanwhile
WAIT_NAMES = {"lock": "lock", "handoff": "queue/handoff", "await": "event-loop"}
IN_FLIGHT_TOLERANCE_NS = 1_500_000_000  # TCP readings come at ~1 Hz
_EVENT_LOOP = re.compile(r"^\w*\.?(run_forever|_run_once) \(.*asyncio/")
BIN_NS = 50_000_000  # waits are attributed to what other threads did within the same 50 ms
ONLY_WAITING = 0.95  # a thread waiting for work this much of its sampled time is not part of the work
GIL_HOLDER_MIN = 0.25  # of a core, within a bin: below it nobody held the GIL long enough to be waited on
UNBATCHED_MAX_BATCH = 2.0  # model ops' leading dimension at most this: unbatched
UNBATCHED_MIN_IN_FLIGHT = 4.0
_WORK_LOOPS = tuple(re.compile(p) for p in WORK_LOOPS)
_SYNC = re.compile(SYNC_INTERNALS)
SRC = "py-spy stacks x /proc thread readings (state, wchan, schedstat)"


@dataclass(frozen=True)
class _Piece:
    tid: int
    start_ns: int
    end_ns: int
    kind: str  # a KINDS key, or one of WAITS (attributed later)


def _usage(bundle: Bundle) -> dict[int, ThreadUsage]:
    return bundle.derived("process.thread_usage", lambda: thread_usage(
        sorted(bundle.stream(PROCESS), key=lambda r: r.get("t_ns", 0))))


def _in_flight(bundle: Bundle) -> tuple[list[int], list[int]]:
    """(t_ns, accepted connections) readings of the process collector, time-ordered."""
    rows = sorted((r["t_ns"], r["tcp"]["accepted"]) for r in bundle.stream(PROCESS)
                  if type(r.get("t_ns")) is int and isinstance(r.get("tcp"), dict)
                  and type(r["tcp"].get("accepted")) is int)
    return [t for t, _ in rows], [n for _, n in rows]


def _requests_open(readings: tuple[list[int], list[int]], t_ns: int) -> bool:
    times, counts = readings
    i = bisect.bisect_left(times, t_ns)
    near = [j for j in (i - 1, i) if 0 <= j < len(times) and abs(times[j] - t_ns) <= IN_FLIGHT_TOLERANCE_NS]
    return any(counts[j] > 0 for j in near)


def _event_loop(frames: tuple[Frame, ...]) -> bool:
    return any(_EVENT_LOOP.search(f"{fr.function} ({fr.file})") for fr in frames)


def _in_work_loop(frames: tuple[Frame, ...]) -> bool:
    """The wait sits directly in a pool's work loop (only threading/queue frames below it)."""
    for depth in range(len(frames) - 1, -1, -1):
        fr = frames[depth]
        if any(p.search(f"{fr.function} ({fr.file})") for p in _WORK_LOOPS):
            return True
        if not _SYNC.search(fr.file):
            return False
    return False


def _pieces(bundle: Bundle) -> list[_Piece]:
    """Every py-spy segment of the target's own threads, as (tid, time, kind) on the Unix clock;
    on-CPU segments split into the part spent running and the part waiting for a core."""
    usage = _usage(bundle)
    kernel = KernelTimeline(usage)
    core_wait = {}
    for tid, tu in usage.items():
        st = tu.schedstat()
        core_wait[tid] = st[1] / (st[0] + st[1]) if st and st[0] + st[1] > 0 else 0.0
    sources = load_sources(bundle)
    in_flight = _in_flight(bundle)
    windows = pyspy_windows(bundle)
    names = {s.tid: s.thread for w in windows for s in (w.segments or ()) if s.thread != "?"}
    out = []
    for w in windows:
        origin = w.record.get("origin_ns")
        if type(origin) is not int or w.segments is None:
            continue
        for seg in w.segments:
            if names.get(seg.tid, "?").startswith(AGENT_THREAD_PREFIX):
                continue
            lo, hi = origin + int(seg.start_us * 1000), origin + int(seg.end_us * 1000)
            reading = kernel.at(seg.tid, (lo + hi) // 2, KERNEL_TOLERANCE_NS)
            cat = resolve_io(stack_category(bundle, seg.frames, sources), reading)
            if cat == Category.IDLE and _event_loop(seg.frames) and _requests_open(in_flight, (lo + hi) // 2):
                # an event loop with requests in flight awaits their sockets (upstream calls, slow
                # clients) or an executor: attributed like a handoff, to IO when nothing else runs
                out.append(_Piece(seg.tid, lo, hi, "await"))
                continue
            if cat == Category.IDLE or (cat == Category.HANDOFF and _in_work_loop(seg.frames)):
                out.append(_Piece(seg.tid, lo, hi, "idle.work"))
                continue
            if cat in (Category.HANDOFF, Category.LOCK_WAIT):
                out.append(_Piece(seg.tid, lo, hi, "handoff" if cat == Category.HANDOFF else "lock"))
                continue
            kind = CATEGORY_KIND.get(cat, "cpu.python")
            if kind in GIL_HOLDERS and reading is not None and reading.cls == "lock_wait":
                kind = "wait.gil"
            f = core_wait.get(seg.tid, 0.0) if kind in ON_CPU else 0.0
            cut = hi - int((hi - lo) * f)
            if cut > lo:
                out.append(_Piece(seg.tid, lo, cut, kind))
            if hi > cut:
                out.append(_Piece(seg.tid, cut, hi, "wait.core"))
    return out


def _bins(p: _Piece) -> Iterator[tuple[int, float]]:
    t = p.start_ns
    while t < p.end_ns:
        b = t // BIN_NS
        nxt = min(p.end_ns, (b + 1) * BIN_NS)
        yield b, (nxt - t) / 1e9
        t = nxt


def _included(pieces: list[_Piece]) -> list[_Piece]:
    """Leave out threads that did nothing but wait for work (unless every thread did)."""
    total: dict[int, float] = defaultdict(float)
    idle: dict[int, float] = defaultdict(float)
    for p in pieces:
        total[p.tid] += p.end_ns - p.start_ns
        if p.kind == "idle.work":
            idle[p.tid] += p.end_ns - p.start_ns
    keep = {t for t, s in total.items() if s > 0 and idle[t] / s < ONLY_WAITING}
    return [p for p in pieces if p.tid in keep] if keep else pieces


def _attribute(pieces: list[_Piece]) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Own seconds per kind, and waits (lock/handoff/await) per (wait, kind of the work they waited
    on): the work the *other* threads did in the same bin, in proportion.

    A Python thread asleep in a futex waits for the GIL only while another thread holds it, so
    runs on a CPU: in a bin where the threads together ran less than GIL_HOLDER_MIN of it, the
    futex sleep is a lock (or condition) wait and is attributed like one."""
    own: dict[str, float] = defaultdict(float)
    active: dict[int, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    waits: dict[int, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))
    gil: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    on_cpu: dict[int, float] = defaultdict(float)
    for p in pieces:
        for b, s in _bins(p):
            if p.kind in WAITS:
                waits[b][(p.kind, p.tid)] += s
            elif p.kind == "wait.gil":
                gil[b][p.tid] += s
            else:
                own[p.kind] += s
                if p.kind != "idle.work":
                    active[b][p.tid][p.kind] += s
                if p.kind in ON_CPU:
                    on_cpu[b] += s
    for b, by_tid in gil.items():
        for tid, s in by_tid.items():
            if on_cpu[b] >= GIL_HOLDER_MIN * BIN_NS / 1e9:
                own["wait.gil"] += s
                active[b][tid]["wait.gil"] += s
            else:
                waits[b][("lock", tid)] += s
    attributed: dict[tuple[str, str], float] = defaultdict(float)
    for b, by_wait in waits.items():
        for (wait, tid), s in by_wait.items():
            work: dict[str, float] = defaultdict(float)
            for other, kinds in active[b].items():
                if other != tid:
                    for kind, k_s in kinds.items():
                        work[kind] += k_s
            busy = sum(work.values())
            if busy <= 0:  # nobody else worked meanwhile: a lock's holder unseen, a handoff with no
                own[UNSEEN[wait]] += s  # producer, an event loop awaiting sockets
                continue
            for kind, k_s in work.items():
                attributed[(wait, kind)] += s * k_s / busy
    return own, attributed


def _value(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def _unbatched(signals: dict[str, Signal]) -> bool:
    batch = _value(signals, "torch.model_batch_p50")
    in_flight = next((v for v in (_value(signals, "spans.in_flight_mean"), _value(signals, "tcp.in_flight_mean"))
                      if v is not None), None)
    return batch is not None and in_flight is not None and batch <= UNBATCHED_MAX_BATCH \
        and in_flight >= UNBATCHED_MIN_IN_FLIGHT


def thread_account(bundle: Bundle, signals: dict[str, Signal]) -> Account | None:
    """The thread-time account, or None without py-spy stacks on the Unix clock."""
    pieces = _pieces(bundle)
    if not pieces:
        return None
    kept = _included(pieces)
    own, attributed = _attribute(kept)
    total = sum(own.values()) + sum(attributed.values())
    if total <= 0:
        return None
    threads = len({p.tid for p in kept})
    left_out = len({p.tid for p in pieces}) - threads
    terms: list[AccountTerm] = []
    for kind, s in own.items():
        k = KINDS[kind]
        terms.append(_term(k, kind, k.label, s, total, f"{s:.2f} of {total:.2f} thread-s"))
    unbatched = _unbatched(signals)
    merged: dict[str, tuple[TermKind, str, float, str]] = {}
    for (wait, kind), s in attributed.items():
        target = KINDS[kind]
        what = {"lock": "lock waits", "handoff": "waits on other threads (queue, event, result)",
                "await": "an event loop awaiting with requests in flight"}[wait]
        if wait == "handoff" and kind == "cpu.compute" and unbatched:
            k, key, label = UNBATCHED, UNBATCHED.kind, UNBATCHED.label
        else:
            k, key = target, f"{wait}>{kind}"
            label = f"{WAIT_NAMES[wait]} wait behind: {target.label}"
        prev = merged.get(key)
        merged[key] = (k, label, s + (prev[2] if prev else 0.0),
                       f"{what} while other threads were in: {target.label} (same {BIN_NS // 1_000_000} ms bins)")
    for key, (k, label, s, why) in merged.items():
        terms.append(_term(k, key, label, s, total, f"{s:.2f} of {total:.2f} thread-s: {why}"))
    terms.sort(key=lambda t: -t.share)
    notes = [f"{threads} thread(s) accounted"]
    if left_out:
        notes.append(f"{left_out} thread(s) that only waited for work (listeners, idle pools) left out")
    return Account("threads", "sampled thread-time of the target", "thread-s", total, tuple(terms), tuple(notes),
                   SRC)


def _term(k: TermKind, kind: str, label: str, s: float, total: float, evidence: str) -> AccountTerm:
    return AccountTerm(kind, label, s / total, s, k.quadrant, k.layer, evidence, k.rule_id)


__all__ = ["thread_account"]
