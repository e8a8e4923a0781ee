"""Kernel categories, memcpy, launches (correlation and flows), syncs, steps, gaps and roofline on
real traces and snippets of them."""
from __future__ import annotations

import numpy as np
import pytest

from diagnose.catalogs.kernels import KERNEL_CATALOG
from diagnose.signals.kernel_timeline import trace_signals
from diagnose.signals.timeline import device_peak
from diagnose.traces.reader import read_trace
from diagnose.traces.report import TimelineOptions, analyze_trace
from diagnose.traces.view import build_view
from kineto_helpers import BENCH, NCCL, RANK0, RANK_NOT_FOUND, shared, snippet, write


def test_kernel_categories_on_a_ddp_trace():
    r = analyze_trace(read_trace(shared(NCCL)))
    cats = {c["category"]: c for c in r.tables["kernel_categories"]["categories"]}
    assert cats["collective"]["group"] == "communication" and cats["collective"]["count"] == 21
    assert {"gemm", "conv", "norm", "elementwise", "memcpy", "memset"} <= set(cats)
    groups = r.tables["kernel_categories"]["groups"]
    assert abs(sum(g["share_pct"] for g in groups.values()) - 100.0) < 1e-6
    assert r.tables["top_kernels"][0]["name"].startswith("ncclKernel_AllReduce")
    memcpy = r.tables["memcpy"]
    assert memcpy[0]["direction"] == "DtoD" and memcpy[0]["count"] == 960 and memcpy[0]["bytes"] > 0


def test_catalog_is_data_with_known_groups():
    assert all(p.group in ("compute", "memory", "communication", "sync") for p in KERNEL_CATALOG)


def test_memcpy_direction_and_pageable_and_syncs():
    r = analyze_trace(read_trace(shared(BENCH)))
    rows = {(m["direction"], m["host_memory"]): m for m in r.tables["memcpy"]}
    assert rows[("HtoD", "pageable")]["count"] == 16
    syncs = r.tables["syncs"]
    calls = {c["name"]: c for c in syncs["calls"]}
    assert calls["cudaStreamSynchronize"]["count"] == 16 and calls["cudaDeviceSynchronize"]["count"] == 5
    assert {e["name"] for e in syncs["sync_events"]} >= {"Stream Sync", "Context Sync"}
    assert syncs["host_blocked_ns"] == sum(c["time_ns"] for c in syncs["calls"])


def test_launch_delay_short_kernels_and_kernels_per_step():
    r = analyze_trace(read_trace(shared(NCCL)))
    la = r.tables["launches"]
    assert la["linked_pct"] == 100.0 and la["kernels"] == 2700
    assert 0 < la["launch_delay"]["p50_us"] <= la["launch_delay"]["p99_us"] <= la["launch_delay"]["max_us"]
    assert 0 < la["short_kernel_pct"] < 100
    per_step = {s["step"]: s["kernels"] for s in la["kernels_per_step"]}
    assert set(per_step) == {4, 5, 6} and all(v > 500 for v in per_step.values())
    steps = r.tables["steps"]
    assert steps["count"] == 3 and steps["p50_ms"] > 100 and 0 < steps["gpu_busy_pct"] < 100


def test_flows_link_kernels_when_correlation_args_are_missing(tmp_path):
    meta, events = snippet(RANK0, lambda e: e.get("cat") in ("kernel", "cuda_runtime", "ac2g"), 3000)
    for e in events:  # an older trace: links only through the ac2g flows
        if e.get("cat") in ("kernel", "cuda_runtime"):
            e["args"] = {k: v for k, v in e.get("args", {}).items() if k != "correlation"}
    tr = read_trace(write(tmp_path / "flows.json.gz", meta, events))
    assert (tr.gpu["correlation"] == -1).all() and (tr.runtime["correlation"] == -1).all()
    assert len(tr.flows) > 0
    view = build_view(tr)
    kernels = view.gpu["cat"] == 0
    linked = view.launch_row[kernels] >= 0
    assert linked.mean() > 0.9
    names = {view.name(int(n)) for n in view.runtime["name"][view.launch_row[kernels][linked]]}
    assert names <= {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}
    delays = view.gpu["start_ns"][kernels][linked] - view.runtime["start_ns"][view.launch_row[kernels][linked]]
    assert (delays >= 0).all()


