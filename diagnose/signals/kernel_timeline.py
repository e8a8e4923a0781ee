"""TraceReports -> Signals (gpu.*, kernels.*, torch.*), summed over every trace of the bundle.

Several traces (ranks, or consecutive profiler windows) are combined time-weighted: each
percentage is total part time over total window time. A trace without GPU events yields no
gpu.* value but the reason "no GPU activity recorded"; it never implies a CPU-bound verdict.
"""
from __future__ import annotations

from collections.abc import Callable

from diagnose.model import Signal, missing
from diagnose.results.traces import Roofline, trace_view
from diagnose.signals.catalog import unit_of
from diagnose.traces.report import TraceReport
from diagnose.traces.roofline import LOW_INTENSITY_FLOP_PER_BYTE

SRC = "torch profiler trace (Kineto)"
NO_GPU = ("no GPU activity recorded: the torch trace holds no kernels, memcpy or memset "
          "(CPU-only profile, or CUDA activity not enabled)")


def _sum(reports: list[TraceReport], get: Callable[[TraceReport], float | None]) -> float:
    return float(sum(v for v in map(get, reports) if v is not None))


def _span_ns(r: TraceReport) -> int:
    """The trace's GPU window (first to last GPU event), 0 without GPU events."""
    return r.temporal.span_ns if r.temporal is not None else 0


def _temporal_ns(reports: list[TraceReport], part: str) -> float:
    """One part of the temporal breakdown (``idle_ns``, ``compute_ns``...) summed over the traces."""
    return float(sum(getattr(r.temporal, part) for r in reports if r.temporal is not None))


def _h2d_pageable_ns(r: TraceReport) -> float:
    return float(sum(m["time_ns"] for m in r.tables["memcpy"]
                     if m["direction"] == "HtoD" and m["host_memory"] == "pageable"))


def temporal_signals(reports: list[TraceReport], reason: str) -> dict[str, Signal]:
    gpu = [r for r in reports if r.temporal is not None and r.temporal.span_ns > 0]
    names = {"gpu.idle_pct": "idle_ns", "gpu.compute_pct": "compute_ns", "gpu.non_compute_pct": "non_compute_ns"}
    src = SRC + ", HTA temporal breakdown over first-to-last GPU event"
    if not gpu:
        zero = any(r.temporal is not None for r in reports)  # GPU events, all of zero length
        why = ("the GPU events span 0 ns: no window to measure" if zero else NO_GPU) if reports else reason
        out = {n: missing(n, "%", src, why) for n in names}
        for n in ("gpu.idle_gap_share", "gpu.idle_host_wait_pct", "kernels.short_kernel_pct",
                  "kernels.launch_delay_p99_us", "gpu.kernel_window_pct", "gpu.short_gap_idle_pct",
                  "gpu.comm_overlap_pct", "gpu.comm_exposed_pct", "gpu.comm_exposed_ms"):
            out[n] = missing(n, unit_of(n), SRC, why)
        return out
    span = _sum(gpu, _span_ns)
    pct = {n: 100.0 * _temporal_ns(gpu, part) / span for n, part in names.items()}
    out = {n: Signal(n, v, "%", src) for n, v in pct.items()}
    gaps_ns = _sum(gpu, lambda r: r.gaps.total_ns)
    thr_us = gpu[0].gaps.min_gap_ns / 1e3
    gap_share = 100.0 * gaps_ns / span
    out["gpu.idle_gap_share"] = Signal("gpu.idle_gap_share", gap_share, "%",
                                       f"{SRC}, share of the window in GPU idle gaps >= {thr_us:g} us")
    out["gpu.short_gap_idle_pct"] = Signal(
        "gpu.short_gap_idle_pct", max(0.0, pct["gpu.idle_pct"] - gap_share), "%",
        f"{SRC}, idle share of the window in gaps shorter than {thr_us:g} us (launch-overhead scale)")
    host = _sum(gpu, lambda r: r.tables["coverage"]["host_span_ns"])
    n = "gpu.kernel_window_pct"
    out[n] = (Signal(n, min(100.0, 100.0 * span / host), "%", SRC + ", first-to-last-kernel window as a share of "
                     "the profiled host time") if host > 0 else missing(n, "%", SRC, "the trace has no host events"))
    idle = _sum(gpu, lambda r: sum(s.idle_ns for s in r.streams))
    host = _sum(gpu, lambda r: sum(s.host_wait_ns for s in r.streams))
    n = "gpu.idle_host_wait_pct"
    out[n] = (Signal(n, 100.0 * host / idle, "%", SRC + ", per-stream idle where the launch came after "
                     "the previous kernel ended (HTA host wait)") if idle > 0
              else missing(n, "%", SRC, "no idle time between kernels on any stream"))
    out.update(_comm_signals(gpu, span))
    out.update(_launch_signals(gpu))
    return out


