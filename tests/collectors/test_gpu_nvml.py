"""NVML and GPM collectors: no-GPU behaviour on this host, replayed readings through the same
backend interface the live collector uses, target-GPU matching, and live NVML where a GPU exists."""
from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from diagnose.bundle import Bundle
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.gpm import GpmCollector
from diagnose.collectors.nvml import NvmlCollector, match_target, nspids, target_pids
from diagnose.collectors.nvml_replay import RecordingBackend, ReplayBackend, ReplayError
from diagnose.verdict.analyze import analyze
from gpu_replay import HAS_GPU, capture, replay_factory, smi_phase, smi_recording, write_calls
from helpers import REPO, findings, only_bundle, run_diagnose


def records(bundle: Path, name: str, kind: str) -> list[dict]:
    return [r for r in Bundle.open(bundle).records(name) if r.get("kind") == kind]


@pytest.mark.skipif(HAS_GPU, reason="this host has a GPU: the no-GPU path does not apply")
def test_attach_without_gpu_says_why_counters_are_unknown(workload, tmp_path):
    proc = workload("json_loop")
    res = run_diagnose("attach", str(proc.pid), "--duration", "3", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    doc = findings(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    states = {c["name"]: (c["state"], c["reason"]) for c in manifest["collectors"]}
    assert states["pyspy"][0] == states["process"][0] == "ok"
    assert states["nvml"][0] == "unavailable" and "NVML" in states["nvml"][1]
    assert states["gpm"][0] == "unavailable"
    assert doc["verdict"]["quadrant"] == "service"  # the CPU analysis goes on
    sm = doc["signals"]["gpu.sm_active_pct"]
    assert sm["value"] is None and sm["reason"].startswith("GPU counters unavailable")
    assert states["nvml"][1] in sm["reason"]
    gap = [n for n in doc["not_judged"] if n["what"] == "compute vs bandwidth on the GPU"]
    assert gap and "GPU counters unavailable" in gap[0]["reason"] and "no NVIDIA driver" in gap[0]["reason"]
    report = (bundle / "report.md").read_text()
    assert "GPU counters unavailable" in report and "collector nvml: unavailable" in res.stderr


def test_replayed_h100_load_gives_nvidia_smi_values(workload, tmp_path):
    proc = workload("idle_parent")
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", proc.pid, scenario="compute")
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec))))
    load = smi_phase("h100", "load")
    host = records(bundle, "nvml.jsonl", "host")[0]
    assert host["driver_version"] == "590.48.01" and "Unix epoch" in host["clock"]
    target = records(bundle, "nvml.jsonl", "target")
    assert target[0]["matched"] and target[0]["gpus"] == [0]
    reads = records(bundle, "nvml.jsonl", "reading")
    drained = [t for r in reads for t, _ in r["samples"].get("gpu_util_pct", [])]
    assert len(reads) >= 10 and len(drained) >= len(reads) - 1  # one driver sample per poll
    assert drained == sorted(set(drained))  # nothing drained twice
    t0 = Bundle.open(bundle).manifest["started_ns"]
    assert all(t * 1000 >= t0 for t in drained)  # replayed onto now; none from before the capture
    s = analyze(Bundle.open(bundle)).signals
    sm_pct = [row["sm"] for row in load.dmon]
    assert s["gpu.kernel_busy_pct"].value == pytest.approx(sum(sm_pct) / len(sm_pct))
    assert s["gpu.kernel_busy_pct"].source.startswith("NVML utilization.gpu (nvmlDeviceGetSamples")
    assert 9.0 <= s["gpu.memory_busy_pct"].value <= 10.0  # dmon mem column: 10, 10, 9, 9, 9
    assert s["gpu.power_pct_of_limit"].value == pytest.approx(100 * 633 / 700, abs=0.5)
    assert s["gpu.sm_clock_pct_of_max"].value == pytest.approx(100.0)
    assert s["gpu.temp_max_c"].value == max(row["gtemp"] for row in load.dmon)
    assert s["gpu.target_sm_util_pct"].value == pytest.approx(99.0)  # pmon: gpu_burn at 99%
    assert s["gpu.throttled_share_pct"].value == 0.0
    assert s["gpu.tensor_active_pct"].source.startswith("GPM ANY_TENSOR_UTIL")
    assert s["gpu.count"].value == 1 and "NVML compute processes" in s["gpu.count"].source
    pcie = s["gpu.pcie_tx_bytes_per_s"]
    assert pcie.value is None and "not in the nvidia-smi capture" in pcie.reason  # unknown, not 0


def test_mig_counters_are_unknown_not_zero(workload, tmp_path):
    proc = workload("idle_parent")
    rec = smi_recording(tmp_path / "calls.jsonl", "h200", "load", proc.pid, mig=True)
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec))))
    a = analyze(Bundle.open(bundle))
    busy = a.signals["gpu.kernel_busy_pct"]
    assert busy.value is None and "NotSupported" in busy.reason and "MIG" in busy.reason
    assert a.signals["gpu.power_pct_of_limit"].value > 80  # what MIG does offer still comes through
    gpm = {c.name: c for c in Bundle.open(bundle).collectors.values()}["gpm"]
    assert gpm.state.value == "unavailable" and "no GPM in this replay" in gpm.reason
    assert records(bundle, "nvml.jsonl", "target")[0]["pids"]["0"][0][2] == 13  # MIG GPU instance id


