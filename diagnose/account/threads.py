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
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from diagnose.account.kinds import CATEGORY_KIND, GIL_HOLDING, GIL_WAITERS, KINDS, ON_CPU, UNBATCHED, TermKind
from diagnose.agent.inproc.torchwin import YIELD_S
from diagnose.bundle import Bundle
from diagnose.bundle.records import PyspyWindowRecord
from diagnose.bundle.streams import PROCESS, SPANS, TORCH
from diagnose.catalogs.frames import SYNC_INTERNALS, WORK_LOOPS, Category
from diagnose.model import STOPPED, Account, AccountTerm, Layer, Signal
from diagnose.signals.cpu import (
    KERNEL_TOLERANCE_NS,
    load_sources,
    pyspy_windows,
    resolve_io,
    stack_category,
)
from diagnose.signals.process import accepted_connections
from diagnose.signals.spans.analytics import parse_spans
from diagnose.signals.spans.sampling import agent_sampling, in_sample
from diagnose.signals.stacks import Frame
from diagnose.signals.threads import KernelTimeline, Reading, ThreadUsage, bundle_thread_usage
from diagnose.signals.timeline import AGENT_THREAD_PREFIX

WAITS = ("lock", "handoff", "await")  # waits on other threads (or, for "await", on the loop's sockets)
UNSEEN = {"lock": "wait.lock", "handoff": "idle.work", "await": "io.wait"}  # ... when no thread worked meanwhile
WAIT_NAMES = {"lock": "lock", "handoff": "queue/handoff", "await": "event-loop"}
IN_FLIGHT_TOLERANCE_NS = 1_500_000_000  # TCP readings come at ~1 Hz
_EVENT_LOOP = re.compile(r"^\w*\.?(run_forever|_run_once) \(.*asyncio/")
BIN_NS = 50_000_000  # waits are attributed to what other threads did within the same 50 ms
MAX_SEGMENT_NS = 3600 * 10**9  # no py-spy window lasts an hour: longer segments are malformed
CALIBRATED = ON_CPU - {"cpu.compute"}
MIN_READINGS, IO_READINGS_MIN_SHARE = 20, 0.05
CPU_SLACK, CPU_SLACK_NS = 1.25, 100_000_000  # sampled "running" may exceed measured CPU by this much
LOOP_MIN_RUN = 0.005  # an event loop running less than this share of its samples serves nobody
ONLY_WAITING = 0.95  # a thread waiting for work this much of its sampled time is not part of the work
GIL_HOLDER_MIN = 0.25  # of a core, within a bin: below it nobody held the GIL long enough to be waited on
UNBATCHED_MAX_BATCH = 2.0  # model ops' leading dimension at most this: unbatched
# With queue and model stage spans, unbatched means requests queue for the worker at least as long as
# it serves them (the demo's unbatched scenario: 70% queue, 25% model at 3.2 in flight; its batch-1
# LLM: 24% queue, 74% model). Without them, this many requests in flight behind one worker.
UNBATCHED_MIN_IN_FLIGHT = 4.0
QUEUED_MIN = 2.0  # threads queued behind model work, in worker-equivalents, before it counts as a queue
# An event loop is one thread standing for all its in-flight requests (at least UNBATCHED_MIN_IN_FLIGHT
# when _unbatched holds): awaiting for this share of the model's busy time is the queue.
AWAITED_MIN = 0.5
# Profiled op time (calls with FLOPs) below LOW_INTENSITY_FLOP_PER_BYTE (traces/roofline.py: memory-bound
# on any CPU) at least this share: the model's CPU time is memory traffic, not arithmetic.
CPU_MEMORY_BOUND_TIME_PCT = 50.0
_WORK_LOOPS = tuple(re.compile(p) for p in WORK_LOOPS)
_SYNC = re.compile(SYNC_INTERNALS)
_QUEUE_GETS = frozenset({"Queue.get", "SimpleQueue.get", "LifoQueue.get", "PriorityQueue.get"})
SRC = "py-spy stacks x /proc thread readings (state, wchan, schedstat)"
BLOCKED_CLASSES = frozenset({"io_wait", "lock_wait", "sleep"})  # kernel readings of a thread held in a call
NOT_WORK = frozenset({"idle.work", STOPPED})  # what other threads' waits are never attributed to