def _comm_signals(gpu: list[TraceReport], span_ns: float) -> dict[str, Signal]:
    """HTA's communication/computation overlap, and the exposed (not overlapped) part of the
    collectives as a share of the kernel windows."""
    comm = [r.tables["comm_overlap"] for r in gpu if r.tables["comm_overlap"]]
    total = sum(c["comm_ns"] for c in comm)
    names = ("gpu.comm_overlap_pct", "gpu.comm_exposed_pct", "gpu.comm_exposed_ms")
    if not total:
        why = "no communication (NCCL/RCCL collective) kernels in the trace"
        return {n: missing(n, unit_of(n), SRC, why) for n in names}
    exposed = sum(c["exposed_ns"] for c in comm)
    return {
        names[0]: Signal(names[0], 100.0 * sum(c["overlapped_ns"] for c in comm) / total, "%",
                         SRC + ", share of collective-kernel time with a compute kernel running too (HTA "
                         "comm/comp overlap)"),
        names[1]: Signal(names[1], 100.0 * exposed / span_ns, "%",
                         SRC + ", collective-kernel time with no compute kernel beside it, share of the kernel window"),
        names[2]: Signal(names[2], exposed / 1e6, "ms",
                         SRC + ", collective-kernel time with no compute kernel beside it"),
    }


def _launch_signals(gpu: list[TraceReport]) -> dict[str, Signal]:
    out = {}
    kernels = _sum(gpu, lambda r: r.tables["launches"]["kernels"])
    short = _sum(gpu, lambda r: r.tables["launches"]["short_kernels"])
    n = "kernels.short_kernel_pct"
    thr_us = gpu[0].tables["launches"]["short_kernel_threshold_us"]
    out[n] = (Signal(n, 100.0 * short / kernels, "%", SRC + f", kernels shorter than {thr_us:g} us") if kernels
              else missing(n, "%", SRC, "no kernels (only memcpy/memset) in the trace"))
    p99 = [r.tables["launches"]["launch_delay"]["p99_us"] for r in gpu]
    p99 = [v for v in p99 if v is not None]
    n = "kernels.launch_delay_p99_us"
    out[n] = (Signal(n, max(p99), "us", SRC + ", host launch call start -> kernel start (CUPTI correlation)")
              if p99 else missing(n, "us", SRC, "no kernel is linked to its launch call (no correlation/flows)"))
    return out


def kernel_signals(reports: list[TraceReport], reason: str) -> dict[str, Signal]:
    gpu = [r for r in reports if r.has_gpu]
    out: dict[str, Signal] = {}
    total = _sum(gpu, lambda r: r.tables["kernel_categories"]["total_ns"])
    if not total:
        why = NO_GPU if reports else reason
        return {n: missing(n, "%", SRC, why) for n in (
            f"kernels.group_share_pct[{g}]" for g in ("compute", "memory", "communication"))}
    for group in ("compute", "memory", "communication"):
        n = f"kernels.group_share_pct[{group}]"
        v = float(sum(r.tables["kernel_categories"]["groups"][group]["time_ns"] for r in gpu))
        out[n] = Signal(n, 100.0 * v / total, "%", SRC + ", summed GPU event time by catalogs/kernels.py group")
    cats: dict[str, float] = {}
    for r in gpu:
        for row in r.tables["kernel_categories"]["categories"]:
            cats[row["category"]] = cats.get(row["category"], 0.0) + row["time_ns"]
    for cat, v in cats.items():
        n = f"kernels.category_share_pct[{cat}]"
        out[n] = Signal(n, 100.0 * v / total, "%", SRC + ", summed GPU event time by kernel category")
    return out