def test_target_off_the_gpu_falls_back_to_all_gpus(workload, tmp_path):
    proc = workload("idle_parent")
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "idle", None)
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)),))
    target = records(bundle, "nvml.jsonl", "target")[0]
    assert not target["matched"] and "not among NVML compute processes" in target["reason"]
    s = analyze(Bundle.open(bundle)).signals
    assert s["gpu.kernel_busy_pct"].value == 0.0 and "all 1 GPU(s)" in s["gpu.kernel_busy_pct"].source
    assert s["gpu.throttled_share_pct"].value == 0.0  # idle reason 0x1 (GpuIdle) is not throttling


def test_child_processes_and_namespace_pids_match(workload):
    proc = workload("idle_parent")
    child = psutil.Process(proc.pid).children()[0].pid
    assert os.getpid() in nspids(os.getpid())
    pids = target_pids(proc.pid)
    assert {proc.pid, child} <= pids
    procs = {0: {"pids": [[child, 1 << 30, None]]}, 1: {"pids": [[1, 0, None]]}, 2: {"unknown": "NoPermission"}}
    assert match_target(procs, pids) == {0: [[child, 1 << 30, None]]}


def test_recording_round_trip_replays_exactly(tmp_path):
    src = smi_recording(tmp_path / "a.jsonl", "h200", "load", 4242, scenario="bandwidth", n=6)
    rec = RecordingBackend(ReplayBackend(src), tmp_path / "b.jsonl", {"note": "re-recorded"})
    first = [rec.open(), rec.devices(), rec.processes(0), rec.gpm_read(0), rec.gpm_read(0)]
    first_reads = [rec.read(0, 0) for _ in range(6)]
    rec.close()
    again = ReplayBackend(tmp_path / "b.jsonl")
    assert [again.open(), again.devices(), again.processes(0), again.gpm_read(0), again.gpm_read(0)] == first
    for r in first_reads:
        replayed = again.read(0, 0)
        assert replayed["values"] == r["values"] and replayed["unknown"] == r["unknown"]
        assert [v for _, v in replayed["samples"]["gpu_util_pct"]] == [v for _, v in r["samples"]["gpu_util_pct"]]


def test_replay_of_a_host_without_driver(workload, tmp_path):
    rec = tmp_path / "calls.jsonl"
    write_calls(rec, {}, [], [], [])
    lines = rec.read_text().splitlines()
    lines[1] = json.dumps({"call": "open", "gpu": None, "t_ns": 1, "error": "NVIDIA driver not loaded"})
    rec.write_text("\n".join(lines) + "\n")
    collector = NvmlCollector(replay_factory(rec))
    probe = collector.probe(resolve_target(workload("idle_parent").pid), CaptureOptions())
    assert not probe.available and probe.reason == "NVIDIA driver not loaded"


def test_replay_rejects_a_foreign_file(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"t_ns": 1}\n')
    with pytest.raises(ReplayError, match="not a diagnose-nvml-calls recording"):
        ReplayBackend(bad)


REAL = sorted(p.parent for p in (REPO / "fixtures" / "gpu").glob("*/expected.json"))


def _readings(bundle: Path, stream: str, field: str) -> list[dict]:
    return [r[field] for r in records(bundle, stream, "reading")]


@pytest.mark.skipif(not REAL, reason="no real GPU recordings yet: run benchmarks/record_gpu.py on a GPU host")
@pytest.mark.parametrize("recording", REAL, ids=[p.name for p in REAL])
def test_real_recordings(recording, workload, tmp_path):
    """The recorded bundle gives its labelled quadrant, and replaying its NVML/GPM calls through the
    collectors reproduces, reading by reading, what the live collectors wrote on the GPU host."""
    expected = json.loads((recording / "expected.json").read_text())
    recorded = analyze(Bundle.open(recording))
    assert recorded.verdict.quadrant.value == expected["quadrant"], [f.rule_id for f in recorded.findings]
    proc = workload("idle_parent")
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(recording / "nvml-calls.jsonl")),
                                          GpmCollector(replay_factory(recording / "gpm-calls.jsonl"))),
                     duration_s=2.5, gpu_rate_hz=10.0)
    for stream, field in (("nvml.jsonl", "values"), ("gpm.jsonl", "metrics")):
        live, replayed = _readings(recording, stream, field), _readings(bundle, stream, field)
        n = min(len(live), len(replayed))
        assert n >= (10 if stream == "nvml.jsonl" else 2), (stream, len(live), len(replayed))
        for i in range(n):  # the same call results through the same collector code: the same values
            assert replayed[i] == pytest.approx(live[i], rel=1e-9), (stream, i)
    assert analyze(Bundle.open(bundle)).signals["gpu.count"].value == 1


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU/driver on this host")
def test_live_nvml_reads_a_real_gpu(workload, tmp_path):
    proc = workload("idle_parent")
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(), GpmCollector()), duration_s=2.0)
    reads = records(bundle, "nvml.jsonl", "reading")
    assert reads and all("t_ns" in r for r in reads)
    s = analyze(Bundle.open(bundle)).signals
    assert s["gpu.kernel_busy_pct"].known or "NotSupported" in (s["gpu.kernel_busy_pct"].reason or "")
