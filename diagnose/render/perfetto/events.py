"""One trace event before it is placed on the document's clock (Unix ns), the track processes in
display order, and the document's tid and µs conventions."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

REQUESTS, PYSPY, TORCH_CPU, KERNELS, GPU, PROC, GC_PID, FINDINGS = range(1, 9)  # trace pids, display order
PROCESS_NAMES = {REQUESTS: "Requests (spans)", PYSPY: "py-spy samples", TORCH_CPU: "torch profiler: CPU ops",
                 KERNELS: "torch profiler: GPU kernels", GPU: "GPU counters (NVML, GPM, DCGM)",
                 PROC: "Process counters (psutil)", GC_PID: "GC pauses", FINDINGS: "diagnose findings"}
MAX_EVENTS = 200_000
TID_BLOCK = 10_000_000  # a document tid is pid * TID_BLOCK + the source's tid (Linux tids stay below 2**22)
COUNTER_SKIP = ("mem_total_bytes", "clock_event_reasons")  # a constant and a bit mask: no counter track
Names = dict[tuple[int, int], str]


@dataclass(frozen=True, slots=True)
class Event:
    """One trace event before it is placed on the output clock (times in Unix ns)."""

    ph: str
    t_ns: int
    pid: int
    tid: int
    name: str
    cat: str = ""
    dur_ns: int = 0
    args: dict[str, Any] | None = None
    id: str | None = None
    scope: str | None = None

    def to_json(self, origin_ns: int) -> dict[str, Any]:
        out = {"name": self.name, "ph": self.ph, "ts": us(self.t_ns - origin_ns), "pid": self.pid,
               "tid": doc_tid(self.pid, self.tid), "cat": self.cat or None,
               "dur": us(self.dur_ns) if self.ph == "X" else None, "id": self.id, "s": self.scope,
               "args": self.args or None}
        return {k: v for k, v in out.items() if v is not None}


def us(ns: int) -> float:
    """``ns`` (>= 0) as µs such that truncating ``us * 1000`` (Perfetto's JSON importer) gives ``ns``."""
    us = ns / 1000
    while int(us * 1000.0) < ns:
        us = math.nextafter(us, math.inf)
    return us


def doc_tid(pid: int, tid: int) -> int:
    """A track's tid in the document: unique across the trace's processes (Perfetto files thread
    names by tid alone) and a uint32 (as Perfetto reads it); the source's own tid is ``% TID_BLOCK``."""
    return pid * TID_BLOCK + tid % TID_BLOCK


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def counter(pid: int, t_ns: int, name: str, value: Any) -> list[Event]:
    return [Event("C", t_ns, pid, 0, name, args={"value": value})] if is_number(value) else []

