"""Arithmetic intensity of the profiled ops against the device's roofline ridge.

FLOPs and bytes come from the trace (columns.py / flops.py). The GPU time of an op is the time of
the kernels enqueued by the launch calls made on its thread while it ran (runtime call ->
correlation -> kernel); without kernels (CPU-only trace) the op's own host duration is used. The ridge point is
peak FLOP/s ÷ peak bytes/s of the device, from the peak table passed in (``Peak``): the dense
BF16/FP16 tensor-core peak, so FLOPs are also split by the precision of the ops' inputs
(``Input type``): FP32 math runs at a fraction of that peak and has a far lower ridge.

Ops nest (``aten::linear`` calls ``aten::addmm``, ``aten::conv2d`` ends in
``aten::mkldnn_convolution``/``cudnn_convolution``): on each thread only the innermost op with
FLOPs is counted, so a product is counted once, at the op whose launches carry its kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnose.traces.op_args import PRECISIONS
from diagnose.traces.schema import CAT_CPU_OP, CAT_KERNEL
from diagnose.traces.view import TraceView

TOP_OPS = 10
# Below this many FLOPs per byte moved no CPU is compute-bound: a server core's FP32 FMA peak (tens of
# GFLOP/s) over its share of DRAM bandwidth (a few to ~20 GB/s) puts every x86/ARM ridge point above
# ~2 FLOP/byte. Elementwise ops sit near 0.1, batch-1 matrix-vector products near 0.5.
LOW_INTENSITY_FLOP_PER_BYTE = 1.0


@dataclass(frozen=True)
class Peak:
    """Peak dense throughput of a device and where the figures come from."""

    device: str
    flops_per_s: float
    bytes_per_s: float
    source: str

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.flops_per_s / self.bytes_per_s


def _op_gpu_ns(view: TraceView, ops: np.ndarray) -> np.ndarray:
    """Kernel time enqueued while each op ran: launch calls on the op's thread that start inside
    it, its own and those of the ops it calls (``aten::_scaled_dot_product_efficient_attention``
    launches through ``aten::_efficient_attention_forward``, whose External id differs)."""
    g, rt, cpu = view.gpu, view.runtime, view.cpu
    k = np.flatnonzero((g["cat"] == CAT_KERNEL) & (view.launch_row >= 0))
    per_call = np.bincount(view.launch_row[k], weights=g["dur_ns"][k], minlength=len(rt))
    out = np.zeros(len(ops))
    pid, tid = cpu["pid"][ops], cpu["tid"][ops]
    for p, t in set(zip(pid.tolist(), tid.tolist())):
        calls = np.flatnonzero((rt["pid"] == p) & (rt["tid"] == t))  # runtime rows are sorted by start
        cum = np.concatenate(([0.0], np.cumsum(per_call[calls])))
        mine = np.flatnonzero((pid == p) & (tid == t))
        starts = rt["start_ns"][calls]
        lo = np.searchsorted(starts, cpu["start_ns"][ops[mine]], side="left")
        hi = np.searchsorted(starts, cpu["end_ns"][ops[mine]], side="left")
        out[mine] = cum[hi] - cum[lo]
    return out


def innermost(view: TraceView, ops: np.ndarray) -> np.ndarray:
    """The rows of ``ops`` inside which no other row of ``ops`` runs on the same thread.

    Ops on one thread nest like a call stack, so an op encloses another exactly when the next op
    by start (ties: the longer first) starts before it ends.
    """
    cpu = view.cpu
    pid, tid, start, end = (cpu[k][ops] for k in ("pid", "tid", "start_ns", "end_ns"))
    order = np.lexsort((-end, start, tid, pid))
    pid, tid, start, end = pid[order], tid[order], start[order], end[order]
    encloses = np.zeros(len(ops), bool)
    encloses[:-1] = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1]) & (start[1:] < end[:-1])
    return np.sort(ops[order][~encloses])


def roofline(view: TraceView, peak: Peak | None) -> dict[str, Any]:
    cpu = view.cpu
    with_flops = np.flatnonzero((cpu["cat"] == CAT_CPU_OP) & np.isfinite(cpu["flops"]) & (cpu["flops"] > 0))
    ops = innermost(view, with_flops)
    out: dict[str, Any] = {"ops_with_flops": int(len(ops)), "enclosing_ops_skipped": int(len(with_flops) - len(ops)),
                           "device": peak.device if peak else None,
                           "ridge_flop_per_byte": peak.ridge_flop_per_byte if peak else None,
                           "peak_source": peak.source if peak else None, "ops": []}
    if not len(ops):
        return out
    flops, nbytes = cpu["flops"][ops], cpu["bytes"][ops]
    gpu_ns = _op_gpu_ns(view, ops) if view.has_gpu else np.zeros(len(ops))
    time_ns = np.where(gpu_ns > 0, gpu_ns, cpu["dur_ns"][ops])
    has_bytes = np.isfinite(nbytes) & (nbytes > 0)
    out["flops"] = float(flops.sum())
    out["bytes"] = float(nbytes[has_bytes].sum())
    out["intensity_flop_per_byte"] = (float(flops[has_bytes].sum() / nbytes[has_bytes].sum())
                                      if has_bytes.any() else None)
    out["achieved_flops_per_s"] = float(flops.sum() / (time_ns.sum() / 1e9)) if time_ns.sum() > 0 else None
    # per call, so one op name's batch-1 calls (decode) and long-prompt calls (prefill) stay apart
    low = has_bytes & (flops < LOW_INTENSITY_FLOP_PER_BYTE * np.where(has_bytes, nbytes, 0.0))
    out["time_s"] = float(time_ns.sum() / 1e9)
    out["low_intensity_time_s"] = float(time_ns[low].sum() / 1e9)
    out["time_basis"] = "gpu kernels" if gpu_ns.sum() > 0 else "host op duration (no kernels linked)"
    prec = cpu["precision"][ops]
    out["flops_by_precision"] = {PRECISIONS[c]: float(flops[prec == c].sum()) for c in np.unique(prec).tolist()}
    if peak and out["intensity_flop_per_byte"] is not None:
        out["bound"] = "compute" if out["intensity_flop_per_byte"] >= peak.ridge_flop_per_byte else "bandwidth"
    names = cpu["name"][ops]
    rows: list[dict[str, Any]] = []
    for nid in np.unique(names).tolist():
        m = names == nid
        f, b, t = flops[m].sum(), nbytes[m & has_bytes].sum(), time_ns[m].sum()
        rows.append({"op": view.name(nid), "count": int(m.sum()), "flops": float(f), "bytes": float(b),
                     "precision": PRECISIONS[int(np.bincount(prec[m], weights=flops[m]).argmax())],
                     "intensity_flop_per_byte": float(f / b) if b > 0 else None,
                     "achieved_flops_per_s": float(f / (t / 1e9)) if t > 0 else None})
    out["ops"] = sorted(rows, key=lambda r: -r["flops"])[:TOP_OPS]
    return out


__all__ = ["LOW_INTENSITY_FLOP_PER_BYTE", "Peak", "roofline"]
