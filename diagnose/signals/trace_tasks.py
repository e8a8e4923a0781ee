"""Reading and analysing a bundle's torch traces, one task per trace (rank), anywhere.

A TraceTask names a trace by its bundle directory and member name, so it can be run in this
process, in a local worker process or on a Dask worker that sees the same path (a shared file
system); it returns a TraceOutcome: the TraceReport (small: tables, gap lists, the RankTimeline;
never the events) or the one-line reason the trace could not be read. The fan-out itself is
diagnose/ranks/fanout.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import partial
from pathlib import Path
from typing import Any

from diagnose.bundle import Bundle, BundleError
from diagnose.bundle.streams import TORCH, TORCH_TRACES
from diagnose.catalogs.gpu_specs import (
    GPU_SPECS,
    OVERRIDE_FILE,
    Fingerprint,
    GpuSpec,
    SpecError,
    find_spec,
    parse_overrides,
)
from diagnose.traces.devices import DeviceProps
from diagnose.traces.reader import KinetoTrace, TraceReadError, read_trace
from diagnose.traces.report import TimelineOptions, TraceReport, analyze_trace
from diagnose.traces.roofline import Peak


def device_peak(device: DeviceProps, specs: tuple[GpuSpec, ...] = GPU_SPECS) -> Peak | None:
    """Roofline peak of a trace's device: by name, or by its facts where ROCm's name is generic."""
    facts = Fingerprint(device.compute, device.sm_count, device.mem_gib)
    spec = find_spec(device.name, specs, facts)
    return Peak(spec.model, spec.dense_bf16_flops_per_s, spec.mem_bytes_per_s, spec.source) if spec else None


def bundle_specs(bundle: Bundle) -> tuple[tuple[GpuSpec, ...], str | None]:
    """The bundle's ``gpu_specs.json`` rows before the built-in table; a bad file: (table, why)."""
    try:
        extra = parse_overrides(bundle.read_json(OVERRIDE_FILE)) if bundle.has(OVERRIDE_FILE) else ()
        return extra + GPU_SPECS, None
    except (SpecError, BundleError) as exc:
        return GPU_SPECS, f"{OVERRIDE_FILE} ignored: {exc}"


def trace_files(bundle: Bundle) -> list[tuple[Path, int | None]]:
    """Traces indexed in TORCH (with their clock base), else any *.json[.gz] in the TORCH_TRACES
    directory."""
    rows = [(path, r.base_time_ns) for r in bundle.typed(TORCH)
            if r.file is not None and not r.error and (path := bundle.member(r.file))]
    if not rows:
        rows = [(bundle.path / name, None) for name in bundle.listing(TORCH_TRACES.directory)
                if fnmatch(name.rsplit("/", 1)[-1], "*.json*")]
    return rows


def read_member_trace(bundle: Bundle, path: Path, base: Any) -> KinetoTrace:
    """``read_trace`` of the bundle member at ``path`` (from ``trace_files``) through a descriptor
    opened below the bundle (no symlink followed, regular files only). Raises TraceReadError."""
    name = path.relative_to(bundle.path).as_posix()
    fd = bundle.open_member(name)
    if fd is None:
        raise TraceReadError(f"{name}: {bundle.unreadable.get(name, 'no longer in the bundle')}: not read")
    with os.fdopen(fd, "rb") as fh:
        return read_trace(path, base if type(base) is int else None, fh=fh)


@dataclass(frozen=True)
class TraceTask:
    """One trace to analyse: the bundle directory, the member's name inside it, its clock base
    from the TORCH index (or None), the thresholds and the GPU spec table (bundle overrides first)."""

    bundle: str
    member: str
    base_time_ns: int | None
    options: TimelineOptions
    specs: tuple[GpuSpec, ...] = GPU_SPECS


@dataclass(frozen=True)
class TraceOutcome:
    """A task's result: the report (None when the trace could not be read) and the errors, one
    line each (a read error, or the damage that stopped the read early)."""

    report: TraceReport | None
    errors: tuple[str, ...] = ()
    bundle_unreadable: bool = False  # the process that ran the task could not open the bundle (where it ran)


def run_trace_task(task: TraceTask, bundle: Bundle | None = None) -> TraceOutcome:
    """Read and analyse one trace (runs in any process; without ``bundle`` the bundle is reopened
    by path; members are opened through descriptors below it). Never raises for a bad trace or
    bundle: the outcome says why."""
    try:
        bundle = bundle or Bundle.open(Path(task.bundle))
    except BundleError as exc:  # about the process (its file system, its cwd), not the trace
        return TraceOutcome(None, (str(exc),), bundle_unreadable=True)
    try:
        trace = read_member_trace(bundle, bundle.path / task.member, task.base_time_ns)
    except (BundleError, TraceReadError) as exc:
        return TraceOutcome(None, (str(exc),))
    errors: tuple[str, ...] = ()
    if trace.report.error:
        at = trace.report.truncated_at_byte
        errors = (f"{Path(task.member).name}: {trace.report.error}" + (f" at byte {at}" if at is not None else ""),)
    return TraceOutcome(analyze_trace(trace, partial(device_peak, specs=task.specs), task.options), errors)


def outcome_key(task: TraceTask) -> tuple[str, TraceTask]:
    """The ``Bundle.derived`` key of one task's outcome."""
    return ("torch.outcome", task)


def trace_outcome(task: TraceTask, bundle: Bundle) -> TraceOutcome:
    """``run_trace_task`` in this process on the open ``bundle``, once per bundle and task; a capture
    runs each trace's task as the trace arrives (diagnose/capture/ahead.py) and the analysis takes
    that outcome while the trace file is unchanged."""
    return bundle.derived(outcome_key(task), lambda: run_trace_task(task, bundle))


def trace_tasks(bundle: Bundle, options: TimelineOptions) -> tuple[list[TraceTask], str | None]:
    """One task per trace of ``bundle`` (trace_files order) and the gpu_specs.json problem, if any.
    The tasks name the bundle by its absolute, resolved path: a worker elsewhere (another cwd)
    reads the same directory."""
    specs, spec_error = bundle_specs(bundle)
    where = str(bundle.path.resolve())
    return [TraceTask(where, path.relative_to(bundle.path).as_posix(),
                      base if type(base) is int else None, options, specs)
            for path, base in trace_files(bundle)], spec_error


__all__ = ["TraceOutcome", "TraceTask", "bundle_specs", "device_peak", "outcome_key", "read_member_trace",
           "run_trace_task", "trace_files", "trace_outcome", "trace_tasks"]
