"""Timeline findings say only what their evidence supports: launch overhead needs short gaps, a
compute verdict needs kernels that span the profiled time, a sync on a busy GPU is context, and a
finding another layer overrules keeps its text but loses its quadrant and remedies."""
from __future__ import annotations

import json

import pytest

from diagnose.bundle import Bundle
from diagnose.verdict.analyze import analyze
from helpers import run_diagnose
from kineto_helpers import shared, write

BASE_NS = 1_700_000_000_000_000_000


def _launch_bound_trace(gap_us: float, n: int = 400) -> list[dict]:
    """``n`` 4 us kernels, each launched by a 3 us cudaLaunchKernel right after the previous ended."""
    events, t = [], 0.0
    for i in range(n):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t, "dur": 3.0, "args": {"correlation": i + 1, "External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel",
                       "pid": 0, "tid": 7, "ts": t + 3.5, "dur": 4.0,
                       "args": {"stream": 7, "device": 0, "correlation": i + 1}})
        t += 7.5 + gap_us
    return events


def _analyze(tmp_path, events) -> dict:
    trace = write(tmp_path / "t.json.gz", {"baseTimeNanoseconds": BASE_NS, "schemaVersion": 1}, events)
    res = run_diagnose("analyze", str(trace), "--out", str(tmp_path), "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_tiny_kernels_with_short_gaps_are_launch_bound(tmp_path):
    doc = _analyze(tmp_path, _launch_bound_trace(gap_us=12.0))
    s = doc["signals"]
    assert s["kernels.short_kernel_pct"]["value"] == 100.0
    assert s["gpu.short_gap_idle_pct"]["value"] > 50 and s["gpu.idle_gap_share"]["value"] == 0.0
    assert "secondary.launch_bound" in {f["rule_id"] for f in doc["findings"]}


def test_tiny_kernels_between_long_host_gaps_are_not_called_launch_bound(tmp_path):
    doc = _analyze(tmp_path, _launch_bound_trace(gap_us=400.0))
    s = doc["signals"]
    assert s["kernels.short_kernel_pct"]["value"] == 100.0 and s["gpu.idle_gap_share"]["value"] > 90
    assert s["gpu.short_gap_idle_pct"]["value"] < 5
    fired = {f["rule_id"] for f in doc["findings"]}
    assert "secondary.launch_bound" not in fired and "service.gpu_starved_by_host" in fired


def test_one_short_kernel_burst_in_a_long_trace_gives_no_compute_verdict(tmp_path):
    """backward_thread.json: one 45 us GEMM inside a 413 ms ProfilerStep."""
    res = run_diagnose("analyze", str(shared("backward_thread.json")), "--out", str(tmp_path), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["signals"]["gpu.kernel_window_pct"]["value"] < 1
    assert doc["verdict"]["quadrant"] != "compute"
    assert "compute.gpu_compute_kernels" not in {f["rule_id"] for f in doc["findings"]}


@pytest.fixture
def bandwidth_bundle(tmp_path):
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "bandwidth-copy-gather"
    if not src.is_dir():
        pytest.skip("no recorded GPU bundle (fixtures/gpu)")
    return Bundle.open(shutil.copytree(src, tmp_path / "b"))


def test_overruled_findings_keep_their_evidence_but_no_quadrant_or_remedies(bandwidth_bundle):
    a = analyze(bandwidth_bundle)
    assert a.verdict.quadrant.value == "bandwidth"
    gil = next(f for f in a.findings if f.rule_id == "service.gil_bound")
    assert gil.quadrant is None and gil.severity.value == "info" and gil.suggestions == ()
    assert "Not the limit here: gpu.sm_active_pct was" in gil.summary and "the GPU is the busy side" in gil.summary
    assert gil.evidence[-1].signal == "gpu.sm_active_pct" and gil.evidence[-1].op == ">="
    sync = next(f for f in a.findings if f.rule_id == "secondary.host_syncs")
    assert "the GPU was busy" in sync.summary and sync.suggestions == ()


def test_report_lists_the_longest_gaps_longest_first(tmp_path):
    res = run_diagnose("analyze", str(shared("nccl_data.json.gz")), "--out", str(tmp_path), "--format", "md-full")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("GPU idle gaps >= "))
    rows = [line for line in lines[head + 4:head + 14] if line.startswith("| ")]
    lengths = [float(r.split("|")[2].strip().split()[0]) for r in rows]
    assert len(lengths) >= 5 and lengths == sorted(lengths, reverse=True)
    assert lengths[0] > 15  # the 15.5 ms and longer gaps come first


def _busy_gpu_with_a_long_sync(n: int = 200) -> list[dict]:
    """``n`` back-to-back 100 us kernels launched up front, then the host blocks in one
    cudaDeviceSynchronize until the last ends: the GPU never idles, the host waits on it."""
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 2.0 * i, "dur": 1.5, "args": {"correlation": i + 1, "External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
                       "pid": 0, "tid": 7, "ts": 5.0 + 100.0 * i, "dur": 100.0,
                       "args": {"stream": 7, "device": 0, "correlation": i + 1}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                   "ts": 2.0 * n, "dur": 5.0 + 100.0 * n - 2.0 * n, "args": {"correlation": n + 1}})
    return events


