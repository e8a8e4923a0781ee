"""The target's threads read from /proc/<pid>/task/<tid>/{stat,wchan,schedstat}, and the target
itself from /proc/<pid>/{stat,io} (``ProcessFiles``), on descriptors kept open between readings.

Opening a /proc file costs about as much as reading it (the path walk through /proc and the task
lookup); a /proc/<pid>/task/<tid> file read again from offset 0 (pread) is generated afresh. A
thread's descriptors are closed when it leaves the task list; a read that fails (the
thread ended) drops them. Descriptors are kept for at most ``max_kept`` threads (a quarter of the
open-file limit, 3 per thread); threads past that are read by open/read/close each time.

The wait channel (the costliest file: the kernel unwinds the thread's stack) is read only when it
can have changed: a running thread's is 0 by definition (the kernel's get_wchan), and a thread
asleep now that has not run since the last reading (schedstat's CPU ns and timeslices unchanged)
still waits where it waited then. Measured at 10 Hz on the 40-thread workload at nice 19 (cold
caches, as the collector runs): ~5 us a pread, the wait channel ~6 us; Python's parsing as much.
"""
from __future__ import annotations

import os
import resource
from typing import Any

import psutil

CLK_TCK = os.sysconf("SC_CLK_TCK")  # stat's utime and stime are in these ticks
FILES = ("stat", "wchan", "schedstat")
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
Ran = tuple[int | None, int | None] | None  # schedstat (ns on a CPU, timeslices)


