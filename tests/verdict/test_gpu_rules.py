"""GPU rules on replayed readings: compute-bound, bandwidth-bound and "the GPU is mostly waiting".

NVML values come from the shared H100 nvidia-smi capture under gpu-burn (GPU-Util 100%); the GPM
values per scenario and their provenance are in tests/gpu_replay.py (GPM_SCENARIOS). The point
of the waiting case: the same GPU-Util 100% reads as compute-bound, bandwidth-bound or waiting
depending on SM/tensor/DRAM activity, never as "busy" on its own.
"""
from __future__ import annotations

import pytest

from diagnose.bundle import Bundle
from diagnose.collectors.gpm import GpmCollector
from diagnose.collectors.nvml import NvmlCollector
from diagnose.collectors.process import ProcessCollector
from diagnose.model import Quadrant
from diagnose.rules import RULES
from diagnose.rules.gpu import GPU_RULES
from diagnose.verdict.analyze import analyze
from gpu_replay import capture, replay_factory, smi_recording


def run(scenario: str, workload_name: str, workload, tmp_path):
    proc = workload(workload_name)
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", proc.pid, scenario=scenario)
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec)),
                                          ProcessCollector()), duration_s=2.0)
    a = analyze(Bundle.open(bundle))
    return a, {f.rule_id: f for f in a.findings if ".gpu" in f.rule_id}


@pytest.mark.parametrize("scenario, rule, quadrant", [
    ("compute", "compute.gpu_tensor_busy", Quadrant.COMPUTE),
    ("bandwidth", "bandwidth.gpu_dram_saturated", Quadrant.BANDWIDTH),
])
def test_gpu_bound_scenarios(scenario, rule, quadrant, workload, tmp_path):
    a, fired = run(scenario, "idle_parent", workload, tmp_path)
    assert rule in fired, list(fired)
    assert a.verdict.quadrant == quadrant and a.verdict.layer.value == "model"
    assert {f.quadrant for f in fired.values() if f.quadrant} == {quadrant}
    for e in fired[rule].evidence:
        assert e.source.startswith("GPM ") and "target's GPU 0" in e.source


def test_bandwidth_bound_is_not_mistaken_for_fp32_compute(workload, tmp_path):
    a, fired = run("bandwidth", "idle_parent", workload, tmp_path)
    assert a.signals["gpu.sm_active_pct"].value >= 80  # warps resident on every SM, waiting on memory
    assert "compute.gpu_sms_saturated" not in fired and "secondary.gpu_fp32_math" not in fired


def test_gpu_util_100_while_engine_idle_is_waiting_not_busy(workload, tmp_path):
    a, fired = run("waiting", "idle_parent", workload, tmp_path)
    assert a.signals["gpu.kernel_busy_pct"].value == 100.0
    assert list(fired) == ["io.gpu_and_host_waiting"], list(fired)  # idle target CPU: both wait
    assert fired["io.gpu_and_host_waiting"].summary.startswith(
        "GPU-Util 100% while graphics-engine activity 16% and DRAM activity 9%: the GPU is mostly waiting, not busy.")
    assert a.verdict.scores[Quadrant.COMPUTE] == a.verdict.scores[Quadrant.BANDWIDTH] == 0.0


def test_waiting_rule_follows_the_measured_host_cpu(workload, tmp_path):
    a, fired = run("waiting", "json_loop", workload, tmp_path)
    cpu = a.signals["cpu.process_util_pct"].value
    expected = "service.gpu_waiting_on_host" if cpu >= 60 else "io.gpu_and_host_waiting"
    assert expected in fired and len({"service.gpu_waiting_on_host", "io.gpu_and_host_waiting"} & set(fired)) == 1


def test_gpu_rules_are_registered_and_read_gpu_signals():
    ids = {r.id for r in RULES}
    assert {r.id for r in GPU_RULES} <= ids
    for r in GPU_RULES:
        assert any(s.startswith("gpu.") for s in r.signals), r.id
        assert "gpu.kernel_busy_pct" not in r.signals or "gpu.gr_engine_active_pct" in r.signals, (
            f"{r.id} reads GPU-Util without the engine activity it must be read against")