def host_signals(reports: list[TraceReport], reason: str) -> dict[str, Signal]:
    """Signals that also hold for CPU-only traces: syncs, steps, input pipeline, roofline."""
    out: dict[str, Signal] = {}
    if not reports:
        for n, u in (("torch.step_time_p50_ms", "ms"), ("torch.dataloader_share_pct", "%"),
                     ("torch.op_idle_gap_share", "%"), ("kernels.intensity_to_ridge_ratio", "x"),
                     ("torch.sync_blocked_pct", "%"), ("torch.d2h_pageable_copies", "copies"),
                     ("torch.h2d_pageable_pct", "%"), ("torch.training_ops_pct", "%"),
                     ("kernels.fp32_flops_pct", "%"), ("torch.model_batch_p50", "items")):
            out[n] = missing(n, u, SRC, reason)
        return out
    blocked = [r.tables["syncs"]["host_blocked_pct"] for r in reports
               if r.tables["syncs"]["host_blocked_pct"] is not None]
    n = "torch.sync_blocked_pct"
    out[n] = (Signal(n, max(blocked), "%", SRC + ", host time in cuda*/hip*Synchronize and blocking copies")
              if blocked else missing(n, "%", SRC, "the trace has no host events"))
    n = "torch.h2d_pageable_pct"
    gpu = [r for r in reports if r.temporal is not None and r.temporal.span_ns > 0]
    out[n] = (Signal(n, 100.0 * _sum(gpu, _h2d_pageable_ns) / _sum(gpu, _span_ns), "%",
                     SRC + ", Memcpy HtoD from pageable host memory, share of the kernel window")
              if gpu else missing(n, "%", SRC, reason if not reports else NO_GPU))
    d2h = _sum(reports, lambda r: r.tables["syncs"]["d2h_pageable"]["count"])
    out["torch.d2h_pageable_copies"] = Signal("torch.d2h_pageable_copies", d2h, "copies",
                                              SRC + ", Memcpy DtoH into pageable host memory")
    steps = [r.tables["steps"] for r in reports if r.tables["steps"]["count"]]
    n = "torch.step_time_p50_ms"
    out[n] = (Signal(n, max(s["p50_ms"] for s in steps), "ms", SRC + ", ProfilerStep#N duration")
              if steps else missing(n, "ms", SRC,
                                    "no ProfilerStep annotations (profiler used without schedule/step())"))
    dl = [s["dataloader_share_pct"] for s in steps if s["dataloader_share_pct"] is not None]
    n = "torch.dataloader_share_pct"
    out[n] = (Signal(n, max(dl), "%", SRC + ", DataLoader annotations inside ProfilerSteps")
              if dl else missing(n, "%", SRC, "no steps with DataLoader annotations in the trace"))
    tr = [r.tables["training_ops_pct"] for r in reports if r.tables["training_ops_pct"] is not None]
    n = "torch.training_ops_pct"
    out[n] = (Signal(n, max(tr), "%", SRC + ", host time in autograd backward and Optimizer.step/zero_grad ops")
              if tr else missing(n, "%", SRC, "the trace has no host events"))
    out.update(_roofline_signals(reports))
    out.update(_torch_op_signals(reports))
    batches = [p50 for r in reports if (p50 := trace_view(r.tables).model_batch.p50) is not None]
    n = "torch.model_batch_p50"
    out[n] = (Signal(n, max(batches), "items", SRC + ", leading dimension of input 0 of "
                     "matmul/linear/conv ops (Input Dims), median over op calls")
              if batches else missing(n, "items", SRC, "no matmul/linear/conv op with recorded input shapes "
                                      "(profile with record_shapes=True)"))
    return out


