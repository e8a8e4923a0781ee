"""Process collector: psutil and /proc readings of the target and the host at ``process_hz``.

Stream PROCESS (diagnose/bundle/records/process.py ProcessReading), one record per tick with *cumulative*
counters (CPU seconds, context switches, IO bytes) so analysis can difference them over any window:
``t_ns`` (Unix ns), ``cpu_user_s``/``cpu_system_s`` (psutil ``cpu_times``), ``rss_bytes``,
``num_threads``, ``ctx_vol``/``ctx_invol``, ``io_read_bytes``/``io_write_bytes`` (psutil
``io_counters``, /proc/<pid>/io), ``threads``: ``[tid, user_s, system_s, state, wchan, run_ns,
wait_ns, slices]`` per OS thread (state and kernel wait channel from /proc/<pid>/task/<tid>/stat and
``wchan``; cumulative ns on a CPU, ns runnable but waiting for a CPU, and timeslices from
``schedstat``; the last three are null where the kernel has no schedstat),
``sys_cpu_s`` (psutil ``cpu_times``: user, system, idle, iowait, steal... cumulative s),
``loadavg``, ``disk``/``net`` cumulative bytes, ``connections`` and ``tcp`` ({listening_ports, accepted}:
connections accepted on the target's listening sockets), every ``CONN_EVERY`` ticks,
``children`` (with ``--subprocesses``). Thread names go once per new tid into THREADS.
"""
from __future__ import annotations

import os
import time
from typing import Any

import psutil

from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import PROCESS, THREADS
from diagnose.collectors.base import CaptureOptions, Probe, ThreadedCollector
from diagnose.model import Target

GAP_PERIODS = 3.0  # a reading missing this many intervals is a gap (as diagnose/signals/process_gaps.py)

CONN_EVERY = 10  # net_connections walks every fd; keep it at ~1 Hz


def _read(path: str) -> str | None:
    """A small /proc file's text (bytes read with one os.read: a text-mode open costs ~5x more,
    which at 10 Hz on a 40-thread target was most of the collector's CPU)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


CLK_TCK = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/task/<tid>/stat utime and stime are in these ticks


def accepted_connections(conns: list[Any]) -> dict[str, Any]:
    """Connections the target accepted on its own listening TCP sockets (psutil joins
    /proc/<pid>/net/tcp{,6} with the process's socket fds): an outside view of in-flight requests.
    An idle keep-alive connection counts too: this is an upper bound, cross-checked with spans."""
    listening = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    accepted = sum(1 for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.raddr
                   and c.laddr.port in listening)
    return {"listening_ports": sorted(listening)[:16], "accepted": accepted}


def thread_row(pid: int, tid: int) -> list[Any] | None:
    """``[tid, user_s, system_s, state, wchan, run_ns, wait_ns, slices]`` of one thread from its
    /proc/<pid>/task/<tid> stat (fields 3, 14, 15: state, utime, stime in CLK_TCK ticks), wchan
    and schedstat; None when the thread is gone. The command name in stat may hold spaces and
    parentheses (the target chose it): the fields are counted after its last ``)``."""
    base = f"/proc/{pid}/task/{tid}/"
    stat = _read(base + "stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    try:
        user_s, sys_s = int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK
    except (IndexError, ValueError):
        return None
    wchan = _read(base + "wchan")
    sched = (_read(base + "schedstat") or "").split()
    run_wait_slices = [int(v) for v in sched[:3]] if len(sched) >= 3 and all(v.isdigit() for v in sched[:3]) \
        else [None, None, None]
    return [tid, user_s, sys_s, fields[0], wchan if wchan not in (None, "", "0") else None, *run_wait_slices]


def task_ids(pid: int) -> list[int]:
    """The target's thread ids (/proc/<pid>/task). Raises psutil.NoSuchProcess when it is gone."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    except OSError:
        return []


