"""The process collector's readings (collectors/process.py): one ``ProcessReading`` per tick, with
*cumulative* counters (CPU seconds, context switches, IO bytes) so analysis can difference them over
any window.

Read leniently (``process_reading``): a reading without a usable ``t_ns``, or with CPU times that
are not numbers, is dropped and counted (``Bundle.invalid_records``); any other malformed field
gives its default (None, empty), and a malformed thread row, listening port or child costs only
itself. A line that is not a JSON object is a torn line, as in every stream.
"""
from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, NamedTuple

import msgspec
from msgspec import Meta, field

from diagnose.bundle.records.base import Count, Finite, Record, UnixNs, lenient

# CPU seconds as the collector writes them (psutil cpu_times): any finite number inside int64's range
CpuSeconds = Annotated[float, Meta(gt=-2**62, lt=2**62)]
MAX_CONNECTIONS = 10**7  # more accepted connections than any kernel holds: a malformed reading
MAX_LISTED_PORTS = 1024  # listening ports read of one reading (the collector writes at most 16)
CPU_FIELDS = ("cpu_user_s", "cpu_system_s")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 2**62 and v == v


class ThreadRow(NamedTuple):
    """One OS thread in a reading (cumulative): CPU seconds from /proc/<pid>/task/<tid>/stat, its
    state letter and kernel wait channel, and schedstat's ns on a CPU, ns runnable but waiting for
    a CPU and timeslices (None where the kernel has none). The numbers are kept as written."""

    tid: int
    user_s: float
    system_s: float
    state: str | None = None
    wchan: str | None = None
    run_ns: int | None = None
    wait_ns: int | None = None
    slices: int | None = None


def thread_row(row: Any) -> ThreadRow | None:
    """``[tid, user_s, system_s, state, wchan, run_ns, wait_ns, slices]`` with its types checked: a
    row without an int tid or numeric CPU times is None; a wrong-typed state or wchan is None; the
    three schedstat counters are read together, or not at all."""
    if not isinstance(row, list) or len(row) < 3 or type(row[0]) is not int or not (_num(row[1]) and _num(row[2])):
        return None
    state, wchan = (list(row[3:5]) + [None, None])[:2]
    sched = (list(row[5:8]) + [None] * 3)[:3]
    if not all(type(v) is int and 0 <= v < 2**62 for v in sched):
        sched = [None, None, None]
    return ThreadRow(row[0], row[1], row[2], state if isinstance(state, str) else None,
                     wchan if isinstance(wchan, str) else None, *sched)


class TcpReading(Record):
    """Connections on the target's TCP sockets (collectors/tcp_scan.py), every CONN_EVERY readings."""

    accepted: Annotated[int, Meta(ge=0, le=MAX_CONNECTIONS)] | None = None  # ESTABLISHED on a LISTEN port
    ports_in: Any = field(default=None, name="listening_ports")  # see ``listening_ports``

    @property
    def listening_ports(self) -> list[int]:
        """The TCP ports listened on (malformed entries left out)."""
        ports = self.ports_in
        if not isinstance(ports, list):
            return []
        return [p for p in ports[:MAX_LISTED_PORTS] if type(p) is int and 0 < p < 65536]


class ChildReading(Record):
    """A descendant process (with --subprocesses), cumulative."""

    pid: int
    cpu_user_s: CpuSeconds
    cpu_system_s: CpuSeconds
    name: str | None = None
    rss_bytes: Count | None = None
    num_threads: Count | None = None

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_system_s


class ProcessReading(Record, dict=True):
    """One reading of the target and the host; ``t_ns``: Unix ns of the reading."""

    t_ns: UnixNs
    cpu_user_s: CpuSeconds | None = None  # psutil cpu_times (always written; None: not a CPU reading)
    cpu_system_s: CpuSeconds | None = None
    rss_bytes: Count | None = None  # psutil memory_info
    num_threads: Count | None = None
    ctx_vol: Count | None = None  # psutil num_ctx_switches
    ctx_invol: Count | None = None
    io_read_bytes: Count | None = None  # psutil io_counters (/proc/<pid>/io); None: not readable
    io_write_bytes: Count | None = None
    threads_in: Any = field(default=None, name="threads")  # see ``threads``
    connections: Count | None = None  # every CONN_EVERY readings
    tcp: TcpReading | None = None  # every CONN_EVERY readings
    children: tuple[ChildReading, ...] | None = None  # with --subprocesses (None: not asked)
    sys_cpu_s: dict[str, Finite] = {}  # host psutil cpu_times: user, nice, system, idle, iowait, steal, guest...
    ncpu: Annotated[int, Meta(gt=0, lt=100_000)] | None = None  # logical CPUs of the host
    loadavg: tuple[Finite, ...] = ()
    disk: dict[str, Count] = {}  # read_bytes, write_bytes
    net: dict[str, Count] = {}  # bytes_sent, bytes_recv
    period_s: Annotated[float, Meta(gt=0, lt=3600)] | None = None  # the interval it was read at

    @cached_property
    def threads(self) -> tuple[ThreadRow, ...]:
        """The OS threads of this reading; malformed rows left out."""
        rows = self.threads_in
        return tuple(r for r in map(thread_row, rows) if r is not None) if isinstance(rows, list) else ()

    @property
    def accepted(self) -> int | None:
        """Connections accepted on the target's listening sockets, when this reading has them."""
        return self.tcp.accepted if self.tcp is not None else None


def process_reading(raw: Any) -> ProcessReading | None:
    """A ProcessReading from one decoded JSON object, or None when it is not one (no usable
    ``t_ns``, CPU times that are not numbers); any other malformed field gets its default."""
    if not isinstance(raw, dict) or any(k in raw and not _num(raw[k]) for k in CPU_FIELDS):
        return None
    try:
        return msgspec.convert(raw, ProcessReading)  # a well-formed reading: one pass
    except msgspec.ValidationError:
        return lenient(ProcessReading, raw)


__all__ = ["ChildReading", "ProcessReading", "TcpReading", "ThreadRow", "process_reading", "thread_row"]
