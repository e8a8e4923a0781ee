"""analyze_trace(trace) -> TraceReport: every kernel-timeline question answered for one trace (rank)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.traces.devices import DeviceProps
from diagnose.traces.gaps import (
    GAP_MIN_NS,
    HOST_GAP_MIN_NS,
    IdleGaps,
    gap_rows,
    host_during_gaps,
    host_op_coverage_pct,
    idle_gaps,
    torch_op_gaps,
)
from diagnose.traces.kernels import category_breakdown, memcpy_breakdown, top_kernels
from diagnose.traces.launch import SHORT_KERNEL_NS, launch_stats, sync_stats
from diagnose.traces.ranktime import RankTimeline, rank_timeline
from diagnose.traces.reader import KinetoTrace, ReadReport, TraceMeta
from diagnose.traces.roofline import Peak, roofline
from diagnose.traces.steps import step_stats, training_ops_pct
from diagnose.traces.temporal import (
    KERNEL_WAIT_NS,
    StreamIdle,
    TemporalBreakdown,
    comm_overlap,
    hta_window,
    idle_by_stream,
    temporal_breakdown,
)
from diagnose.traces.view import TraceView, build_view

PeakLookup = Callable[[DeviceProps], "Peak | None"]


@dataclass(frozen=True)
class TimelineOptions:
    """Thresholds of the kernel-timeline analysis (all overridable: diagnose/signals/params.py)."""

    gap_min_ns: int = GAP_MIN_NS  # GPU idle gaps shorter than this are not gaps
    host_gap_min_ns: int = HOST_GAP_MIN_NS  # torch-op gaps of CPU-only traces
    kernel_wait_ns: int = KERNEL_WAIT_NS  # per-stream idle below this before a kernel: kernel wait
    short_kernel_ns: int = SHORT_KERNEL_NS  # kernels shorter than this are short (launch-bound)
    hta_window: bool = True  # drop GPU events of the last ProfilerStep, as HTA does


@dataclass(frozen=True)
class TraceReport:
    path: str
    meta: TraceMeta
    read: ReadReport
    gpu_events: int
    temporal: TemporalBreakdown | None  # exact ns
    temporal_hta: TemporalBreakdown | None  # HTA's whole-µs rounding, for comparison with HTA
    streams: tuple[StreamIdle, ...]
    gaps: IdleGaps  # GPU idle gaps; on a CPU-only trace: torch-op gaps (``gaps_source``)
    tables: dict[str, Any]  # JSON-ready: kernels, memcpy, launches, syncs, steps, roofline, gaps
    options: TimelineOptions = TimelineOptions()  # the thresholds this report was measured with
    timeline: RankTimeline | None = None  # what the job analysis of several ranks reads (diagnose/ranks)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_events > 0

    @property
    def device_not_recorded(self) -> str | None:
        """Why the host time of a trace without GPU events is not the model's, or None: the trace
        launched device work or replayed kernels under CUPTI's range profiler, yet recorded no
        kernel, memcpy or memset activity (a range-profiler capture, or the profiler ran without
        the device activity), so its host op timeline says nothing of what limited the device."""
        if self.has_gpu:
            return None
        ranges, launches = self.read.profiler_ranges, self.tables["launches"]["launch_calls"]
        if not ranges and not launches:
            return None
        name = Path(self.path).name
        if ranges:
            return (f"{name} holds {ranges} CUPTI range-profiler ranges and {launches} kernel launch calls but no "
                    "kernel or memcpy activity: a range-profiler capture replays each kernel under hardware "
                    "counters, so its host time is the profiler's, not the model's")
        return (f"{name} holds {launches} kernel launch calls but no kernel or memcpy activity (the profiler ran "
                "without device activities): its host time cannot say what limited the device")

    @property
    def gaps_source(self) -> str:
        return "gpu" if self.has_gpu else "torch_ops"

    @property
    def label(self) -> str:
        return f"rank {self.meta.rank}" if self.meta.rank is not None else "rank ?"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "rank": self.meta.rank, "world_size": self.meta.world_size,
            "devices": sorted(set(self.meta.devices)), "schema_version": self.meta.schema_version,
            "unix_clock": self.meta.unix_clock, "read": self.read.to_json(),
            "gpu_events": self.gpu_events, "device_not_recorded": self.device_not_recorded,
            "temporal": self.temporal.to_json() if self.temporal else None,
            "temporal_hta_rounding": self.temporal_hta.to_json() if self.temporal_hta else None,
            "idle_by_stream": [s.to_json() for s in self.streams],
            "kernel_wait_max_us": self.options.kernel_wait_ns / 1e3,
            "idle_gaps": {"of": self.gaps_source, "min_gap_us": self.gaps.min_gap_ns / 1e3,
                          "count": int(len(self.gaps.start_ns)), "total_ns": self.gaps.total_ns,
                          "share_pct": self.gaps.share_pct},
            **self.tables,
        }


def model_batch(view: TraceView) -> dict[str, Any]:
    """The batch the model ran: leading dimension of input 0 of its matmul/linear/conv ops
    (``batch`` column; needs ``record_shapes=True``). ``p50``/``max`` over op calls, None without."""
    b = view.cpu["batch"]
    b = b[b >= 0]
    if not len(b):
        return {"ops": 0, "p50": None, "max": None}
    return {"ops": int(len(b)), "p50": float(np.median(b)), "max": int(b.max())}


def analyze_trace(trace: KinetoTrace, peak_of: PeakLookup | None = None,
                  options: TimelineOptions = TimelineOptions()) -> TraceReport:
    """All analyzers over one trace. Pure: no I/O."""
    view = build_view(trace)
    window = hta_window(view) if options.hta_window else np.ones(len(view.gpu), bool)
    if not window.any():  # every GPU event in the last step: keep them rather than report none
        window = np.ones(len(view.gpu), bool)
    temporal = temporal_breakdown(view, window, rounded=False)
    ig = (idle_gaps(view, window, options.gap_min_ns) if view.has_gpu
          else torch_op_gaps(view, options.host_gap_min_ns))
    peak = next((p for p in map(peak_of, trace.meta.device_props) if p), None) if peak_of else None
    host = _host_window(view)
    host_span = host[1] - host[0] if host else None
    tables = {
        "kernel_categories": category_breakdown(view),
        "top_kernels": top_kernels(view),
        "memcpy": memcpy_breakdown(view),
        "launches": launch_stats(view, options.short_kernel_ns),
        "syncs": sync_stats(view, host_span),
        "coverage": {**_coverage(temporal, host_span), "host_start_ns": host[0] if host else None},
        "steps": step_stats(view),
        "training_ops_pct": training_ops_pct(view, host_span),
        "comm_overlap": comm_overlap(view, window),
        "roofline": roofline(view, peak),
        "gaps": gap_rows(view, ig),
        "host_in_gaps": host_during_gaps(view, ig),
        "host_op_coverage_in_gaps_pct": host_op_coverage_pct(view, ig),
        "model_batch": model_batch(view),
    }
    return TraceReport(trace.path, trace.meta, trace.report, len(view.gpu), temporal,
                       temporal_breakdown(view, window, rounded=True),
                       tuple(idle_by_stream(view, window, options.kernel_wait_ns, rounded=False)), ig, tables,
                       options, rank_timeline(view, window))


def _coverage(temporal: TemporalBreakdown | None, host_span_ns: int | None) -> dict[str, Any]:
    """How much of the profiled host time the first-to-last-kernel window covers: one short burst
    of kernels in a long trace says little about the GPU as a whole."""
    window = temporal.span_ns if temporal else None
    pct = 100.0 * min(window, host_span_ns) / host_span_ns if window is not None and host_span_ns else None
    return {"host_span_ns": host_span_ns, "kernel_window_ns": window, "kernel_window_pct": pct}


def _host_window(view: TraceView) -> tuple[int, int] | None:
    """(first start, last end) of the host events, torch ops and CUDA runtime calls alike, in the
    trace's ns: a trailing cudaDeviceSynchronize lies outside every op and must not push blocked
    time past 100%. None without host events."""
    parts = [t for t in (view.cpu, view.runtime) if len(t)]
    if not parts:
        return None
    return int(min(t["start_ns"].min() for t in parts)), int(max(t["end_ns"].max() for t in parts))


__all__ = ["TimelineOptions", "TraceReport", "analyze_trace"]