def _torch_op_signals(reports: list[TraceReport]) -> dict[str, Signal]:
    """CPU-only traces: share of the profiled window in which no torch op ran."""
    cpu = [r for r in reports if not r.has_gpu and r.gaps.window_ns > 0]
    if not cpu:
        why = ("the trace has GPU activity: see gpu.idle_gap_share" if any(r.has_gpu for r in reports)
               else "no torch op in the trace")
        return {n: missing(n, "%", SRC, why) for n in ("torch.op_idle_pct", "torch.op_idle_gap_share",
                                                         "torch.host_comm_pct")}
    window = _sum(cpu, lambda r: r.gaps.window_ns)
    comm = _sum(cpu, lambda r: r.gaps.comm_ns or 0)
    busy = _sum(cpu, lambda r: r.gaps.busy_ns)
    gaps = _sum(cpu, lambda r: r.gaps.total_ns)
    thr_ms = cpu[0].gaps.min_gap_ns / 1e6
    src = SRC + ", CPU-only trace: union of cpu_op events on all threads"
    return {
        "torch.op_idle_pct": Signal("torch.op_idle_pct", 100.0 * (window - busy) / window, "%", src),
        "torch.op_idle_gap_share": Signal("torch.op_idle_gap_share", 100.0 * gaps / window, "%",
                                          f"{src}, gaps >= {thr_ms:g} ms"),
        "torch.host_comm_pct": Signal("torch.host_comm_pct", 100.0 * comm / window, "%",
                                      f"{SRC}, CPU-only trace: host collectives (gloo/MPI record_function labels) "
                                      "while no torch op ran"),
    }


def _roofline_signals(reports: list[TraceReport]) -> dict[str, Signal]:
    why = ("no op with FLOPs in the trace (profile with record_shapes=True; matmul, linear, conv, "
           "attention, add/mul ops, or a flops arg)")
    roofs = [trace_view(r.tables).roofline for r in reports]
    out = {"kernels.fp32_flops_pct": _fp32_share(roofs, why)}
    roof = [r for r in roofs if r.intensity_flop_per_byte]
    n, m = "kernels.intensity_flop_per_byte", "kernels.intensity_to_ridge_ratio"
    if not roof:
        return {**out, n: missing(n, "FLOP/byte", SRC, why), m: missing(m, "x", SRC, why)}
    flops = sum(r.flops for r in roof)
    nbytes = sum(r.bytes for r in roof)
    out[n] = Signal(n, flops / nbytes, "FLOP/byte", SRC + ", matmul/linear/conv/attention/add/mul ops (innermost "
                    "per call path): FLOPs / bytes read+written (upper bound)")
    spent = sum(r.time_s or 0.0 for r in roof)
    if spent > 0:
        k = "kernels.low_intensity_time_pct"
        out[k] = Signal(k, 100.0 * sum(r.low_intensity_time_s or 0.0 for r in roof) / spent, "%",
                        SRC + f", time of op calls below {LOW_INTENSITY_FLOP_PER_BYTE:g} FLOP/byte / time of op calls "
                        "with FLOPs (GPU kernel time where linked, else host op time)")
    ridge = next((r.ridge_flop_per_byte for r in roof if r.ridge_flop_per_byte), None)
    devices = sorted({d for r in reports for d in r.meta.devices})
    out[m] = (Signal(m, flops / nbytes / ridge, "x", SRC + " intensity / catalogs/gpu_specs.py ridge") if ridge
              else missing(m, "x", SRC, f"no roofline peak for device {devices[0] if devices else '(none: CPU trace)'} "
                                        "in catalogs/gpu_specs.py"))
    return out


def _fp32_share(roofs: list[Roofline], why: str) -> Signal:
    """FLOPs of ops whose inputs are float32/float64, as a share of the FLOPs of known precision."""
    n = "kernels.fp32_flops_pct"
    by: dict[str, float] = {}
    for r in roofs:
        for k, v in r.flops_by_precision.items():
            by[k] = by.get(k, 0.0) + v
    known = sum(v for k, v in by.items() if k != "unknown")
    if not by:
        return missing(n, "%", SRC, why)
    if known <= 0:
        return missing(n, "%", SRC, "the ops' Input type is not recorded (profile with record_shapes=True)")
    return Signal(n, 100.0 * (by.get("fp32", 0.0) + by.get("fp64", 0.0)) / known, "%",
                  SRC + ", FLOPs of ops whose first floating input is float32/float64 (Input type)")


def trace_signals(reports: list[TraceReport], reason: str) -> dict[str, Signal]:
    out = temporal_signals(reports, reason)
    out.update(kernel_signals(reports, reason))
    out.update(host_signals(reports, reason))
    return out


__all__ = ["NO_GPU", "trace_signals"]
