"""The in-process agent's streams: GC pauses and the torch windows' index (spans: signals/spans)."""
from __future__ import annotations

from diagnose.bundle.records.base import Count, Finite, Record, UnixNs


class GcPauseRecord(Record):
    """One garbage-collector pause inside the target (agent/inproc/gcpause.py)."""

    start_ns: UnixNs
    end_ns: UnixNs
    generation: int | None = None
    collected: int | None = None
    uncollectable: int | None = None

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            raise ValueError("a GC pause ends before it starts")


class TorchTraceRecord(Record):
    """The index record of one torch profiler window (agent/inproc/torchwin.py, importers)."""

    file: str | None = None  # TORCH_TRACES.file(n); None when the window failed
    start_ns: int | None = None
    stopping_ns: int | None = None  # the profiled window ends here; end_ns after torch's stop
    end_ns: int | None = None
    base_time_ns: int | None = None  # Kineto's baseTimeNanoseconds: event ts are us from it
    activities: list[str] = []
    torch_version: str | None = None
    error: str | None = None
    bytes: Count | None = None
    events: Count | None = None
    stop_s: Finite | None = None  # the stop's hold on the target's GIL (the agent thread's CPU time)
    export_s: Finite | None = None
    stop_wall_s: Finite | None = None
    export_wall_s: Finite | None = None
    quiesce_s: Finite | None = None  # waited for ops in flight before the stop (quiesce.py)
    cpu_s: Finite | None = None  # the target's process CPU during the window
    cut_by_cpu: bool = False
    # the duty cycle (agent/inproc/windowplan.py DUTY_SHARE): profiled seconds so far, of the capture so far
    profiled_s_total: Finite | None = None
    capture_elapsed_s: Finite | None = None
    profiled_share_pct: Finite | None = None
    note: str | None = None
    imported_from: str | None = None


__all__ = ["GcPauseRecord", "TorchTraceRecord"]
