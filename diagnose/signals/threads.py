"""Per-thread kernel view from the process collector: state, wait channel, CPU and run-queue time.

Sources: /proc/<pid>/task/<tid>/stat (state letter, utime/stime via psutil), ``wchan`` (the kernel
function a sleeping thread waits in) and ``schedstat`` (ns on a CPU, ns runnable but waiting for a
CPU, timeslices), read at ~10 Hz. Pure: input is the decoded PROCESS readings (ProcessReading).
"""
from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diagnose.bundle.counters import cpu_since, thread_cpu_s
from diagnose.catalogs.frames import WAIT_CHANNELS
from diagnose.model import STOPPED

if TYPE_CHECKING:
    from diagnose.bundle import Bundle
    from diagnose.bundle.records.process import ProcessReading


def wait_class(state: str | None, wchan: str | None) -> str:
    """Classify one reading: running, io_wait (incl. D state), or a WAIT_CHANNELS class."""
    if state == "R":
        return "running"
    if state in ("T", "t"):
        return STOPPED
    if state == "D":
        return "io_wait"
    if wchan:
        for cls, pattern in WAIT_CHANNELS:
            if re.search(pattern, wchan):
                return cls
        return "other_wait"
    return "unknown_wait"


@dataclass(frozen=True)
class Reading:
    """One thread at one tick. ``sys_share``: share of its CPU time since the previous reading
    spent in the kernel (None when it used no CPU in between)."""

    t_ns: int
    cls: str
    wchan: str | None
    sys_share: float | None


@dataclass
class ThreadUsage:
    """One thread over the capture: deltas between its first and last reading."""

    tid: int
    cpu_s: float = 0.0
    run_ns: int | None = None
    wait_ns: int | None = None
    slices: int | None = None
    readings: list[Reading] = field(default_factory=list)

    def schedstat(self) -> tuple[int, int, int] | None:
        """(run_ns, wait_ns, slices) deltas, or None where the kernel has no schedstat.
        run_ns + wait_ns: ns the thread ran or was runnable, its CPU demand even on a saturated host."""
        if self.run_ns is None or self.wait_ns is None or self.slices is None:
            return None
        return self.run_ns, self.wait_ns, self.slices

    def waits(self) -> Counter:
        return Counter(r.cls for r in self.readings)

    def dominant_state(self) -> str | None:
        """The most frequent state, with the most frequent kernel wait channel when waiting."""
        if not self.readings:
            return None
        cls = self.waits().most_common(1)[0][0]
        wchans = Counter(r.wchan for r in self.readings if r.cls == cls and r.wchan)
        return f"{cls} ({wchans.most_common(1)[0][0]})" if cls != "running" and wchans else cls


def thread_usage(records: list[ProcessReading]) -> dict[int, ThreadUsage]:
    """Fold time-ordered process readings into per-thread usage and readings."""
    threads: dict[int, ThreadUsage] = {}
    first: dict[int, tuple] = {}
    prev: dict[int, tuple[float, float]] = {}
    start_cpu = thread_cpu_s(records[0]) if records else {}
    for rec in records:
        used = cpu_since(start_cpu, thread_cpu_s(rec))
        for tid, user_s, sys_s, state, wchan, run_ns, wait_ns, slices in rec.threads:
            tu = threads.setdefault(tid, ThreadUsage(tid))
            # schedstat counters follow cpu_since's rule: a thread born during the capture from zero
            base = (run_ns, wait_ns, slices) if tid in start_cpu else (
                0 if run_ns is not None else None, 0 if wait_ns is not None else None,
                0 if slices is not None else None)
            f = first.setdefault(tid, base)
            tu.cpu_s = used[tid]
            if run_ns is not None and f[0] is not None:
                tu.run_ns, tu.wait_ns, tu.slices = run_ns - f[0], wait_ns - f[1], slices - f[2]
            pu, ps = prev.get(tid, (user_s, sys_s))
            du, ds = user_s - pu, sys_s - ps
            prev[tid] = (user_s, sys_s)
            share = ds / (du + ds) if du + ds > 0 else None
            tu.readings.append(Reading(rec.t_ns, wait_class(state, wchan), wchan, share))
    return threads


class KernelTimeline:
    """Nearest kernel reading of a thread at a given time (for joins with py-spy samples).

    A reading speaks for the segments within the caller's tolerance of it, or within 0.6 of the
    readings' median interval when that is wider (the overhead budget lowers the /proc rate on
    targets with many threads: 2.8 Hz readings still describe what lies between them)."""

    def __init__(self, threads: dict[int, ThreadUsage]):
        self._threads = threads
        self._t = {tid: [r.t_ns for r in tu.readings] for tid, tu in threads.items()}
        steps = [b - a for ts in self._t.values() for a, b in zip(ts, ts[1:]) if b > a]
        self.interval_tolerance_ns = int(0.6 * statistics.median(steps)) if steps else 0

    def at(self, tid: int, t_ns: int, tolerance_ns: int) -> Reading | None:
        """The reading nearest to ``t_ns`` if one lies within ``tolerance_ns`` (or the interval
        tolerance, whichever is wider), else None."""
        tolerance_ns = max(tolerance_ns, self.interval_tolerance_ns)
        times = self._t.get(tid)
        if not times:
            return None
        i = bisect.bisect_left(times, t_ns)
        best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t_ns))
        return self._threads[tid].readings[best] if abs(times[best] - t_ns) <= tolerance_ns else None

    def stopped_through(self, tid: int, lo_ns: int, hi_ns: int) -> bool:
        """True when the thread's readings in [lo_ns, hi_ns] and the nearest one on each side (where
        there is one) all found it stopped (state T/t), and there is one inside or one on each side.
        A stopped thread stays stopped until continued, and py-spy shows its frozen stack as one long
        segment: on a busy host the /proc readings (nice 19) leave gaps of 0.4-0.6 s, the segment's
        middle can lie outside ``at``'s tolerance, and the frozen stack was read as work."""
        times = self._t.get(tid)
        if not times:
            return False
        inside_from, after = bisect.bisect_left(times, lo_ns), bisect.bisect_right(times, hi_ns)
        if inside_from == after and (inside_from == 0 or after == len(times)):
            return False  # nothing inside, and a side without a reading: it may have been continued
        readings = self._threads[tid].readings[max(0, inside_from - 1):after + 1]
        return all(r.cls == STOPPED for r in readings)


def bundle_thread_usage(bundle: Bundle) -> dict[int, ThreadUsage]:
    """thread_usage of a bundle's process readings (time-ordered), computed once per bundle."""
    from diagnose.bundle.streams import PROCESS

    return bundle.derived("process.thread_usage", lambda: thread_usage(
        sorted(bundle.typed(PROCESS), key=lambda r: r.t_ns)))

