"""Process and host CPU signals from the process collector's cumulative counters (psutil, /proc).

All rates are differences of cumulative counters between the first and last record, divided by
the wall time between them. CPU percentages follow top's convention: 100% = one core busy.
"Demand" adds the time a thread was runnable but waiting for a CPU (schedstat): on a saturated
host, utilisation understates what the target would use, demand does not.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from diagnose.bundle.counters import HostCpu, host_cpu, process_cpu_s
from diagnose.bundle.records import ProcessReading, ThreadNameRecord
from diagnose.bundle.records.manifest import TARGET_EXITED
from diagnose.model import Signal, missing
from diagnose.signals.threads import ThreadUsage, thread_usage

SRC = "process collector (psutil"
SCHED = "process collector (/proc/<pid>/task/*/schedstat"
# Thread-wait classes counted as "blocked on work in progress" (io, lock) vs parked (sleep, event).
BLOCKING = ("io_wait", "lock_wait")


@dataclass
class ProcessSummary:
    """Reduced process stream: what signals and the thread table need."""

    records: int
    elapsed_s: float
    cpu_s: float
    ncpu: int
    threads: dict[int, ThreadUsage]
    comm: dict[int, str]
    host: HostCpu | None  # None: no host CPU time between the first and last record
    io_read_bytes: float | None
    io_write_bytes: float | None
    rss_max_bytes: float
    connections_max: int | None
    tcp_accepted: tuple[int, ...] = ()  # per connections reading: accepted connections on listening ports
    children_cpu_s: float | None = None  # with --subprocesses: CPU of all descendants over the capture


def listening_ports(records: Iterable[ProcessReading]) -> set[int]:
    """TCP ports the target listened on in any PROCESS reading (malformed entries left out)."""
    return {p for r in records if r.tcp is not None for p in r.tcp.listening_ports}


def summarize(records: list[ProcessReading], names: Iterable[ThreadNameRecord]) -> ProcessSummary | None:
    """Reduce PROCESS readings (time-ordered); None with fewer than two readings with CPU times."""
    timed = [(r, cpu) for r in records if (cpu := process_cpu_s(r)) is not None]
    if len(timed) < 2:
        return None
    (first, cpu0), (last, cpu1) = timed[0], timed[-1]
    conns = [r.connections for r in records if r.connections is not None]
    return ProcessSummary(
        records=len(records),
        elapsed_s=(last.t_ns - first.t_ns) / 1e9,
        cpu_s=cpu1 - cpu0,
        ncpu=last.ncpu or 1,
        threads=thread_usage(records),
        comm={n.tid: n.comm or "" for n in names},
        host=host_cpu(first.sys_cpu_s, last.sys_cpu_s),
        io_read_bytes=_diff(first.io_read_bytes, last.io_read_bytes),
        io_write_bytes=_diff(first.io_write_bytes, last.io_write_bytes),
        rss_max_bytes=max(r.rss_bytes or 0 for r in records),
        connections_max=max(conns) if conns else None,
        tcp_accepted=tuple(n for r in records if (n := r.accepted) is not None),
        children_cpu_s=_children_cpu(records),
    )


def _children_cpu(records: list[ProcessReading]) -> float | None:
    """Summed CPU seconds of descendant processes between their first and last reading."""
    if all(r.children is None for r in records):
        return None
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for rec in records:
        for c in rec.children or ():
            first.setdefault(c.pid, c.cpu_s)
            last[c.pid] = c.cpu_s
    return sum(last[p] - first[p] for p in last)


def _diff(a: int | None, b: int | None) -> float | None:
    return b - a if a is not None and b is not None else None


def process_signals(s: ProcessSummary | None, reason: str, python_tids: set[int] | None,
                    parked_at: Callable[[int, int], bool] = lambda tid, t_ns: False) -> dict[str, Signal]:
    """CPU, demand, thread-wait and host signals.

    ``python_tids``: tids py-spy saw (None without py-spy). ``parked_at(tid, t_ns)``: whether py-spy
    saw that thread waiting for work then (e.g. a keep-alive read of the next request); such
    kernel waits are not counted as blocked work.
    """
    if s is not None and s.elapsed_s > 0 and s.cpu_s < 0:  # a counter that only grows went back: not a reading
        reason = (f"the process CPU counter went backwards ({s.cpu_s:+.1f} s between the first and last reading): "
                  "the readings are not of one process")
    if s is None or s.elapsed_s <= 0 or s.cpu_s < 0:
        names = ("cpu.process_util_pct", "cpu.process_demand_pct", "cpu.max_thread_util_pct",
                 "cpu.python_busy_pct", "threads.blocked_io_share_pct", "sys.cpu_util_pct")
        return {n: missing(n, "%", SRC + ")", reason) for n in names}
    out = _util_signals(s, python_tids)
    out.update(_demand_signals(s, python_tids))
    out.update(_wait_signals(s, parked_at))
    out.update(_host_signals(s))
    out.update(tcp_signals(s))
    return out


def target_alive_signal(end_reason: str | None, span: tuple[int, int] | None) -> Signal:
    """``capture.target_alive_s``: how long (s) the target lived into the capture, from the
    manifest (started_ns to ended_ns, the capture ending as it exited); missing when it outlived it."""
    name, src = "capture.target_alive_s", "manifest (end_reason, started_ns, ended_ns)"
    if end_reason != TARGET_EXITED or span is None:
        return missing(name, "s", src, "the target outlived the capture")
    return Signal(name, (span[1] - span[0]) / 1e9, "s", src)


def tcp_signals(s: ProcessSummary) -> dict[str, Signal]:
    """In-flight requests seen from outside: connections accepted on the target's listening TCP
    sockets (psutil over /proc/<pid>/net/tcp{,6} x the process's fds), ~1 Hz. An idle keep-alive
    connection counts as well, so this bounds in-flight from above."""
    src = SRC + " TCP scan: ESTABLISHED on a LISTEN port, ~1 Hz)"
    names = ("tcp.in_flight_mean", "tcp.in_flight_max")
    if not s.tcp_accepted:
        why = "no TCP connection readings (older bundle, or psutil may not list the target's sockets)"
        return {n: missing(n, "connections", src, why) for n in names}
    return {names[0]: Signal(names[0], sum(s.tcp_accepted) / len(s.tcp_accepted), "connections", src),
            names[1]: Signal(names[1], float(max(s.tcp_accepted)), "connections", src)}


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole


def _util_signals(s: ProcessSummary, python_tids: set[int] | None) -> dict[str, Signal]:
    util = {tid: _pct(t.cpu_s, s.elapsed_s) for tid, t in s.threads.items()}
    out = {
        "cpu.process_util_pct": Signal("cpu.process_util_pct", _pct(s.cpu_s, s.elapsed_s), "%",
                                       SRC + " cpu_times; 100% = one core)"),
        "cpu.cores_util_pct": Signal("cpu.cores_util_pct", _pct(s.cpu_s, s.elapsed_s) / s.ncpu, "%",
                                     f"{SRC} cpu_times / {s.ncpu} logical CPUs)"),
        "cpu.busy_threads": Signal("cpu.busy_threads", float(sum(u >= 50.0 for u in util.values())),
                                   "threads", SRC + " threads with >= 50% of a core)"),
    }
    if util:
        busiest = max(sorted(util), key=util.__getitem__)
        out["cpu.max_thread_util_pct"] = Signal(
            "cpu.max_thread_util_pct", util[busiest], "%",
            f"{SRC} /proc/<pid>/task/{busiest}/stat, thread {busiest} {s.comm.get(busiest, '')})".replace(" )", ")"))
    no_pyspy = "py-spy stacks unavailable: cannot tell Python threads from native ones"
    total = sum(t.cpu_s for t in s.threads.values())
    for name, value, src, why in (
        ("cpu.python_util_pct",
         None if python_tids is None else sum(u for tid, u in util.items() if tid in python_tids),
         " summed CPU of the threads py-spy saw)", no_pyspy),
        ("cpu.native_thread_cpu_share_pct",
         None if python_tids is None or total <= 0
         else _pct(sum(t.cpu_s for tid, t in s.threads.items() if tid not in python_tids), total),
         " CPU of threads py-spy never saw, e.g. OpenMP/MKL/oneDNN workers)",
         no_pyspy if python_tids is None else "the target used no CPU"),
    ):
        out[name] = Signal(name, value, "%", SRC + src, None if value is not None else why)
    return out


def _demand_signals(s: ProcessSummary, python_tids: set[int] | None) -> dict[str, Signal]:
    """Run + run-queue time per thread (schedstat); falls back to utilisation without schedstat."""
    have = {t.tid: st for t in s.threads.values() if (st := t.schedstat()) is not None}
    if not have:
        src, demand = SRC + " cpu_times; no schedstat on this kernel: utilisation used as demand)", {
            tid: _pct(t.cpu_s, s.elapsed_s) for tid, t in s.threads.items()}
        out: dict[str, Signal] = {}
    else:
        src = SCHED + ": ns running + ns runnable waiting for a CPU; 100% = one core)"
        demand = {tid: _pct((run_ns + wait_ns) / 1e9, s.elapsed_s) for tid, (run_ns, wait_ns, _) in have.items()}
        wait = sum(wait_ns for _, wait_ns, _ in have.values())
        total = sum(run_ns + wait_ns for run_ns, wait_ns, _ in have.values())
        slices = sum(n for _, _, n in have.values())
        out = {
            "cpu.runqueue_wait_pct": Signal("cpu.runqueue_wait_pct", _pct(wait, total) if total else 0.0, "%",
                                            SCHED + ": share of the target's CPU demand spent waiting for a core)"),
            "cpu.ctx_switches_per_s": Signal("cpu.ctx_switches_per_s", slices / s.elapsed_s,
                                             "1/s", SCHED + ": timeslices summed over all threads)"),
        }
    out["cpu.process_demand_pct"] = Signal("cpu.process_demand_pct", sum(demand.values()), "%", src)
    if demand:
        out["cpu.max_thread_demand_pct"] = Signal("cpu.max_thread_demand_pct", max(demand.values()), "%", src)
    out["cpu.python_busy_pct"] = _python_busy(s, python_tids)
    return out


def _python_busy(s: ProcessSummary, python_tids: set[int] | None) -> Signal:
    """Share of readings in which at least one Python thread was running or runnable (state R).

    Bounded by 100% like the GIL itself: near 100% the interpreter always had work, even when
    a saturated host gave it less CPU than that.
    """
    name, src = "cpu.python_busy_pct", ("process collector (/proc/<pid>/task/*/stat: readings with a "
                                       "Python thread running or runnable; ~100% = the GIL never idles)")
    if python_tids is None:
        return missing(name, "%", src, "py-spy stacks unavailable: cannot tell Python threads from native ones")
    ticks = {r.t_ns for t in s.threads.values() for r in t.readings}
    busy = {r.t_ns for tid in python_tids if tid in s.threads
            for r in s.threads[tid].readings if r.cls == "running"}
    return Signal(name, _pct(len(busy), len(ticks)) if ticks else None, "%", src,
                  None if ticks else "no thread readings")


def _wait_signals(s: ProcessSummary, parked_at: Callable[[int, int], bool]) -> dict[str, Signal]:
    """Shares of thread readings blocked in IO or on locks, among readings of work in progress
    (running or blocked), leaving out kernel sleeps/event waits and py-spy-parked moments."""
    counts = {"running": 0, "io_wait": 0, "lock_wait": 0}
    for tid, t in s.threads.items():
        for r in t.readings:
            if r.cls in counts and not (r.cls in BLOCKING and parked_at(tid, r.t_ns)):
                counts[r.cls] += 1
    working = sum(counts.values())
    readings = sum(len(t.readings) for t in s.threads.values())
    stopped = sum(r.cls == "stopped" for t in s.threads.values() for r in t.readings)
    src = "process collector (/proc/<pid>/task/*/stat state + wchan, share of readings of work in progress)"
    out = {"threads.stopped_share_pct": Signal(
        "threads.stopped_share_pct", _pct(stopped, readings) if readings else 0.0, "%",
        "process collector (/proc/<pid>/task/*/stat state T/t: stopped or traced)")}
    for name, cls in (("threads.blocked_io_share_pct", "io_wait"), ("threads.blocked_lock_share_pct", "lock_wait")):
        out[name] = (Signal(name, _pct(counts[cls], working), "%", src) if working else
                     missing(name, "%", src, "no thread was running or blocked on IO/locks: the target was idle"))
    return out


def _host_signals(s: ProcessSummary) -> dict[str, Signal]:
    h = s.host
    src = "process collector (psutil cpu_times, host)"
    if h is None:
        return {}
    out = {"sys.cpu_util_pct": Signal("sys.cpu_util_pct", h.busy_pct, "%", src)}
    for name, value, field in (("sys.iowait_pct", h.iowait_pct, "iowait"), ("sys.steal_pct", h.steal_pct, "steal")):
        out[name] = (Signal(name, value, "%", src) if value is not None
                     else missing(name, "%", src, f"{field} not reported on this OS"))
    for name, val, unit in (
        ("io.read_bytes_per_s", s.io_read_bytes, "bytes/s"),
        ("io.write_bytes_per_s", s.io_write_bytes, "bytes/s"),
    ):
        out[name] = Signal(name, None if val is None else val / s.elapsed_s, unit,
                           "process collector (psutil io_counters)",
                           None if val is not None else "io_counters not readable for this process")
    if s.children_cpu_s is not None:
        out["cpu.children_util_pct"] = Signal(
            "cpu.children_util_pct", 100.0 * s.children_cpu_s / s.elapsed_s, "%",
            "process collector (psutil cpu_times of descendants, --subprocesses; 100% = one core)")
    out["mem.rss_max_bytes"] = Signal("mem.rss_max_bytes", float(s.rss_max_bytes), "bytes",
                                      "process collector (psutil memory_info)")
    return out


__all__ = ["ProcessSummary", "process_signals", "summarize"]
