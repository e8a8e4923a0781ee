"""FLOP formulas beyond the matmul family, checked against torch's own counts on a CPU trace recorded
here with torch 2.13 and on a CUDA trace recorded on an H200 (fixtures/flops/); nested ops counted
once; roofline ridges from trace device properties."""
from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from diagnose.signals.kernel_timeline import trace_signals
from diagnose.signals.timeline import device_peak
from diagnose.traces.flops import op_flops_bytes
from diagnose.traces.reader import read_trace
from diagnose.traces.report import analyze_trace
from helpers import REPO, WORKLOADS, run_diagnose
from kineto_helpers import MI250, RANK0, shared, write

CUDA_FIXTURE = REPO / "fixtures" / "flops" / "h200-cuda"


@pytest.fixture(scope="module", params=["cpu, recorded now", "cuda, fixtures/flops/h200-cuda"])
def recorded(request, tmp_path_factory):
    """A trace of conv/linear/matmul/sdpa/add/mul and torch's counts for the same calls."""
    if request.param.startswith("cuda"):
        return CUDA_FIXTURE / "trace.json.gz", json.loads((CUDA_FIXTURE / "torch_flops.json").read_text())
    pytest.importorskip("torch", reason="torch records the trace")
    out = tmp_path_factory.mktemp("flops")
    subprocess.run([sys.executable, str(WORKLOADS / "torch_flops_trace.py"), str(out)], check=True,
                   capture_output=True, timeout=120)
    return out / "trace.json", json.loads((out / "torch_flops.json").read_text())


def _per_op(trace_path) -> dict[str, list[float]]:
    raw = trace_path.read_bytes()
    out: dict[str, list[float]] = {}
    for e in json.loads(gzip.decompress(raw) if trace_path.suffix == ".gz" else raw)["traceEvents"]:
        if e.get("cat") == "cpu_op":
            out.setdefault(e["name"], []).append(op_flops_bytes(e["name"], e.get("args", {}))[0])
    return out


def test_op_flops_equal_torch_profiler_flops(recorded):
    """Per op name, what torch's profiler reports with with_flops=True (util.cpp computeFlops)."""
    trace, torch_counts = recorded
    ours = _per_op(trace)
    for op, flops in torch_counts["key_averages"].items():
        assert np.nansum(ours[op]) == flops, op
    # the conv2d.padding overload records padding="same" as "": torch and diagnose both skip it there
    assert sum(math.isnan(f) for f in ours["aten::conv2d"]) == 1


def test_wrappers_equal_what_they_dispatch_to(recorded):
    """FlopCounterMode counts the ops linear/matmul/conv2d dispatch to; the wrappers agree."""
    trace, torch_counts = recorded
    ours, fc = _per_op(trace), torch_counts["flop_counter"]
    assert sum(ours["aten::linear"]) == sum(ours["aten::addmm"]) == fc["aten.addmm"]
    assert sum(ours["aten::matmul"]) == sum(ours["aten::bmm"]) == fc["aten.bmm"]
    assert sum(ours["aten::convolution"]) == sum(ours["aten::_convolution"]) == fc["aten.convolution"]
    assert sum(ours["aten::scaled_dot_product_attention"]) == torch_counts["sdpa_math"]
    fused = [k for k in ours if k.startswith("aten::_scaled_dot_product_")]  # what sdpa dispatched to
    assert fused and sum(sum(ours[k]) for k in fused) == torch_counts["sdpa_math"]
    for name, flops in fc.items():  # FlopCounterMode has formulas for the CUDA kernels: the same
        if name.startswith("aten._scaled_dot_product_"):
            assert sum(ours[name.replace("aten.", "aten::")]) == flops


