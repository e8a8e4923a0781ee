"""What the account, the renderers and the TUI read of one kernel-timeline entry (``details.torch_traces``,
diagnose/traces/report.py ``TraceReport.to_json``), as msgspec types.

``torch_traces`` stays the trace engine's own JSON in findings.json; ``trace_view`` decodes one entry
once into these types (unknown keys ignored, an absent section its default: a trace group's entries
hold only ``temporal`` and ``coverage``), so readers use attributes instead of re-checking keys. Units
are in the field names (``_ns`` Unix-epoch or duration ns, ``_us``, ``_pct``).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import Struct

from diagnose.results.details import scalar


class TraceRead(Struct, frozen=True, kw_only=True):
    """How the trace file was read: the problem that stopped it, at which byte (events before it kept)."""

    error: str | None = None
    truncated_at_byte: int | None = None


class Temporal(Struct, frozen=True, kw_only=True):
    """The temporal breakdown over the kernel window (first to last GPU event)."""

    first_start_ns: int | None = None
    span_ns: int = 0
    events: int = 0
    idle_pct: float | None = None
    compute_pct: float | None = None
    non_compute_pct: float | None = None


class StreamIdleRow(Struct, frozen=True, kw_only=True):
    """One stream's idle time split by cause (HTA)."""

    device: int
    stream: int
    idle_ns: int
    host_wait_pct: float | None = None
    kernel_wait_pct: float | None = None
    other_pct: float | None = None


class CategoryShare(Struct, frozen=True, kw_only=True):
    category: str
    share_pct: float | None = None  # None: the kernels add up to no time (zero-length events)


class KernelCategories(Struct, frozen=True, kw_only=True):
    categories: tuple[CategoryShare, ...] = ()


class LaunchDelay(Struct, frozen=True, kw_only=True):
    p50_us: float | None = None
    p99_us: float | None = None


class Launches(Struct, frozen=True, kw_only=True):
    """Kernel launches: how many, the short ones, the delay from the host call to the kernel's start."""

    kernels: int = 0
    short_kernel_pct: float | None = None
    short_kernel_threshold_us: float = 0.0
    launch_delay: LaunchDelay = LaunchDelay()


class Syncs(Struct, frozen=True, kw_only=True):
    host_blocked_pct: float | None = None


class Coverage(Struct, frozen=True, kw_only=True):
    """The profiled host time: its first event (trace clock, ns) and its span."""

    host_start_ns: int | None = None
    host_span_ns: int | None = None


class CommOverlap(Struct, frozen=True, kw_only=True):
    """Collective time in the kernel window, overlapped with compute kernels or exposed."""

    comm_ns: int = 0
    exposed_ns: int = 0
    overlap_pct: float | None = None


class GapRow(Struct, frozen=True, kw_only=True):
    """One of the longest GPU idle gaps, the host op covering it and the busiest py-spy thread in it."""

    start_ns: int
    dur_us: float
    host_op: str | None = None
    pyspy: str | None = None


class IdleGapsInfo(Struct, frozen=True, kw_only=True):
    """The gaps' totals: of the GPU timeline (``gpu``) or, in a CPU-only trace, of the torch ops."""

    of: str = "gpu"
    min_gap_us: float = 0.0
    count: int = 0
    share_pct: float | None = None


class HostOpShare(Struct, frozen=True, kw_only=True):
    name: str
    share_pct: float = 0.0


class Roofline(Struct, frozen=True, kw_only=True):
    """The profiled ops' FLOPs and bytes (innermost per call path), against the device's ridge point."""

    flops: float = 0.0
    bytes: float = 0.0
    intensity_flop_per_byte: float | None = None
    time_s: float | None = None
    low_intensity_time_s: float | None = None
    ridge_flop_per_byte: float | None = None
    flops_by_precision: dict[str, float] = msgspec.field(default_factory=dict)


class ModelBatch(Struct, frozen=True, kw_only=True):
    """The leading dimension of input 0 of the matmul/linear/conv ops (None without recorded shapes)."""

    ops: int = 0
    p50: float | None = None
    max: int | None = None


class TraceView(Struct, frozen=True, kw_only=True):
    """One ``torch_traces`` entry as its readers see it."""

    path: str = ""
    rank: int | None = None
    devices: tuple[str, ...] = ()
    read: TraceRead = TraceRead()
    temporal: Temporal | None = None
    temporal_hta_rounding: Temporal | None = None
    idle_by_stream: tuple[StreamIdleRow, ...] = ()
    kernel_categories: KernelCategories = KernelCategories()
    launches: Launches = Launches()
    syncs: Syncs = Syncs()
    coverage: Coverage | None = None
    comm_overlap: CommOverlap | None = None
    training_ops_pct: float | None = None
    gaps: tuple[GapRow, ...] = ()
    idle_gaps: IdleGapsInfo | None = None
    host_in_gaps: tuple[HostOpShare, ...] = ()
    roofline: Roofline = Roofline()
    model_batch: ModelBatch = ModelBatch()


def trace_view(entry: dict[str, Any]) -> TraceView:
    """One ``torch_traces`` entry (or a TraceReport's ``tables``, the part of it they hold) as a
    TraceView (its numpy scalars as their numbers)."""
    return msgspec.convert(msgspec.to_builtins(entry, enc_hook=scalar), TraceView)


def trace_views(entries: Iterable[dict[str, Any]]) -> tuple[TraceView, ...]:
    return tuple(trace_view(e) for e in entries)


__all__ = ["CommOverlap", "Coverage", "GapRow", "HostOpShare", "IdleGapsInfo", "Launches", "ModelBatch", "Roofline",
           "Temporal", "TraceRead",
           "TraceView", "trace_view", "trace_views"]