@dataclass(frozen=True)
class _Piece:
    tid: int
    start_ns: int
    end_ns: int
    kind: str  # a KINDS key, or one of WAITS (attributed later)
    ran: str | None = None  # for a ``wait.gil`` piece: the on-CPU kind its stack shows


def _usage(bundle: Bundle) -> dict[int, ThreadUsage]:
    return bundle_thread_usage(bundle)


def _in_flight(bundle: Bundle) -> tuple[list[int], list[int]]:
    """(t_ns, accepted connections) readings of the process collector, time-ordered."""
    rows = sorted((r["t_ns"], n) for r in bundle.stream(PROCESS) if (n := accepted_connections(r)) is not None)
    return [t for t, _ in rows], [n for _, n in rows]


def _requests_open(readings: tuple[list[int], list[int]], t_ns: int) -> bool:
    times, counts = readings
    i = bisect.bisect_left(times, t_ns)
    near = [j for j in (i - 1, i) if 0 <= j < len(times) and abs(times[j] - t_ns) <= IN_FLIGHT_TOLERANCE_NS]
    return any(counts[j] > 0 for j in near)


@dataclass(frozen=True)
class OpenRequests:
    """When request spans say a request was open: the union of their [start, end) as sorted, disjoint
    ``starts``/``ends`` (Unix ns), and ``unseen``: the chance that a request the agent sampled out
    was open at a moment no kept one is (0 when every trace was kept)."""

    starts: list[int]
    ends: list[int]
    unseen: float = 0.0


def _open_requests(bundle: Bundle) -> OpenRequests | None:
    """The request spans' open intervals, or None without request spans.

    Spans sampled 1 in N (signals/spans/sampling.py) miss requests: the kept traces' in-flight mean
    L_kept (request-s / s) times N - 1 is the sampled-out requests' in-flight mean, and with
    arrivals independent of the sample (the agent keeps by trace id) the chance that at least one
    of them is open is 1 - exp(-L_unseen) (Poisson). Without it the accepted connections, which
    count idle keep-alive ones, stood for "a request open" and an idle loop read as IO."""
    def build() -> OpenRequests | None:
        sampling = agent_sampling(bundle.manifest.get("collectors") or [])
        records, _ = in_sample(bundle.stream(SPANS), sampling)
        reqs = parse_spans(records).requests
        if not reqs:
            return None
        starts: list[int] = []
        ends: list[int] = []
        busy = 0
        for lo, hi in sorted((r.span.start_ns, r.span.end_ns) for r in reqs):
            busy += max(0, hi - lo)
            if starts and lo <= ends[-1]:
                ends[-1] = max(ends[-1], hi)
            else:
                starts.append(lo)
                ends.append(max(lo, hi))
        unseen = 0.0
        if sampling is not None and ends[-1] > starts[0]:
            unseen = 1.0 - math.exp(-busy / (ends[-1] - starts[0]) * (sampling.scale - 1.0))
        return OpenRequests(starts, ends, unseen)
    return bundle.derived("account.open_requests", build)


def _split_open(lo: int, hi: int, open_spans: OpenRequests) -> list[tuple[int, int, str]]:
    """[lo, hi) cut into ``await`` parts (a request open) and ``idle.work`` parts (none open); of
    each part with no kept request open, the ``unseen`` share awaits a sampled-out one."""
    starts, ends = open_spans.starts, open_spans.ends
    out: list[tuple[int, int, str]] = []

    def idle(a: int, b: int) -> None:
        cut = a + int((b - a) * open_spans.unseen)
        if cut > a:
            out.append((a, cut, "await"))
        if b > cut:
            out.append((cut, b, "idle.work"))

    t = lo
    i = bisect.bisect_right(ends, lo)  # the first union interval ending after lo
    while t < hi and i < len(starts):
        a, b = max(starts[i], t), min(ends[i], hi)
        if a >= hi:
            break
        if a > t:
            idle(t, a)
        if b > a:
            out.append((a, b, "await"))
        t = max(t, b)
        i += 1
    if t < hi:
        idle(t, hi)
    return out


