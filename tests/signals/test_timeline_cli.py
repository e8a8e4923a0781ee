"""`diagnose analyze <trace.json.gz> --format json` prints the kernel-timeline signals."""
from __future__ import annotations

import json

import pytest

from helpers import run_diagnose
from kineto_helpers import CPU_ONLY, NCCL, shared


def _analyze(tmp_path, *files: str) -> dict:
    res = run_diagnose("analyze", *files, "--format", "json", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_analyze_a_trace_file_prints_signals(tmp_path):
    doc = _analyze(tmp_path, str(shared(NCCL)))
    sig = doc["signals"]
    assert round(sig["gpu.idle_pct"]["value"], 1) == 77.2 and sig["gpu.idle_pct"]["unit"] == "%"
    assert sig["gpu.compute_pct"]["value"] + sig["gpu.non_compute_pct"]["value"] + sig["gpu.idle_pct"]["value"] == \
        pytest.approx(100.0)
    assert sig["kernels.group_share_pct[communication]"]["value"] > 20
    assert sig["gpu.idle_host_wait_pct"]["value"] > 95
    t = doc["details"]["torch_traces"][0]
    assert t["rank"] == 0 and t["temporal_hta_rounding"]["idle_pct"] == pytest.approx(77.78, abs=0.005)
    assert doc["verdict"]["quadrant"] == "service"
    assert any(f["rule_id"] == "service.gpu_starved_by_host" for f in doc["findings"])


def test_analyze_a_cpu_only_trace_says_no_gpu_activity(tmp_path):
    doc = _analyze(tmp_path, str(shared(CPU_ONLY)))
    gpu = doc["signals"]["gpu.idle_pct"]
    assert gpu["value"] is None and gpu["reason"].startswith("no GPU activity recorded")
    assert doc["verdict"]["quadrant"] != "compute"  # never "CPU-bound" by default
    assert not any(f["rule_id"].startswith("compute.") for f in doc["findings"])


def test_analyze_a_bundle_with_a_truncated_trace_reports_where_it_stopped(tmp_path):
    """A capture killed while the trace was written: the bundle's trace is cut short."""
    bundle = tmp_path / "b"
    (bundle / "torch").mkdir(parents=True)
    raw = shared(NCCL).read_bytes()
    (bundle / "torch" / "trace-0001.json.gz").write_bytes(raw[: len(raw) * 2 // 3])
    (bundle / "torch.jsonl").write_text(json.dumps({
        "file": "torch/trace-0001.json.gz", "start_ns": None, "end_ns": None, "base_time_ns": None,
        "activities": ["cpu", "cuda"], "torch_version": "recorded", "error": None}) + "\n")
    (bundle / "manifest.json").write_text(json.dumps({"schema_version": 1, "collectors": []}))
    res = run_diagnose("analyze", str(bundle), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    errors = doc["data_quality"]["torch"]["trace_errors"]
    assert errors and "truncated" in errors[0] and " at byte " in errors[0]
    t = doc["details"]["torch_traces"][0]
    assert t["read"]["truncated_at_byte"] > 0 and t["gpu_events"] > 0
    assert doc["signals"]["gpu.idle_pct"]["value"] is not None
