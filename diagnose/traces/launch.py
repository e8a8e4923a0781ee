"""Host-side view of the GPU: launch delays, short kernels, kernels per step, blocking syncs.

Launch delay is the time from the start of the host call that enqueued a kernel to the kernel's
start on the GPU (CUPTI correlation): small when the GPU keeps up with the host, large when the
queue is deep. Kernels shorter than ``SHORT_KERNEL_NS`` cost about as much to launch as to run.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from diagnose.traces.intervals import merge
from diagnose.traces.schema import CAT_KERNEL, CAT_MEMCPY, CAT_SYNC
from diagnose.traces.view import TraceView, launch_mask, steps, sync_mask

SHORT_KERNEL_NS = 10_000
OUTLIER_MIN_NS = 1_000_000  # a launch delay past both this and the P99 is reported
MAX_OUTLIERS = 5
_D2H_PAGEABLE = re.compile(r"DtoH.*Pageable")


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    if not len(values):
        return {"p50_us": None, "p90_us": None, "p99_us": None, "max_us": None}
    p = np.percentile(values, [50, 90, 99])
    return {"p50_us": p[0] / 1e3, "p90_us": p[1] / 1e3, "p99_us": p[2] / 1e3, "max_us": values.max() / 1e3}


def launch_stats(view: TraceView, short_kernel_ns: int = SHORT_KERNEL_NS) -> dict[str, Any]:
    """Launch delay and call percentiles, short kernels (< ``short_kernel_ns``), kernels per step."""
    g = view.gpu
    kern = np.flatnonzero(g["cat"] == CAT_KERNEL)
    linked = kern[view.launch_row[kern] >= 0]
    rt = view.launch_row[linked]
    delay = g["start_ns"][linked] - view.runtime["start_ns"][rt]
    calls = view.runtime["dur_ns"][launch_mask(view)]
    short = g["dur_ns"][kern] < short_kernel_ns
    out: dict[str, Any] = {
        "kernels": int(len(kern)),
        "launch_calls": int(len(calls)),  # host calls that enqueue kernels or copies (catalogs/kernels.py)
        "linked_pct": 100.0 * len(linked) / len(kern) if len(kern) else None,
        "launch_delay": _pcts(delay),
        "launch_call": _pcts(calls),
        "short_kernel_threshold_us": short_kernel_ns / 1e3,
        "short_kernels": int(short.sum()),
        "short_kernel_pct": 100.0 * short.mean() if len(kern) else None,
        "mean_kernel_us": float(g["dur_ns"][kern].mean() / 1e3) if len(kern) else None,
        "outliers": [],
        "kernels_per_step": kernels_per_step(view, linked),
    }
    if len(delay):
        cut = max(float(np.percentile(delay, 99)), OUTLIER_MIN_NS)
        worst = np.argsort(-delay)[:MAX_OUTLIERS]
        out["outliers"] = [{"kernel": view.name(int(g["name"][linked[i]])), "delay_us": delay[i] / 1e3,
                            "start_ns": int(g["start_ns"][linked[i]])} for i in worst if delay[i] > cut]
    return out


def kernels_per_step(view: TraceView, linked: np.ndarray) -> list[dict[str, Any]]:
    """Kernels whose launch call started inside each ProfilerStep."""
    launch = view.runtime["start_ns"][view.launch_row[linked]]
    return [{"step": n, "kernels": int(((launch >= s) & (launch < e)).sum())} for n, s, e in steps(view)]


def sync_stats(view: TraceView, span_ns: int | None) -> dict[str, Any]:
    """Host calls that block until the GPU catches up, CUPTI sync events, and D2H to pageable."""
    rt = view.runtime
    m = sync_mask(view)
    calls: dict[str, list[int]] = {}
    for nid, dur in zip(rt["name"][m], rt["dur_ns"][m]):
        c = calls.setdefault(view.name(int(nid)), [0, 0])
        c[0] += 1
        c[1] += int(dur)
    # the union over threads: several threads blocked at once (an inference server's workers each
    # in synchronizeStream) are not several times the trace's host time
    bs, be = merge(rt["start_ns"][m], rt["end_ns"][m])
    blocked = int((be - bs).sum())
    g = view.gpu
    sync_ev: dict[str, list[int]] = {}
    for nid, dur in zip(g["name"][g["cat"] == CAT_SYNC], g["dur_ns"][g["cat"] == CAT_SYNC]):
        c = sync_ev.setdefault(view.name(int(nid)), [0, 0])
        c[0] += 1
        c[1] += int(dur)
    d2h = (g["cat"] == CAT_MEMCPY) & view.name_mask(g, _D2H_PAGEABLE)
    return {
        "host_blocked_ns": blocked,
        "host_blocked_pct": 100.0 * blocked / span_ns if span_ns else None,
        "calls": [{"name": k, "count": v[0], "time_ns": v[1]}
                  for k, v in sorted(calls.items(), key=lambda kv: -kv[1][1])],
        "sync_events": [{"name": k, "count": v[0], "time_ns": v[1]} for k, v in sync_ev.items()],
        "d2h_pageable": {"count": int(d2h.sum()), "bytes": float(np.nansum(g["bytes"][d2h])),
                         "time_ns": int(g["dur_ns"][d2h].sum())},
    }


__all__ = ["SHORT_KERNEL_NS", "launch_stats", "sync_stats"]
