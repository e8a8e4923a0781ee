"""End to end on a live CPU torch service whose Python preprocessing starves the model.

The service runs under `diagnose run` (agent: torch profiler window + OpenTelemetry spans), and
`diagnose attach <pid>` captures it with real py-spy. Without a GPU there are no kernels; the join
then uses the torch-op timeline: gaps in which no torch op ran, joined with the py-spy samples and
the open stage span, and separately the slowest requests.
"""
from __future__ import annotations

import json

import pytest

from agent_helpers import service  # noqa: F401  (fixture)
from helpers import findings, gfm_text, only_bundle, run_diagnose

pytest.importorskip("torch", reason="torch is needed for the model service")


@pytest.mark.slow  # a live capture of ~15 s: run with -m slow
def test_join_names_the_preprocessing_that_starves_the_model(service, tmp_path):  # noqa: F811
    # twice the default text: preemptions inside the tiny model stage (op-timeline gaps showing
    # Linear.forward) weigh half as much against the tokenize gaps on a loaded host
    svc = service("--words", "80000", workload="starved_service")
    res = run_diagnose("attach", str(svc.pid), "--duration", "8", "--torch-window", "4",
                       "--out", str(tmp_path), "--no-tui", timeout=150)
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    doc = findings(bundle)
    sig = doc["signals"]
    assert sig["gpu.idle_pct"]["value"] is None and "no GPU activity recorded" in sig["gpu.idle_pct"]["reason"]
    assert sig["torch.op_idle_gap_share"]["value"] > 50  # the model ran in a small part of the window
    assert sig["spans.stage_share_pct[preprocess]"]["value"] > 50
    assert sig["join.gap_busy_thread_pct"]["value"] > 60
    assert sig["join.gap_category_share_pct[tokenization]"]["value"] > 50

    gaps = doc["details"]["join"]["gaps"]
    assert gaps["kind"] == "torch_gaps" and gaps["windows"] > 5
    top = gaps["threads"][0]
    assert top["thread"].startswith("serve") and top["functions"][0]["name"].startswith("tokenize (")
    assert gaps["spans"][0]["span"] == "preprocess"
    head = gaps["headline"]
    print("\n" + head)
    assert head.startswith("No GPU activity recorded; no torch op ran for ")
    assert "`tokenize (" in head and "inside span `preprocess`" in head

    slow = doc["details"]["join"]["slow"]  # the slowest 1%: often the ones the profiler start slowed
    assert slow["kind"] == "slow_requests" and slow["windows"] >= 1 and slow["threads"]
    assert slow["headline"].startswith("The slowest ") and " spent " in slow["headline"]
    assert all(not t["thread"].startswith("diagnose-") for t in gaps["threads"] + slow["threads"])

    fired = {f["rule_id"] for f in doc["findings"]}
    assert {"service.torch_starved_on_cpu", "service.preprocess_stage"} <= fired
    assert doc["verdict"]["quadrant"] == "service"
    assert "latency P50 / P90 / P99 / P999" in (bundle / "report.md").read_text()  # key metrics, ticket-sized
    report = run_diagnose("report", str(bundle), "--full").stdout
    assert "## Request latency and stages" in report and head in gfm_text(report)

    again = run_diagnose("analyze", str(bundle), "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["details"]["join"]["gaps"]["headline"] == head


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs an NVIDIA GPU and a CUDA build of torch")
def test_gpu_idle_gaps_name_the_preprocessing_that_starves_the_gpu(service, tmp_path):  # noqa: F811
    """The same service with its model on the GPU: the windows are now real GPU idle gaps from the
    kernel timeline, and live NVML reads the GPU the target uses."""
    svc = service("--device", "cuda", workload="starved_service")
    res = run_diagnose("attach", str(svc.pid), "--duration", "8", "--torch-window", "4",
                       "--out", str(tmp_path), "--no-tui", timeout=180)
    assert res.returncode == 0, res.stderr
    doc = findings(only_bundle(tmp_path))
    sig = doc["signals"]
    fired = sorted(f["rule_id"] for f in doc["findings"])
    assert sig["gpu.compute_pct"]["value"] is not None, sig["gpu.compute_pct"]  # kernels were recorded
    assert sig["gpu.idle_pct"]["value"] > 50, (sig["gpu.idle_pct"], fired)
    gaps = doc["details"]["join"]["gaps"]
    assert gaps["kind"] == "gpu_gaps" and gaps["windows"] > 5, gaps
    top = gaps["threads"][0]
    assert top["thread"].startswith("serve") and top["functions"][0]["name"].startswith("tokenize ("), top
    assert gaps["spans"][0]["span"] == "preprocess"
    print("\n" + gaps["headline"])
    assert gaps["headline"].startswith("GPU idle ") and "inside span `preprocess`" in gaps["headline"]
    assert sig["gpu.count"]["value"] >= 1, sig["gpu.count"]  # live NVML saw the device
    assert doc["verdict"]["quadrant"] == "service", fired
