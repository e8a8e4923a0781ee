"""Hostile analysis inputs found by the break-it review: every one is a clear line or an unknown
value, never a traceback, a lost source, a runaway regex or a verdict flipped by nonsense."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.catalogs.gpu_specs import GPU_SPECS, SpecError, find_spec, parse_overrides
from diagnose.traces.flops import op_flops_bytes
from diagnose.verdict.analyze import analyze
from helpers import run_diagnose
from kineto_helpers import write

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
BASE_NS = 1_700_000_000_000_000_000


def _copy(label: str, tmp_path: Path) -> Path:
    src = FIXTURES / label
    if not src.is_dir():
        pytest.skip(f"no recorded GPU bundle {label}")
    return shutil.copytree(src, tmp_path / label)


@pytest.mark.parametrize("content", [
    '{"timeline:gpu_gap_min_us": 1e308}',
    '{"timeline:gpu_gap_min_us": ' + "9" * 400 + "}",
    '{"service.gil_bound:cpu.python_busy_pct": ' + "9" * 400 + "}",
    "[" * 100_000 + "]" * 100_000,
], ids=["1e308-us", "400-digit-param", "400-digit-rule", "deep-nesting"])
def test_absurd_threshold_files_are_one_line_exit_2(tmp_path, content):
    f = tmp_path / "t.json"
    f.write_text(content)
    res = run_diagnose("analyze", str(tmp_path / "nothing"), "--thresholds", str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_threshold_file_must_be_a_regular_file(tmp_path, special):
    path = tmp_path / "fifo" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)  # no writer: reading it would block forever
    res = run_diagnose("analyze", str(tmp_path / "nothing"), "--thresholds", str(path), timeout=30)
    assert res.returncode == 2 and "not a regular file" in res.stderr


@pytest.mark.parametrize("row", [
    {"mem_tb_per_s": 0}, {"mem_tb_per_s": -4.8}, {"mem_tb_per_s": float("nan")}, {"dense_bf16_tflops": True},
    {"mem_tb_per_s": 1e400}, {"match": None}, {"match": ""},
])
def test_gpu_spec_rows_need_positive_finite_figures_and_a_pattern(row):
    base = {"model": "X", "match": "H200", "dense_bf16_tflops": 989, "mem_tb_per_s": 4.8, "source": "t"}
    with pytest.raises(SpecError, match="row 0"):
        parse_overrides([{**base, **row}])


def test_a_zero_bandwidth_override_leaves_the_compute_verdict_alone(tmp_path):
    b = _copy("compute-bf16-matmul", tmp_path)
    (b / "gpu_specs.json").write_text(json.dumps(
        [{"model": "X", "match": "H200", "dense_bf16_tflops": 989, "mem_tb_per_s": 0, "source": "t"}]))
    a = analyze(Bundle.open(b))
    assert a.verdict.quadrant.value == "compute"
    assert not a.data_quality.streams.source_errors


def test_long_device_names_cannot_make_the_spec_patterns_backtrack():
    assert find_spec("A100 80GB " * 4000, GPU_SPECS) is not None  # cut to 256 characters first


@pytest.mark.parametrize("args", [
    {"Input Dims": [[2] * 1100, [2] * 1100], "Input type": ["float", "float"]},  # 2**1100 elements
    {"Input Dims": [[2 ** 62, 4], [4, 2 ** 62]], "Input type": ["float", "float"]},
    {"flops": int("9" * 400)},
    {"flops": 1e308},
])
def test_impossible_op_shapes_give_unknown_flops(args):
    name = "aten::mm" if len(args.get("Input Dims", [[0]])[0]) == 2 else "aten::mul"
    flops, nbytes = op_flops_bytes(name, args)
    assert flops != flops  # NaN: not a number shown as fact


def test_one_lone_kernel_does_not_make_the_gpu_busy(tmp_path):
    """Keeping only the first GPU event of the service recording: "0% idle" over one kernel must
    not demote the CPU findings (GPM says SM activity 0.006%)."""
    b = _copy("service-tiny-kernels", tmp_path)
    p = b / "torch" / "trace-0001.json.gz"
    doc = json.loads(gzip.decompress(p.read_bytes()))
    gpu = [i for i, e in enumerate(doc["traceEvents"])
           if isinstance(e, dict) and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    drop = set(gpu[1:])
    doc["traceEvents"] = [e for i, e in enumerate(doc["traceEvents"]) if i not in drop]
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    a = analyze(Bundle.open(b))
    assert a.signals["gpu.idle_pct"].value == 0.0 and a.signals["gpu.kernel_window_pct"].value < 25.0
    gil = next(f for f in a.findings if f.rule_id == "service.gil_bound")
    assert gil.quadrant is not None and "Not the limit" not in gil.summary
    assert a.verdict.quadrant.value == "service"


def test_zero_length_gpu_events_and_monster_names_cost_nothing_else(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "MIOpen" * 40_000, "pid": 0, "tid": 7, "ts": 10.0, "dur": 0.0,
         "args": {"stream": 7, "device": 0, "correlation": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 5.0, "dur": 20.0,
         "args": {"Input Dims": [[2] * 1100, [2] * 1100], "Input type": ["float", "float"], "External id": 1}},
    ]
    trace = write(tmp_path / "t.json.gz", {"baseTimeNanoseconds": BASE_NS}, events)
    res = run_diagnose("analyze", str(trace), "--out", str(tmp_path), "--format", "json", timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert not doc["data_quality"]["streams"]["source_errors"], doc["data_quality"]
    assert "span 0 ns" in doc["signals"]["gpu.idle_pct"]["reason"]
    names = [k["name"] for t in doc["details"]["torch_traces"] for k in t["top_kernels"]]
    assert names and all(len(n) <= 4096 for n in names)
