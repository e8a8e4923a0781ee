"""Device activity the trace did or did not record (issue 23).

A trace that launched device work but recorded no kernel, memcpy or memset (a CUPTI range-profiler
capture, or a profiler run without device activities) gets low confidence with the reason; a CPU-only
trace keeps its own. Other vendors' device tracks (MTIA's ``mtia_ccp_events`` and ``mtia_runtime``)
read as the device timeline, as CUDA's do: derived here from a real CUDA trace by renaming its
categories and calls the way MTIA traces name them, and on the MTIA traces of Holistic Trace
Analysis where ../shared/data has them."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from diagnose.traces.reader import read_trace
from diagnose.traces.report import analyze_trace
from kineto_helpers import BENCH, CPU_ONLY, RANK0, TRACES, load, shared

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
# Holistic Trace Analysis' tests/data files of these kinds (not in ../shared/data today: skipped there)
CUPTI_RANGE = "benchmark_result_924719_1679055439_trace.json.gz"
MTIA_INFERENCE = "mtia_inference_rank_0.json.gz"
MTIA_TRAINING = "mtia_rank_0.json.gz"
MTIA_CALLS = {"cudaLaunchKernel": "runFunction - job_prep_and_submit_for_execution",
              "cudaStreamSynchronize": "synchronizeStream", "cudaDeviceSynchronize": "synchronize"}


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return path


def _analyse(paths: list[Path], out: Path):
    from diagnose.bundle.importers import import_files
    from diagnose.pipeline import analyse

    out.mkdir(exist_ok=True)
    return analyse(import_files(paths, out), None).analysis


def _without_device(name: str, tmp_path: Path) -> Path:
    doc = load(name)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in DEVICE_CATS]
    return _write(doc, tmp_path / f"no-kernels-{name}")


def test_a_trace_that_launched_kernels_but_recorded_none_is_not_confident(tmp_path):
    """The A100 "add" benchmark with its kernel/memcpy/memset activity left out (CUPTI activities
    off): before, its host ops read compute at 0.95; the host time says nothing of the device."""
    path = _without_device(BENCH, tmp_path)
    rep = analyze_trace(read_trace(path))
    assert not rep.has_gpu and rep.tables["launches"]["launch_calls"] > 0
    assert rep.device_not_recorded and "kernel launch calls but no kernel or memcpy activity" in rep.device_not_recorded
    v = _analyse([path], tmp_path / "out").verdict
    assert v.confidence <= 0.2, v
    assert "no kernel activity recorded" in v.confidence_reason and "launch calls" in v.confidence_reason


def test_a_cupti_range_profiler_capture_is_not_confident(tmp_path):
    """HTA's cupti_profiler trace: 77 cuda_profiler_range events (kernels replayed under counters),
    cudaLaunchKernel calls, no kernel activity: read compute at 0.95 before."""
    path = shared(CUPTI_RANGE)
    rep = analyze_trace(read_trace(path))
    assert rep.read.profiler_ranges == 77 and not rep.has_gpu
    v = _analyse([path], tmp_path / "out").verdict
    assert v.confidence <= 0.2 and "range-profiler" in v.confidence_reason, v


def test_a_cpu_only_trace_keeps_its_confidence(tmp_path):
    """No device work launched (the gloo CPU trace; a CPU trace torch records here): nothing is missing."""
    assert analyze_trace(read_trace(shared(CPU_ONLY))).device_not_recorded is None
    pytest.importorskip("torch", reason="torch records the CPU trace")
    script = ("import sys, torch\nfrom torch.profiler import profile, ProfilerActivity\n"
              "x = torch.randn(256, 256)\n"
              "with profile(activities=[ProfilerActivity.CPU]) as p:\n"
              "    for _ in range(20):\n        y = (x @ x).relu().sum()\n"
              "p.export_chrome_trace(sys.argv[1])\n")
    out = tmp_path / "cpu.json"
    subprocess.run([sys.executable, "-c", script, str(out)], check=True, capture_output=True, timeout=120)
    rep = analyze_trace(read_trace(out))
    assert not rep.has_gpu and rep.device_not_recorded is None and rep.read.profiler_ranges == 0
    v = _analyse([out], tmp_path / "out").verdict
    assert "no kernel activity recorded" not in v.confidence_reason


def _as_mtia(doc: dict[str, Any]) -> dict[str, Any]:
    """A CUDA trace named as MTIA traces name theirs: device events ``mtia_ccp_events``, host calls
    ``mtia_runtime`` with MTIA's launch and sync names, no deviceProperties."""
    out = []
    for e in doc["traceEvents"]:
        e = dict(e)
        if e.get("cat") in DEVICE_CATS:
            e["cat"] = "mtia_ccp_events"
            if str(e.get("name", "")).startswith("Memcpy"):
                e["name"] = "dma_request"
        elif e.get("cat") == "cuda_runtime":
            e["cat"] = "mtia_runtime"
            e["name"] = MTIA_CALLS.get(e["name"], e["name"])
        out.append(e)
    return {**{k: v for k, v in doc.items() if k != "deviceProperties"}, "traceEvents": out}


