"""``diagnose doctor``: what NVML, GPM and DCGM offer, on this host, on a replayed H100 and
against a live local exporter."""
from __future__ import annotations

import pytest

from diagnose.doctor.gpu import dcgm_checks, nvml_checks
from gpu_replay import HAS_GPU, DcgmServer, replay_factory, smi_recording
from helpers import run_diagnose


@pytest.fixture
def server():
    s = DcgmServer()
    yield s
    s.close()


@pytest.mark.skipif(HAS_GPU, reason="this host has a GPU")
def test_doctor_without_gpu_says_what_is_missing():
    res = run_diagnose("doctor")
    assert res.returncode == 0, res.stdout
    lines = {ln.split(":")[0].split("] ")[1]: ln for ln in res.stdout.splitlines() if "] " in ln}
    assert lines["NVML"].startswith("[warn]") and "no NVIDIA driver" in lines["NVML"]
    assert lines["GPM"].startswith("[warn]") and "DCGM bindings" in lines and "DCGM exporter" in lines


def test_doctor_lists_what_a_replayed_h100_offers(tmp_path):
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", None, scenario="compute")
    checks = {c.name: c for c in nvml_checks(replay_factory(rec))}
    assert checks["NVML"].level == "ok" and "driver 590.48.01" in checks["NVML"].detail
    gpu = checks["GPU 0"].detail
    assert gpu.startswith("NVIDIA H100 80GB HBM3 (hopper)") and "gpu_util_pct" in gpu
    assert "pcie_tx_bytes_per_s (not in the nvidia-smi capture" in gpu
    assert checks["GPM"].level == "ok" and "GPU 0: supported" in checks["GPM"].detail


def test_doctor_lists_exporter_fields(server):
    exporter = {c.name: c for c in dcgm_checks(server.url("t4"))}["DCGM exporter"]
    assert exporter.level == "ok" and "1 GPU(s) (Tesla T4)" in exporter.detail
    assert "DCGM_FI_PROF_SM_ACTIVE absent" in exporter.detail and "DCGM_FI_PROF_DRAM_ACTIVE ok" in exporter.detail
    mig = {c.name: c for c in dcgm_checks(server.url("a100-mig"))}["DCGM exporter"]
    assert "1 MIG instance(s)" in mig.detail


def test_doctor_fails_on_an_unreachable_exporter(server):
    url = server.url("t4")
    server.close()
    res = run_diagnose("doctor", "--dcgm", url)
    assert res.returncode == 2 and "[FAIL] DCGM exporter: cannot reach" in res.stdout