def _default_kept() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(0, min(1024, soft // 4) // len(FILES)) if soft != resource.RLIM_INFINITY else 1024 // len(FILES)


def read_path(path: str) -> str | None:
    """A small /proc file's text (one os.read: a text-mode open costs ~5x more)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _sched(text: bytes | None) -> list[int | None]:
    """schedstat's ns on a CPU, ns runnable but waiting, timeslices; Nones where there is none."""
    v = (text or b"").split()[:3]
    return [int(x) for x in v] if len(v) == 3 and all(x.isdigit() for x in v) else [None, None, None]


class TaskFiles:
    """One target's thread readings; ``close()`` when the capture ends."""

    def __init__(self, pid: int, max_kept: int | None = None) -> None:
        self.pid = pid
        self.max_kept = _default_kept() if max_kept is None else max_kept
        self._fds: dict[int, dict[str, int]] = {}  # tid -> file -> descriptor
        self._last: dict[int, tuple[Ran, str | None]] = {}  # tid -> (what it had run, its wchan) last time

    def task_ids(self) -> list[int]:
        """The target's thread ids. Raises psutil.NoSuchProcess when it is gone."""
        try:
            return sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task") if t.isdigit())
        except FileNotFoundError:
            raise psutil.NoSuchProcess(self.pid) from None
        except OSError:
            return []

    def rows(self, tids: list[int]) -> list[list[Any]]:
        """``[tid, user_s, system_s, state, wchan, run_ns, wait_ns, slices]`` per thread of ``tids``
        still there (stat fields 3, 14, 15: state, utime, stime in CLK_TCK ticks; wchan; schedstat;
        None where the kernel has none); forgets the others. The command name in stat may hold
        spaces and parentheses (the target chose it): the fields are counted after its last ``)``."""
        for gone in (set(self._fds) | set(self._last)) - set(tids):
            self._drop(gone)
        out = []
        for tid in tids:
            row = self._row(tid)
            if row is None:
                self._drop(tid)  # ended between the listing and the read
            else:
                out.append(row)
        return out

    def _row(self, tid: int) -> list[Any] | None:
        stat = self._read(tid, "stat")
        fields = stat.rpartition(b")")[2].split() if stat and b")" in stat else []
        try:
            state, user_s, sys_s = fields[0].decode("ascii", "replace"), int(fields[11]), int(fields[12])
        except (IndexError, ValueError):
            return None
        sched = _sched(self._read(tid, "schedstat"))
        ran = (sched[0], sched[2]) if sched[0] is not None else None
        last = self._last.get(tid)
        if state == "R":
            wchan = None
        elif ran is not None and last is not None and last[0] == ran:
            wchan = last[1]  # asleep and not run since: the kernel stack it waits on is the same
        else:
            text = self._read(tid, "wchan")
            wchan = text.decode("ascii", "replace") if text and text != b"0" else None
        self._last[tid] = (ran, wchan)
        return [tid, user_s / CLK_TCK, sys_s / CLK_TCK, state, wchan, *sched]

    def _read(self, tid: int, name: str) -> bytes | None:
        fds = self._fds.get(tid)
        if fds is None and len(self._fds) < self.max_kept:
            fds = self._fds[tid] = {}
        path = f"/proc/{self.pid}/task/{tid}/{name}"
        try:
            if fds is None:
                fd = os.open(path, _FLAGS)
                try:
                    return os.read(fd, 4096).strip()
                finally:
                    os.close(fd)
            kept = fds.get(name)
            if kept is None:
                kept = fds[name] = os.open(path, _FLAGS)
            return os.pread(kept, 4096, 0).strip()
        except OSError:
            return None

    def _drop(self, tid: int) -> None:
        self._last.pop(tid, None)
        for fd in self._fds.pop(tid, {}).values():
            os.close(fd)

    def kept(self) -> int:
        """Descriptors held now."""
        return sum(len(f) for f in self._fds.values())

    def close(self) -> None:
        for tid in list(self._fds):
            self._drop(tid)


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")  # stat's rss is in pages


def _fields_after_comm(stat: bytes) -> list[bytes]:
    return stat.rpartition(b")")[2].split()


class ProcessFiles:
    """The target's own /proc/<pid>/stat and io on kept descriptors: one pread each a reading
    (psutil's cpu_times, memory_info, num_threads and io_counters open stat, statm, status and io
    every time). The context switches (status: the kernel formats ~55 lines for them, and no
    analysis reads them) are read on their own, less often. ``close()`` at the end."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fds: dict[str, int] = {}

    def _read(self, name: str) -> bytes:
        """Raises PermissionError (not ours to read) or psutil.NoSuchProcess (gone; a descriptor
        kept open reads ESRCH once the process ended, even if its pid is reused)."""
        try:
            fd = self._fds.get(name)
            if fd is None:
                fd = self._fds[name] = os.open(f"/proc/{self.pid}/{name}", _FLAGS)
            return os.pread(fd, 4096, 0)
        except PermissionError:
            raise
        except OSError:  # ENOENT at open, ESRCH on a kept descriptor: the process ended
            raise psutil.NoSuchProcess(self.pid) from None

    def reading(self) -> dict[str, Any]:
        """``cpu_user_s``, ``cpu_system_s`` (stat utime, stime), ``num_threads``, ``rss_bytes``
        (stat rss x page size, as psutil's memory_info), ``io_read_bytes``/``io_write_bytes``
        (io: storage bytes; left out where the io file may not be read). Raises
        psutil.NoSuchProcess when the process is gone, psutil.AccessDenied when its stat may not be read."""
        try:
            f = _fields_after_comm(self._read("stat"))
            rec: dict[str, Any] = {"cpu_user_s": int(f[11]) / CLK_TCK, "cpu_system_s": int(f[12]) / CLK_TCK,
                                   "rss_bytes": int(f[21]) * PAGE_BYTES, "num_threads": int(f[17])}
        except PermissionError:
            raise psutil.AccessDenied(self.pid) from None
        except (IndexError, ValueError):
            raise psutil.NoSuchProcess(self.pid) from None  # not a process stat: not the target any more
        try:
            io = dict(line.split(b":", 1) for line in self._read("io").splitlines() if b":" in line)
            rec["io_read_bytes"], rec["io_write_bytes"] = int(io[b"read_bytes"]), int(io[b"write_bytes"])
        except (PermissionError, KeyError, ValueError):
            pass
        return rec

    def context_switches(self) -> dict[str, int]:
        """``ctx_vol``/``ctx_invol`` from status (empty where it does not say)."""
        text = read_path(f"/proc/{self.pid}/status") or ""
        got = dict(line.split(":", 1) for line in text.splitlines() if line.endswith(tuple("0123456789")))
        try:
            return {"ctx_vol": int(got["voluntary_ctxt_switches"]), "ctx_invol": int(got["nonvoluntary_ctxt_switches"])}
        except (KeyError, ValueError):
            return {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


__all__ = ["CLK_TCK", "PAGE_BYTES", "ProcessFiles", "TaskFiles", "read_path"]
