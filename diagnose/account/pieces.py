"""Thread-time pieces: py-spy's segments of the target's own threads joined with the kernel's readings.

py-spy's stacks (which code) are joined with the process collector's readings (/proc state,
wchan, schedstat: whether the thread ran, slept in a futex, or waited for a core). On-CPU time
goes by frame category; a thread runnable but not on a core (schedstat run-queue time) waits
for the host; Python code asleep in a futex waits for the GIL. What the bundle holds is read
through the signal sources (signals/cpu.py, threads.py, thread_time.py); pure.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from diagnose.account.kinds import CATEGORY_KIND, GIL_WAITERS, ON_CPU
from diagnose.bundle import Bundle
from diagnose.bundle.records import PyspyWindowRecord
from diagnose.catalogs.frames import SYNC_INTERNALS, WORK_LOOPS, Category
from diagnose.model import STOPPED
from diagnose.signals.cpu import (
    KERNEL_TOLERANCE_NS,
    load_sources,
    pyspy_windows,
    resolve_io,
    stack_category,
)
from diagnose.signals.stacks import Frame
from diagnose.signals.thread_time import (
    MAX_SEGMENT_NS,
    OpenRequests,
    agent_ran,
    connection_readings,
    open_requests,
)
from diagnose.signals.threads import KernelTimeline, Reading, ThreadUsage
from diagnose.signals.timeline import AGENT_THREAD_PREFIX

IN_FLIGHT_TOLERANCE_NS = 1_500_000_000  # TCP readings come at ~1 Hz
_EVENT_LOOP = re.compile(r"^\w*\.?(run_forever|_run_once) \(.*asyncio/")
MIN_READINGS, IO_READINGS_MIN_SHARE = 20, 0.05
_WORK_LOOPS = tuple(re.compile(p) for p in WORK_LOOPS)
_SYNC = re.compile(SYNC_INTERNALS)
_QUEUE_GETS = frozenset({"Queue.get", "SimpleQueue.get", "LifoQueue.get", "PriorityQueue.get"})
BLOCKED_CLASSES = frozenset({"io_wait", "lock_wait", "sleep"})  # kernel readings of a thread held in a call


@dataclass(frozen=True)
class Piece:
    tid: int
    start_ns: int
    end_ns: int
    kind: str  # a KINDS key, or one of WAITS (attributed later)
    ran: str | None = None  # for a ``wait.gil`` piece: the on-CPU kind its stack shows


def _requests_open(readings: tuple[list[int], list[int]], t_ns: int) -> bool:
    times, counts = readings
    i = bisect.bisect_left(times, t_ns)
    near = [j for j in (i - 1, i) if 0 <= j < len(times) and abs(times[j] - t_ns) <= IN_FLIGHT_TOLERANCE_NS]
    return any(counts[j] > 0 for j in near)


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


def segment_pieces(bundle: Bundle, usage: dict[int, ThreadUsage]) -> tuple[list[Piece], dict[str, int]]:
    """Every py-spy segment of the target's own threads, as (tid, time, kind) on the Unix clock,
    clipped to its window; on-CPU segments split into the part spent running and the part waiting
    for a core (``usage``: the /proc readings, signals/threads.py). Also counts what was left out
    and why (data quality)."""
    kernel = KernelTimeline(usage)
    core_wait = _core_wait(usage)
    sources = load_sources(bundle)
    in_flight = connection_readings(bundle)
    open_spans = open_requests(bundle)
    windows = pyspy_windows(bundle)
    names = {s.tid: s.thread for w in windows for s in (w.segments or ()) if s.thread != "?"}
    skip_agent = agent_ran(bundle)
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
            if not w.record.blocking and (reading.cls == STOPPED if reading is not None
                                          else kernel.stopped_through(seg.tid, lo, hi)):
                out.append(Piece(seg.tid, lo, hi, STOPPED))
                continue
            shown = stack_category(bundle, seg.frames, sources)
            cat = resolve_io(shown, reading)
            if cat == Category.IO_WAIT and reading is None and not io_seen:
                dropped["io_frames_without_io_waits"] += 1
                cat = Category.LOCK_WAIT
            if cat == Category.LOCK_WAIT and shown in (Category.IO_WAIT, Category.IO_MAYBE):
                # asleep after a socket/file call, no lock in its stack: taking the GIL back (attribute()
                # calls it a lock wait where nobody held the GIL meanwhile)
                out.append(Piece(seg.tid, lo, hi, "wait.gil"))
                continue
            kind = _kind(cat, reading)
            if (cat == Category.IDLE or kind == "idle.work") and _event_loop(seg.frames) and open_spans is not None:
                # request spans say when requests were open: the loop awaited them then, and waited for
                # work the rest of the time (accepted connections count idle keep-alive ones too)
                out.extend(Piece(seg.tid, a, b, k) for a, b, k in _split_open(lo, hi, open_spans))
                continue
            if (cat == Category.IDLE or kind == "idle.work") and _event_loop(seg.frames) \
                    and _requests_open(in_flight, (lo + hi) // 2):
                # an event loop with requests in flight awaits their sockets (upstream calls, slow
                # clients) or an executor: attributed like a handoff, to IO when nothing else runs
                out.append(Piece(seg.tid, lo, hi, "await"))
                continue
            if cat == Category.IDLE or (cat == Category.HANDOFF and _in_work_loop(seg.frames)):
                out.append(Piece(seg.tid, lo, hi, "idle.work"))
                continue
            if cat in (Category.HANDOFF, Category.LOCK_WAIT):
                out.append(Piece(seg.tid, lo, hi, "handoff" if cat == Category.HANDOFF else "lock"))
                continue
            if kind == "wait.gil":
                out.append(Piece(seg.tid, lo, hi, kind, CATEGORY_KIND.get(cat, "cpu.python")))
                continue
            f_core = core_wait.get(seg.tid, 0.0) if kind in ON_CPU else 0.0
            cut = hi - int((hi - lo) * f_core)
            if cut > lo:
                out.append(Piece(seg.tid, lo, cut, kind))
            if hi > cut:
                out.append(Piece(seg.tid, cut, hi, "wait.core"))
    return out, dropped


__all__ = ["BLOCKED_CLASSES", "OpenRequests", "Piece", "segment_pieces"]