class ProcessCollector(ThreadedCollector):
    name = "process"

    def __init__(self) -> None:
        super().__init__()
        self._records = 0
        self._named: set[int] = set()
        self._last_ns: int | None = None
        self._gaps = 0
        self._gap_max_s = 0.0

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        try:
            psutil.Process(target.pid).cpu_times()
        except psutil.AccessDenied:
            return Probe(False, f"psutil may not read pid {target.pid}: run as its user or root")
        except psutil.NoSuchProcess:
            return Probe(False, f"pid {target.pid} is gone")
        return Probe(True)

    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self.period_s = 1.0 / max(0.5, options.process_hz)
        self._proc = psutil.Process(target.pid)
        self._children = options.subprocesses
        self._out = bundle.stream(PROCESS.name)
        self._names = bundle.stream(THREADS.name)
        self._streams = [PROCESS.name, THREADS.name]
        self._tick_no = 0

    def counts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self._records}
        if self._gaps:
            out["gaps_over_3x_interval"] = self._gaps
            out["gap_max_s"] = round(self._gap_max_s, 2)
        return out

    def _note_gap(self, t_ns: int) -> None:
        """A reading missing for more than GAP_PERIODS intervals (diagnose/signals/process_gaps.py)."""
        if self._last_ns is not None:
            gap_s = (t_ns - self._last_ns) / 1e9
            if gap_s > GAP_PERIODS * self.period_s:
                self._gaps += 1
                self._gap_max_s = max(self._gap_max_s, gap_s)
        self._last_ns = t_ns

    def adjust(self, rates: Any) -> None:
        self.period_s = 1.0 / max(0.5, float(rates.process_hz))

    def tick(self) -> bool:
        try:
            rec = self._read_process()
        except psutil.NoSuchProcess:
            self._partial_reason = "target exited during the capture"
            return False
        rec.update(self._read_system())
        rec["period_s"] = self.period_s  # the interval it was read at (the budget may change it)
        self._note_gap(rec["t_ns"])
        self._out.write(rec)
        self._records += 1
        self._tick_no += 1
        return True

    def _read_process(self) -> dict[str, Any]:
        p = self._proc
        with p.oneshot():
            t_ns = time.time_ns()
            cpu = p.cpu_times()
            ctx = p.num_ctx_switches()
            rec: dict[str, Any] = {
                "t_ns": t_ns,
                "cpu_user_s": cpu.user,
                "cpu_system_s": cpu.system,
                "rss_bytes": p.memory_info().rss,
                "num_threads": p.num_threads(),
                "ctx_vol": ctx.voluntary,
                "ctx_invol": ctx.involuntary,
            }
            try:
                io = p.io_counters()
                rec["io_read_bytes"], rec["io_write_bytes"] = io.read_bytes, io.write_bytes
            except (psutil.AccessDenied, AttributeError):
                pass
            rec["threads"] = self._threads(p)
        if self._tick_no % CONN_EVERY == 0:
            rec.update(self._read_tcp(p))
        if self._children:
            rec["children"] = self._read_children(p)
        return rec

    def _read_tcp(self, p: psutil.Process) -> dict[str, Any]:
        try:
            conns = p.net_connections(kind="tcp")
        except psutil.AccessDenied:
            return {}
        return {"connections": len(conns), "tcp": accepted_connections(conns)}

    def _threads(self, p: psutil.Process) -> list[list[Any]]:
        rows = []
        for tid in task_ids(p.pid):
            row = thread_row(p.pid, tid)
            if row is None:
                continue  # ended between the listing and the read
            rows.append(row)
            if tid not in self._named:
                self._named.add(tid)
                comm = _read(f"/proc/{p.pid}/task/{tid}/comm")
                self._names.write({"tid": tid, "comm": comm, "first_seen_ns": time.time_ns()})
        return rows

    def _read_children(self, p: psutil.Process) -> list[dict[str, Any]]:
        out = []
        for c in p.children(recursive=True):
            try:
                with c.oneshot():
                    ct = c.cpu_times()
                    out.append({
                        "pid": c.pid,
                        "name": c.name(),
                        "cpu_user_s": ct.user,
                        "cpu_system_s": ct.system,
                        "rss_bytes": c.memory_info().rss,
                        "num_threads": c.num_threads(),
                    })
            except psutil.Error:
                continue
        return out

    def _read_system(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"sys_cpu_s": psutil.cpu_times()._asdict(), "ncpu": psutil.cpu_count()}
        if hasattr(os, "getloadavg"):
            rec["loadavg"] = list(os.getloadavg())
        disk = psutil.disk_io_counters()
        if disk is not None:
            rec["disk"] = {"read_bytes": disk.read_bytes, "write_bytes": disk.write_bytes}
        net = psutil.net_io_counters()
        if net is not None:
            rec["net"] = {"bytes_sent": net.bytes_sent, "bytes_recv": net.bytes_recv}
        return rec