def test_an_all_of_unless_group_demotes_only_when_every_condition_holds(tmp_path):
    """GPU_BUSY's timeline entry is a group: idle <= 10% AND the kernel window covers >= 25%."""
    doc = _analyze(tmp_path, _busy_gpu_with_a_long_sync())
    s = doc["signals"]
    assert s["gpu.idle_pct"]["value"] < 1 and s["gpu.kernel_window_pct"]["value"] > 90
    sync = next(f for f in doc["findings"] if f["rule_id"] == "secondary.host_syncs")
    assert sync["suggestions"] == [] and "gpu.idle_pct was 0% (<= 10) and gpu.kernel_window_pct was" in sync["summary"]
    assert [e["signal"] for e in sync["evidence"][-2:]] == ["gpu.idle_pct", "gpu.kernel_window_pct"]


def test_an_unless_group_with_one_condition_unmet_does_not_demote():
    from diagnose.model import Signal
    from diagnose.rules.gpu import GPU_BUSY
    from diagnose.rules.timeline import TIMELINE_RULES

    rule = next(r for r in TIMELINE_RULES if r.id == "secondary.host_syncs")
    assert rule.unless == GPU_BUSY
    sig = lambda n, v: Signal(n, v, "%", "test")  # noqa: E731
    lone_kernel = {"gpu.idle_pct": sig("gpu.idle_pct", 0.0),
                   "gpu.kernel_window_pct": sig("gpu.kernel_window_pct", 0.01)}
    assert rule.overruled_by(lone_kernel) is None
    busy = {**lone_kernel, "gpu.kernel_window_pct": sig("gpu.kernel_window_pct", 80.0)}
    assert [c.signal for c, _ in rule.overruled_by(busy)] == ["gpu.idle_pct", "gpu.kernel_window_pct"]
    assert [c.signal for c, _ in rule.overruled_by({"gpu.sm_active_pct": sig("gpu.sm_active_pct", 70.0)})] == [
        "gpu.sm_active_pct"]


def _collective_step(overlapped: bool) -> list[dict]:
    """Per step: a 400 us GEMM, a 400 us NCCL all-reduce (on its own stream; beside the GEMM when
    ``overlapped``, after it otherwise) and one backward op on the host (a training loop)."""
    events, t = [], 0.0
    for i in range(20):
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
                       "pid": 1, "tid": 1, "ts": t, "dur": 50.0, "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
                       "pid": 0, "tid": 7, "ts": t, "dur": 400.0, "args": {"stream": 7, "device": 0}})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                       "pid": 0, "tid": 20, "ts": t if overlapped else t + 400.0, "dur": 400.0,
                       "args": {"stream": 20, "device": 0}})
        t += 800.0
    return events


def test_exposed_collectives_give_a_finding_and_overlapped_ones_do_not(tmp_path):
    exposed = _analyze(tmp_path, _collective_step(overlapped=False))
    s = exposed["signals"]
    assert s["gpu.comm_overlap_pct"]["value"] == 0.0
    assert s["gpu.comm_exposed_pct"]["value"] == pytest.approx(50.0, abs=0.1)
    f = next(f for f in exposed["findings"] if f["rule_id"] == "secondary.comm_exposed")
    assert "bucket_cap_mb" in f["suggestions"][0]  # a training loop: DDP/FSDP overlap settings
    (tmp_path / "o").mkdir()
    overlapped = _analyze(tmp_path / "o", _collective_step(overlapped=True))
    s = overlapped["signals"]
    assert s["gpu.comm_overlap_pct"]["value"] == 100.0 and s["gpu.comm_exposed_pct"]["value"] == 0.0
    assert "secondary.comm_exposed" not in {f["rule_id"] for f in overlapped["findings"]}


def test_a_few_exposed_microseconds_of_collectives_are_no_finding(tmp_path):
    """large_integer_rank-70: 0.05 ms of NCCL and nothing else is 100% exposed, and says nothing."""
    res = run_diagnose("analyze", str(shared("large_integer_rank-70.pt.trace.json.gz")), "--out", str(tmp_path),
                       "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["signals"]["gpu.comm_exposed_pct"]["value"] == 100.0
    assert doc["signals"]["gpu.comm_exposed_ms"]["value"] < 1
    assert "secondary.comm_exposed" not in {f["rule_id"] for f in doc["findings"]}
