"""Reading the PROCESS stream's cumulative counters: the one formula each for process CPU,
per-thread CPU and host CPU shares between two readings (diagnose/bundle/records/process.py).

The capture's signals (diagnose/signals/process.py, threads.py) and the live sparklines
(diagnose/tui/live/series.py) both use these, so the live view and the report agree. Pure,
standard library only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.bundle.records.process import ProcessReading

# Host psutil cpu_times fields. On Linux guest and guest_nice are already counted inside user and
# nice (psutil's cpu_percent and htop subtract them too); idle, iowait and steal are time the host's
# CPUs did no work of their own (steal: the hypervisor ran someone else).
GUEST_FIELDS = ("guest", "guest_nice")
NOT_BUSY_FIELDS = ("idle", "iowait", "steal")


def process_cpu_s(record: ProcessReading) -> float | None:
    """Cumulative CPU seconds (user + system) of the target in one PROCESS reading; None when it
    has no CPU times."""
    if record.cpu_user_s is None or record.cpu_system_s is None:
        return None
    return record.cpu_user_s + record.cpu_system_s


def thread_cpu_s(record: ProcessReading) -> dict[int, float]:
    """Cumulative CPU seconds (user + system) of each thread in one PROCESS reading."""
    return {row.tid: row.user_s + row.system_s for row in record.threads}


def cpu_since(start: Mapping[int, float], now: Mapping[int, float]) -> dict[int, float]:
    """CPU seconds each thread of ``now`` used since ``start`` (both ``thread_cpu_s``). A thread
    absent from ``start`` was born in between (e.g. one per request) and counts from zero, not
    from its first reading: its counters are cumulative since it started."""
    return {tid: cpu - start.get(tid, 0.0) for tid, cpu in now.items()}


@dataclass(frozen=True)
class HostCpu:
    """How the host's CPUs spent the time between two readings, in % of all CPU time."""

    busy_pct: float
    iowait_pct: float | None  # None: not reported on this OS
    steal_pct: float | None


def host_cpu(first: Mapping[str, float], last: Mapping[str, float]) -> HostCpu | None:
    """Host CPU shares between two cumulative ``sys_cpu_s`` readings (psutil cpu_times), or None
    when no CPU time passed between them."""
    d = {k: float(last[k]) - float(first.get(k, 0.0)) for k in last}
    total = sum(v for k, v in d.items() if k not in GUEST_FIELDS)
    if total <= 0:
        return None
    busy = total - sum(d.get(k, 0.0) for k in NOT_BUSY_FIELDS)
    share = {k: 100.0 * d[k] / total if k in d else None for k in ("iowait", "steal")}
    return HostCpu(100.0 * busy / total, share["iowait"], share["steal"])


__all__ = ["HostCpu", "cpu_since", "host_cpu", "process_cpu_s", "thread_cpu_s"]