def _event_loop(frames: tuple[Frame, ...]) -> bool:
    return any(_EVENT_LOOP.search(f"{fr.function} ({fr.file})") for fr in frames)


def _in_work_loop(frames: tuple[Frame, ...]) -> bool:
    """The wait sits directly in a pool's work loop (only threading/queue frames below it), or in
    a thread's own target taking the next item off its queue (a consumer loop: ``Thread.run`` ->
    target -> ``Queue.get``, nothing but threading/queue frames below the target)."""
    for depth in range(len(frames) - 1, -1, -1):
        fr = frames[depth]
        if any(p.search(f"{fr.function} ({fr.file})") for p in _WORK_LOOPS):
            return True
        if not _SYNC.search(fr.file):  # frames are root first: frames[depth + 1:] were all queue/threading ones
            return depth > 0 and frames[depth - 1].function == "Thread.run" \
                and any(f.function in _QUEUE_GETS for f in frames[depth + 1:])
    return False


def _core_wait(usage: dict[int, ThreadUsage]) -> dict[int, float]:
    """Per thread, the share of its CPU demand spent runnable but not on a core (schedstat), in
    0..1; a counter that went backwards (a reused tid) or is absurd counts as unknown (0)."""
    out = {}
    for tid, tu in usage.items():
        st = tu.schedstat()
        ok = st is not None and all(isinstance(v, int) and 0 <= v < 2**62 for v in st[:2]) and st[0] + st[1] > 0
        out[tid] = min(1.0, st[1] / (st[0] + st[1])) if ok and st else 0.0
    return out


def _window_end(record: PyspyWindowRecord, origin: int) -> int | None:
    last = record.last_ts_us
    return origin + int(last * 1000) if last is not None and 0 < last < 2**40 else None


def _agent_ran(bundle: Bundle) -> bool:
    """The agent's threads (named ``diagnose-*``) are left out only when the agent took part: the
    target chooses its own thread names."""
    return any(c.get("name") == "agent" and c.get("state") in ("ok", "partial")
               for c in bundle.manifest.get("collectors", []) if isinstance(c, dict))


def _kind(cat: str, reading: Reading | None) -> str:
    """A sampled stack's category and the kernel reading near it -> the thread's own term kind.
    py-spy shows where a thread is; the kernel says whether it runs: Python frames asleep in an
    event wait or a sleep wait for work, asleep on IO wait on IO, asleep in a futex maybe the GIL."""
    kind = CATEGORY_KIND.get(cat, "cpu.python")
    if kind == "wait.loop_blocked" and reading is not None and reading.cls not in BLOCKED_CLASSES:
        # a loop caught in a callback's socket call that the kernel shows in its selector (or running) was
        # not held there: a non-blocking recv or send of the transport, returning at once
        return "idle.work" if reading.cls == "event_wait" else "cpu.python"
    if kind not in ON_CPU or reading is None:
        return kind
    if reading.cls == "lock_wait":
        return "wait.gil" if kind in GIL_WAITERS else kind
    if reading.cls in ("event_wait", "sleep"):
        return "idle.work"
    if reading.cls == "io_wait":
        return "io.wait"
    return kind


def _kernel_saw_io(usage: dict[int, ThreadUsage]) -> bool:
    """Whether the /proc readings ever found the target's working threads in an IO wait: when
    there are enough readings and almost none is, a socket/file frame without a reading of its own
    (a thread too short-lived to be read) waits for the GIL or a lock after its call, not on IO."""
    counts = {"io_wait": 0, "work": 0}
    for tu in usage.values():
        for r in tu.readings:
            if r.cls == "io_wait":
                counts["io_wait"] += 1
            elif r.cls in ("running", "lock_wait"):
                counts["work"] += 1
    seen = counts["io_wait"] + counts["work"]
    return seen < MIN_READINGS or counts["io_wait"] >= IO_READINGS_MIN_SHARE * seen