def test_mtia_device_tracks_read_as_device_busy(tmp_path):
    """The V100 ResNet trace as MTIA would name it: the same kernel window, busy time and host syncs
    (before: no GPU events at all, a "CPU-only" host account)."""
    doc = load(RANK0)
    cuda = analyze_trace(read_trace(shared(RANK0)))
    mtia = analyze_trace(read_trace(_write(_as_mtia(doc), tmp_path / "mtia.json.gz")))
    assert mtia.gpu_events == cuda.gpu_events > 0
    assert mtia.temporal == cuda.temporal
    assert mtia.tables["launches"]["launch_calls"] == cuda.tables["launches"]["launch_calls"] > 0
    assert mtia.tables["syncs"]["host_blocked_pct"] == pytest.approx(cuda.tables["syncs"]["host_blocked_pct"])
    v = _analyse([tmp_path / "mtia.json.gz"], tmp_path / "out").verdict
    assert v.quadrant.value == "compute" and v.account == "gpu", v


def test_a_device_tracks_own_wait_is_not_busy_time(tmp_path):
    """MTIA's device-side ``event_wait`` (a stream waiting on another) sits on the timeline as a sync
    event, as CUDA's "Stream Wait Event" does: not compute (HTA's non-compute), not a kernel category."""
    base = 1_700_000_000_000_000.0
    ev = [{"ph": "X", "cat": "mtia_ccp_events", "name": "event_wait", "pid": 17, "tid": 3, "ts": base,
           "dur": 1000.0, "args": {"stream": 108, "wait_on_stream": 104}},
          {"ph": "X", "cat": "mtia_ccp_events", "name": "fc-dtype_Float", "pid": 17, "tid": 4, "ts": base + 1000,
           "dur": 1000.0, "args": {"stream": 104}}]
    rep = analyze_trace(read_trace(_write({"traceEvents": ev}, tmp_path / "w.json.gz")))
    assert rep.gpu_events == 2 and rep.temporal is not None
    assert rep.temporal.compute_ns == rep.temporal.non_compute_ns == 1_000_000
    assert [c["category"] for c in rep.tables["kernel_categories"]["categories"]] == ["other_compute"]
    assert rep.tables["syncs"]["sync_events"] == [{"name": "event_wait", "count": 1, "time_ns": 1_000_000}]


def test_host_blocked_time_is_the_union_over_threads(tmp_path):
    """Two threads in synchronizeStream at the same time block the host once, not twice (an MTIA
    inference trace read 353% of its host time blocked)."""
    base = 1_700_000_000_000_000.0
    ev = [{"ph": "X", "cat": "mtia_runtime", "name": "synchronizeStream", "pid": 1, "tid": t, "ts": base,
           "dur": 1000.0, "args": {"correlation": t}} for t in (1, 2, 3)]
    ev.append({"ph": "X", "cat": "mtia_ccp_events", "name": "pe_exe", "pid": 17, "tid": 4, "ts": base,
               "dur": 1000.0, "args": {"stream": 104}})
    rep = analyze_trace(read_trace(_write({"traceEvents": ev}, tmp_path / "s.json.gz")))
    assert rep.tables["syncs"]["host_blocked_pct"] == pytest.approx(100.0)


@pytest.mark.parametrize("name", [MTIA_INFERENCE, MTIA_TRAINING])
def test_mtia_traces_of_holistic_trace_analysis(name, tmp_path):
    """HTA's MTIA traces (where ../shared/data has them): the device track is read; the inference
    trace's host waits are not read as the service (before: "no torch op running", service, 0.90)."""
    if not (TRACES / name).is_file():
        pytest.skip(f"{name} (Holistic Trace Analysis tests/data) not in {TRACES}")
    rep = analyze_trace(read_trace(TRACES / name))
    assert rep.has_gpu and rep.temporal is not None and rep.tables["launches"]["launch_calls"] > 0
    v = _analyse([TRACES / name], tmp_path / "out").verdict
    assert v.account == "gpu" and v.quadrant.value != "service", v