def test_idle_gaps_have_bounds_and_host_attribution():
    r = analyze_trace(read_trace(shared(NCCL)), options=TimelineOptions(gap_min_ns=1_000_000))
    g = r.gaps
    assert len(g.start_ns) > 0 and (g.end_ns - g.start_ns >= 1_000_000).all()
    assert (g.start_ns[1:] > g.end_ns[:-1]).all()
    assert r.temporal.first_start_ns <= g.start_ns[0] and g.end_ns[-1] <= r.temporal.last_end_ns
    rows = r.tables["gaps"]
    assert rows and all(row["dur_us"] >= 1000 for row in rows)
    assert any(row["host_op"] for row in rows)
    assert r.tables["host_in_gaps"] and r.tables["host_in_gaps"][0]["share_pct"] > 0


def test_flops_from_input_dims_and_roofline_ridge(tmp_path):
    meta, events = snippet(RANK_NOT_FOUND, lambda e: e.get("name") in ("aten::addmm", "aten::mm", "aten::bmm"), 50)
    meta["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    r = analyze_trace(read_trace(write(tmp_path / "mm.json.gz", meta, events)),
                      peak_of=device_peak)
    roof = r.tables["roofline"]
    addmm = next(e for e in events if e["name"] == "aten::addmm")
    (m, k), (_, n) = addmm["args"]["Input Dims"][1], addmm["args"]["Input Dims"][2]
    row = next(o for o in roof["ops"] if o["op"] == "aten::addmm")
    assert row["flops"] >= 2 * m * k * n
    assert roof["ridge_flop_per_byte"] == 312e12 / 2.039e12 and roof["device"] == "A100 80GB SXM"
    assert roof["intensity_flop_per_byte"] > 0 and roof["bound"] in ("compute", "bandwidth")
    assert roof["time_basis"].startswith("host op duration")
    sig = trace_signals([r], "")
    ratio = roof["intensity_flop_per_byte"] / roof["ridge_flop_per_byte"]
    assert sig["kernels.intensity_to_ridge_ratio"].value == ratio


def test_signals_combine_ranks_time_weighted():
    a = analyze_trace(read_trace(shared(NCCL)))
    b = analyze_trace(read_trace(shared(RANK0)))
    sig = trace_signals([a, b], "")
    total = a.temporal.span_ns + b.temporal.span_ns
    expected = 100.0 * (a.temporal.idle_ns + b.temporal.idle_ns) / total
    assert np.isclose(sig["gpu.idle_pct"].value, expected)
    assert sig["gpu.idle_pct"].unit == "%" and "Kineto" in sig["gpu.idle_pct"].source


def test_low_intensity_time_is_counted_per_call_not_per_op_name(tmp_path):
    """One op name, two shapes: a batch-1 addmm (a matrix-vector product, ~0.5 FLOP/byte) for 9 ms and a
    batch-512 one (~170 FLOP/byte) for 1 ms. Summed per name the addmm is compute-bound; per call, 90% of
    the op time is memory-bound (decode beside prefill)."""
    f32 = "float"

    def addmm(rows: int, ts: int, dur: int) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Input Dims": [[1024], [rows, 1024], [1024, 1024]], "Input type": [f32, f32, f32]}}

    events = [addmm(1, 0, 9000), addmm(512, 10000, 1000)]
    r = analyze_trace(read_trace(write(tmp_path / "mv.json.gz", {"schemaVersion": 1}, events)), peak_of=device_peak)
    roof = r.tables["roofline"]
    assert roof["intensity_flop_per_byte"] > 1.0  # FLOP-weighted: the batched call's FLOPs dominate
    assert roof["time_s"] == pytest.approx(0.010) and roof["low_intensity_time_s"] == pytest.approx(0.009)
    assert trace_signals([r], "")["kernels.low_intensity_time_pct"].value == pytest.approx(90.0)