def _pieces(bundle: Bundle) -> tuple[list[_Piece], dict[str, int]]:
    """Every py-spy segment of the target's own threads, as (tid, time, kind) on the Unix clock,
    clipped to its window; on-CPU segments split into the part spent running and the part waiting
    for a core. Also counts what was left out and why (data quality)."""
    usage = _usage(bundle)
    kernel = KernelTimeline(usage)
    core_wait = _core_wait(usage)
    sources = load_sources(bundle)
    in_flight = _in_flight(bundle)
    open_spans = _open_requests(bundle)
    windows = pyspy_windows(bundle)
    names = {s.tid: s.thread for w in windows for s in (w.segments or ()) if s.thread != "?"}
    skip_agent = _agent_ran(bundle)
    io_seen = _kernel_saw_io(usage)
    dropped = {"agent_threads": 0, "windows_without_origin": 0, "duplicate_windows": 0,
               "io_frames_without_io_waits": 0}
    seen_files: set[str] = set()
    out = []
    for w in windows:
        origin = w.record.origin
        if w.segments is None:
            continue
        if origin is None:
            dropped["windows_without_origin"] += 1
            continue
        f = str(w.record.file)
        if f in seen_files:  # one window indexed twice would count its thread-time twice
            dropped["duplicate_windows"] += 1
            continue
        seen_files.add(f)
        w_end = _window_end(w.record, origin)
        for seg in w.segments:
            if skip_agent and names.get(seg.tid, "?").startswith(AGENT_THREAD_PREFIX):
                dropped["agent_threads"] += 1
                continue
            lo, hi = origin + int(seg.start_us * 1000), origin + int(seg.end_us * 1000)
            if w_end is not None:
                hi = min(hi, w_end)
            if hi <= lo or hi - lo > MAX_SEGMENT_NS:
                continue
            reading = kernel.at(seg.tid, (lo + hi) // 2, KERNEL_TOLERANCE_NS)
            # a frozen stack is not what it shows (in blocking mode py-spy's own ptrace stops read "t")
            if reading is not None and reading.cls == STOPPED and not w.record.blocking:
                out.append(_Piece(seg.tid, lo, hi, STOPPED))
                continue
            cat = resolve_io(stack_category(bundle, seg.frames, sources), reading)
            if cat == Category.IO_WAIT and reading is None and not io_seen:
                dropped["io_frames_without_io_waits"] += 1
                cat = Category.LOCK_WAIT
            kind = _kind(cat, reading)
            if (cat == Category.IDLE or kind == "idle.work") and _event_loop(seg.frames) and open_spans is not None:
                # request spans say when requests were open: the loop awaited them then, and waited for
                # work the rest of the time (accepted connections count idle keep-alive ones too)
                out.extend(_Piece(seg.tid, a, b, k) for a, b, k in _split_open(lo, hi, open_spans))
                continue
            if (cat == Category.IDLE or kind == "idle.work") and _event_loop(seg.frames) \
                    and _requests_open(in_flight, (lo + hi) // 2):
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
            if kind == "wait.gil":
                out.append(_Piece(seg.tid, lo, hi, kind, CATEGORY_KIND.get(cat, "cpu.python")))
                continue
            f_core = core_wait.get(seg.tid, 0.0) if kind in ON_CPU else 0.0
            cut = hi - int((hi - lo) * f_core)
            if cut > lo:
                out.append(_Piece(seg.tid, lo, cut, kind))
            if hi > cut:
                out.append(_Piece(seg.tid, cut, hi, "wait.core"))
    out, dropped["calibrated"] = _calibrate(out, usage)
    out, dropped["futex_readings_ran"] = _ran_through_futex(out, usage)
    out, held_ns = _outside(out, _profiler_holds(bundle))
    dropped["profiler_hold_ms"] = held_ns // 1_000_000
    return _idle_loops(out), {k: v for k, v in dropped.items() if v}


def _profiler_holds(bundle: Bundle) -> list[tuple[int, int]]:
    """When diagnose's agent held the target's GIL stopping and exporting a torch window (Unix ns,
    from its index records: ``stopping_ns`` to ``end_ns``, then the export's wall time after its
    YIELD_S pause). The target's threads were held by the observer then, not by the service."""
    out = []
    for w in bundle.typed(TORCH):
        stop, end = w.stopping_ns, w.end_ns
        if stop is None or end is None or not 0 < stop <= end < stop + MAX_SEGMENT_NS:
            continue
        out.append((stop, end))
        export = w.export_wall_s
        if export is not None and 0 < export < 3600:
            lo = end + int(YIELD_S * 1e9)
            out.append((lo, lo + int(export * 1e9)))
    return sorted(out)


def _outside(pieces: list[_Piece], holds: list[tuple[int, int]]) -> tuple[list[_Piece], int]:
    """``pieces`` with the ``holds`` cut out, and the thread-ns cut."""
    if not holds:
        return pieces, 0
    out: list[_Piece] = []
    cut = 0
    for p in pieces:
        parts = [(p.start_ns, p.end_ns)]
        for a, b in holds:
            if b <= p.start_ns or a >= p.end_ns:
                continue
            parts = [q for lo, hi in parts for q in ((lo, min(hi, a)), (max(lo, b), hi)) if q[1] > q[0]]
        kept = sum(hi - lo for lo, hi in parts)
        cut += p.end_ns - p.start_ns - kept
        out.extend(replace(p, start_ns=lo, end_ns=hi) for lo, hi in parts)
    return out, cut


def _calibrate(pieces: list[_Piece], usage: dict[int, ThreadUsage]) -> tuple[list[_Piece], int]:
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


def _split(pieces: list[_Piece], share: dict[int, float], chosen: Callable[[_Piece], bool],
           head: Callable[[_Piece], _Piece], tail: Callable[[_Piece], _Piece]) -> list[_Piece]:
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


def _ran_through_futex(pieces: list[_Piece], usage: dict[int, ThreadUsage]) -> tuple[list[_Piece], int]:
    """The reverse of _calibrate: a thread read asleep in a futex (``wait.gil``) whose /proc CPU time
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


def _idle_loops(pieces: list[_Piece]) -> list[_Piece]:
    """An event loop that itself ran (almost) nothing was not serving those connections: they
    are idle keep-alive ones, and its waits are waiting for work."""
    ran: dict[int, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    for p in pieces:
        total[p.tid] += p.end_ns - p.start_ns
        if p.kind in ON_CPU:
            ran[p.tid] += p.end_ns - p.start_ns
    idle = {t for t in total if ran[t] < LOOP_MIN_RUN * total[t]}
    return [replace(p, kind="idle.work") if p.kind == "await" and p.tid in idle else p for p in pieces]


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


def _value(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def _unbatched(signals: dict[str, Signal]) -> bool:
    workers = _value(signals, "cpu.model_workers")
    if not workers:  # no thread busy with model work: nothing for requests to queue behind
        return False
    batch = _value(signals, "torch.model_batch_p50")
    if batch is None or batch > UNBATCHED_MAX_BATCH:
        return False
    queue, model = _value(signals, "spans.stage_share_pct[queue]"), _value(signals, "spans.stage_share_pct[model]")
    if queue is not None and model:  # stage spans say it: requests wait for the worker longer than it serves them
        return queue >= model
    in_flight = next((v for v in (_value(signals, "spans.in_flight_mean"), _value(signals, "tcp.in_flight_mean"))
                      if v is not None), None)
    return in_flight is not None and in_flight >= UNBATCHED_MIN_IN_FLIGHT


def _model_kinds(signals: dict[str, Signal]) -> dict[str, TermKind]:
    """``{"cpu.compute": cpu.memory}`` when a CPU-only torch trace (no GPU kernel groups) spent at
    least CPU_MEMORY_BOUND_TIME_PCT of its op time in calls of low arithmetic intensity."""
    low = _value(signals, "kernels.low_intensity_time_pct")
    on_gpu = _value(signals, "kernels.group_share_pct[compute]") is not None
    if low is None or on_gpu or low < CPU_MEMORY_BOUND_TIME_PCT:
        return {}
    return {"cpu.compute": KINDS["cpu.memory"]}


def _queued(wait: str, waited_s: float, model_s: float) -> bool:
    """Waits behind model work that make a queue: handler threads (``handoff``) in QUEUED_MIN worker
    equivalents, or an event loop (``await``: one thread for all its requests) AWAITED_MIN of it."""
    if wait == "handoff":
        return waited_s >= QUEUED_MIN * model_s
    return wait == "await" and waited_s >= AWAITED_MIN * model_s


def thread_account(bundle: Bundle, signals: dict[str, Signal]) -> Account | None:
    """The thread-time account, or None without py-spy stacks on the Unix clock."""
    pieces, dropped = _pieces(bundle)
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
    kinds = _model_kinds(signals)
    for kind, s in own.items():
        k = kinds.get(kind, KINDS[kind])
        terms.append(_term(k, k.kind, k.label, s, total, f"{s:.2f} of {total:.2f} thread-s"))
    unbatched = _unbatched(signals)
    merged: dict[str, tuple[TermKind, str, float, str]] = {}
    for (wait, kind), s in attributed.items():
        target = kinds.get(kind, KINDS[kind])
        what = {"lock": "lock waits", "handoff": "waits on other threads (queue, event, result)",
                "await": "an event loop awaiting with requests in flight"}[wait]
        if kind == "cpu.compute" and unbatched and _queued(wait, s, own.get("cpu.compute", 0.0)):
            k, key, label = UNBATCHED, UNBATCHED.kind, UNBATCHED.label
        else:
            key = f"{wait}>{kind}"
            # a lock is the service's own code (a pool of one, a global lock): the quadrant is what
            # its holders do, the first place to act is the lock
            k = replace(target, layer=Layer.SERVICE, rule_id="secondary.lock_contention") if wait == "lock" \
                and target.quadrant is not None else target
            label = f"{WAIT_NAMES[wait]} wait, the other threads meanwhile: {target.label}"
        prev = merged.get(key)
        merged[key] = (k, label, s + (prev[2] if prev else 0.0),
                       f"{what} while other threads were in: {target.label} (same {BIN_NS // 1_000_000} ms bins)")
    for key, (k, label, s, why) in merged.items():
        terms.append(_term(k, key, label, s, total, f"{s:.2f} of {total:.2f} thread-s: {why}"))
    terms.sort(key=lambda t: -t.share)
    notes = [f"{threads} thread(s) accounted"]
    calibrated = dropped.pop("calibrated", 0)
    futex_ran = dropped.pop("futex_readings_ran", 0)
    if futex_ran:
        notes.append(f"{futex_ran} thread(s) read asleep in a futex used the CPU time of running through those "
                     "readings (/proc CPU time): that part counted as what their stacks show, not as GIL waits")
    held_ms = dropped.pop("profiler_hold_ms", 0)
    if held_ms:
        notes.append(f"{held_ms / 1e3:.2f} thread-s inside the agent's torch profiler holds (stop and export) "
                     "left out: the observer held the target's threads then (the report's cost line says it)")
    io_unseen = dropped.pop("io_frames_without_io_waits", 0)
    if io_unseen:
        notes.append(f"{io_unseen} socket/file stack(s) without a /proc reading counted as lock/GIL waits: the "
                     "kernel never saw the target's threads in an IO wait")
    if calibrated:
        notes.append(f"{calibrated} thread(s) ran less than py-spy sampled them running (/proc CPU time): "
                     "the rest counted as lock waits")
    if dropped:
        notes.append("left out: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(dropped.items())))
    if left_out:
        notes.append(f"{left_out} thread(s) that only waited for work (listeners, idle pools) left out")
    return Account("threads", "sampled thread-time of the target", "thread-s", total, tuple(terms), tuple(notes),
                   SRC)


def _term(k: TermKind, kind: str, label: str, s: float, total: float, evidence: str) -> AccountTerm:
    return AccountTerm(kind, label, s / total, s, k.quadrant, k.layer, evidence, k.rule_id)


__all__ = ["thread_account"]
