"""Process collector: psutil and /proc readings of the target and the host at ``process_hz``.

Stream PROCESS (diagnose/bundle/records/process.py ProcessReading), one record per tick with *cumulative*
counters (CPU seconds, context switches, IO bytes) so analysis can difference them over any window:
``t_ns`` (Unix ns), ``cpu_user_s``/``cpu_system_s``, ``rss_bytes``, ``num_threads`` (/proc/<pid>/stat),
``io_read_bytes``/``io_write_bytes`` (/proc/<pid>/io; collectors/task_files.py ProcessFiles),
``threads``: ``[tid, user_s, system_s, state, wchan, run_ns, wait_ns, slices]`` per OS thread (state
and kernel wait channel from /proc/<pid>/task/<tid>/stat and ``wchan``; cumulative ns on a CPU, ns
runnable but waiting for a CPU, and timeslices from ``schedstat``; the last three are null where the
kernel has no schedstat; collectors/task_files.py TaskFiles), ``sys_cpu_s`` (psutil ``cpu_times``:
user, system, idle, iowait, steal... cumulative s) and ``ncpu``; every ``CONN_EVERY`` ticks:
``ctx_vol``/``ctx_invol`` (/proc/<pid>/status), the host's ``loadavg`` and ``disk``/``net``
cumulative bytes, ``connections`` (the target's TCP sockets) and ``tcp`` ({listening_ports,
accepted}: connections accepted on the target's listening sockets; collectors/tcp_scan.py, in the
target's network namespace); ``children`` (with ``--subprocesses``). Thread names go once per new
tid into THREADS.
"""
from __future__ import annotations

import os
import time
from typing import Any

import psutil

from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import PROCESS, THREADS
from diagnose.collectors.base import CaptureOptions, Probe, ThreadedCollector
from diagnose.collectors.task_files import ProcessFiles, TaskFiles, read_path
from diagnose.collectors.tcp_scan import TcpScanner
from diagnose.model import Target

GAP_PERIODS = 3.0  # a reading missing this many intervals is a gap (as diagnose/signals/process_gaps.py)

CONN_EVERY = 10  # the TCP scan and the host's disk/net/load readings (unused by the analysis): ~1 Hz


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
        self._tcp = TcpScanner(target.pid)
        self._tasks = TaskFiles(target.pid)
        self._files = ProcessFiles(target.pid)
        self._ncpu = psutil.cpu_count()
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
        rec.update(self._read_system(self._tick_no % CONN_EVERY == 0))
        rec["period_s"] = self.period_s  # the interval it was read at (the budget may change it)
        self._note_gap(rec["t_ns"])
        self._out.write(rec)
        self._records += 1
        self._tick_no += 1
        return True

    def _read_process(self) -> dict[str, Any]:
        p = self._proc
        rec: dict[str, Any] = {"t_ns": time.time_ns(), **self._files.reading()}
        rec["threads"] = self._threads(p)
        if self._tick_no % CONN_EVERY == 0:
            rec.update(self._files.context_switches())
            rec.update(self._read_tcp(p))
        if self._children:
            rec["children"] = self._read_children(p)
        return rec

    def _read_tcp(self, p: psutil.Process) -> dict[str, Any]:
        try:
            return self._tcp.read()
        except psutil.AccessDenied:
            return {}

    def _threads(self, p: psutil.Process) -> list[list[Any]]:
        rows = self._tasks.rows(self._tasks.task_ids())
        for row in rows:
            tid = row[0]
            if tid not in self._named:
                self._named.add(tid)
                comm = read_path(f"/proc/{p.pid}/task/{tid}/comm")
                self._names.write({"tid": tid, "comm": comm, "first_seen_ns": time.time_ns()})
        return rows

    def _teardown(self) -> None:
        self._tasks.close()
        self._files.close()

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

    def _read_system(self, all_fields: bool) -> dict[str, Any]:
        """The host's CPU times every reading (the live view and the exports difference
        consecutive ones); its load and disk/net bytes with ``all_fields`` only."""
        rec: dict[str, Any] = {"sys_cpu_s": psutil.cpu_times()._asdict(), "ncpu": self._ncpu}
        if not all_fields:
            return rec
        if hasattr(os, "getloadavg"):
            rec["loadavg"] = list(os.getloadavg())
        disk = psutil.disk_io_counters()
        if disk is not None:
            rec["disk"] = {"read_bytes": disk.read_bytes, "write_bytes": disk.write_bytes}
        net = psutil.net_io_counters()
        if net is not None:
            rec["net"] = {"bytes_sent": net.bytes_sent, "bytes_recv": net.bytes_recv}
        return rec