def test_roofline_counts_each_product_once(recorded):
    trace, torch_counts = recorded
    roof = analyze_trace(read_trace(trace), device_peak).tables["roofline"]
    elementwise = torch_counts["key_averages"]["aten::add"] + torch_counts["key_averages"]["aten::mul"]
    counted_sdpa = any(k.startswith("aten._scaled_dot_product_") for k in torch_counts["flop_counter"])
    expected = torch_counts["flop_counter_total"] + (0 if counted_sdpa else torch_counts["sdpa_math"]) + elementwise
    assert roof["flops"] == expected
    assert roof["enclosing_ops_skipped"] > 0  # linear, matmul, conv wrappers, sdpa
    names = {o["op"] for o in roof["ops"]}
    assert "aten::linear" not in names and "aten::scaled_dot_product_attention" not in names
    assert all(o["bytes"] > 0 for o in roof["ops"])
    if torch_counts["device"] != "cpu":  # kernels are linked to the innermost ops
        assert roof["time_basis"] == "gpu kernels" and roof["device"] == "H200"
        assert {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"} <= names


def _op(name: str, dims: list, types: list, concrete: list | None = None) -> dict:
    args = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "args": args}


def test_formulas_on_recorded_argument_layouts():
    f32 = "float"
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): no bias argument
    cudnn = _op("aten::cudnn_convolution", [[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], [], [], []],
                [f32, f32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
                ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    flops, nbytes = op_flops_bytes(cudnn["name"], cudnn["args"])
    assert flops == 2 * 8 * 32 * 16 * 16 * 16 * 9  # Hout = Wout = (32 + 2 - 2 - 1) // 2 + 1 = 16
    assert nbytes == 4 * (8 * 16 * 32 * 32 + 32 * 16 * 9 + 8 * 32 * 16 * 16)
    sdpa = _op("aten::_scaled_dot_product_efficient_attention", [[2, 8, 128, 64]] * 3 + [[], [], [], []],
               ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "Scalar"])
    flops, nbytes = op_flops_bytes(sdpa["name"], sdpa["args"])
    assert flops == 4 * 2 * 8 * 128 * 128 * 64 and nbytes == 2 * 4 * (2 * 8 * 128 * 64)
    bias_add = _op("aten::add", [[64], [32, 64], []], [f32, f32, "Scalar"], ["", "", "1"])
    assert op_flops_bytes("aten::add", bias_add["args"])[0] == 32 * 64  # the broadcast output


@pytest.mark.parametrize("name, dims, types, concrete", [
    ("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []], ["float"] * 2 + [""] * 5, None),
    ("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []], ["float"] * 2 + [""] * 5,
     ["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"]),  # stride 0
    ("aten::mm", [[4, 5], [6, 7]], ["float", "float"], None),  # inner dims differ
    ("aten::linear", [[4, 5], [6, 7], [6]], ["float"] * 3, None),
    ("aten::_scaled_dot_product_flash_attention", [[2, 4, 8, 16], [2, 4, 9, 32], [2, 4, 9, 16]],
     ["float"] * 3, None),
])
def test_shapes_that_do_not_fit_give_nan(name, dims, types, concrete):
    ev = _op(name, dims, types, concrete)
    flops, nbytes = op_flops_bytes(name, ev["args"])
    assert math.isnan(flops) and math.isnan(nbytes)


def test_nested_ops_count_once_per_thread(tmp_path):
    mm = {"Input Dims": [[16], [4, 8], [8, 16]], "Input type": ["float"] * 3}
    lin = {"Input Dims": [[4, 8], [16, 8], [16]], "Input type": ["float"] * 3}
    events = [
        dict(_op("aten::linear", lin["Input Dims"], lin["Input type"]), ts=100.0, dur=50.0),
        dict(_op("aten::addmm", mm["Input Dims"], mm["Input type"]), ts=110.0, dur=30.0),
        dict(_op("aten::linear", lin["Input Dims"], lin["Input type"]), tid=2, ts=120.0, dur=10.0),  # no child
    ]
    roof = analyze_trace(read_trace(write(tmp_path / "nested.json.gz", {}, events))).tables["roofline"]
    assert roof["flops"] == 2 * (2 * 4 * 8 * 16) and roof["enclosing_ops_skipped"] == 1
    assert {o["op"]: o["count"] for o in roof["ops"]} == {"aten::addmm": 1, "aten::linear": 1}


def test_mi250_trace_gets_a_ridge_from_its_device_facts():
    """ROCm named the devices "AMD Radeon Graphics"; GFXIP 9.0, 104 CUs and 64 GiB identify an MI250
    GCD (or an MI210: same per-device figures)."""
    trace = read_trace(shared(MI250))
    assert trace.meta.devices[0] == "AMD Radeon Graphics"
    dev = trace.meta.device_props[0]
    assert (dev.compute, dev.sm_count, dev.mem_gib) == ((9, 0), 104, 64)
    report = analyze_trace(trace, device_peak)
    roof = report.tables["roofline"]
    assert roof["device"] == "MI250 (one GCD) or MI210"
    assert roof["ridge_flop_per_byte"] == pytest.approx(362.1 / 3.2)
    assert roof["flops"] == 2 * (2 * 5 * 128 * 128)  # linear -> addmm [5,128]x[128,128]; mm in backward
    assert roof["enclosing_ops_skipped"] == 1  # the aten::linear around the addmm
    ratio = trace_signals([report], "")["kernels.intensity_to_ridge_ratio"]
    assert ratio.value == pytest.approx(roof["intensity_flop_per_byte"] / roof["ridge_flop_per_byte"])


def test_analyze_cli_reports_the_mi250_ridge(tmp_path):
    res = run_diagnose("analyze", str(shared(MI250)), "--format", "json", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    ratio = doc["signals"]["kernels.intensity_to_ridge_ratio"]
    assert ratio["value"] is not None and ratio["value"] < 0.1, ratio  # a toy model far below the ridge
    roof = doc["details"]["torch_traces"][0]["roofline"]
    assert roof["ridge_flop_per_byte"] == pytest.approx(113.16, abs=0.01) and "MI250" in roof["peak_source"]


def test_v100_trace_device_is_found():
    trace = read_trace(shared(RANK0))
    assert trace.meta.devices[0] == "Tesla V100-SXM2-32GB"
    roof = analyze_trace(trace, device_peak).tables["roofline"]
    assert roof["device"] == "V100 SXM2" and roof["ridge_flop_per_byte"] == pytest.approx(125 / 0.9)


def test_flops_split_by_the_precision_of_the_inputs(recorded):
    """The recorded calls run in float32, except on CUDA the bf16 attention: the split adds up to the
    total, and kernels.fp32_flops_pct is the float32 share."""
    trace, _ = recorded
    report = analyze_trace(read_trace(trace), device_peak)
    roof = report.tables["roofline"]
    by = roof["flops_by_precision"]
    assert sum(by.values()) == pytest.approx(roof["flops"])
    fp32 = trace_signals([report], "")["kernels.fp32_flops_pct"].value
    if trace.parent != CUDA_FIXTURE:  # torch_flops_trace.py keeps attention in float32 on CPU
        assert set(by) == {"fp32"} and fp32 == 100.0
        return
    assert set(by) == {"fp32", "bf16"}
    attention = [o for o in roof["ops"] if "attention" in o["op"] and o["precision"] == "bf16"]
    assert attention and sum(o["flops"] for o in attention) <= by["bf16"]
    assert fp32 == pytest.approx(100.0 * by["fp32"] / (by["fp32"] + by["bf16"])) and 0 < fp32 < 100


@pytest.mark.parametrize("types, code", [
    (["float", "float", "Scalar"], 2), (["Scalar", "c10::BFloat16"], 4), (["long int", "c10::Half"], 3),
    (["c10::Float8_e4m3fnuz", "float"], 5), (["double"], 1), (["long int", ""], 0), ("float", 0), (None, 0),
])
def test_precision_is_the_first_floating_input(types, code):
    from diagnose.traces.op_args import precision_code

    assert precision_code({"Input type": types}) == code
