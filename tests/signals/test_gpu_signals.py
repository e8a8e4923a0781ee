"""GPU signals: time weighting, best source per signal, and one GPU seen by NVML and DCGM at once."""
from __future__ import annotations

import json
import shutil

import pytest

from diagnose.bundle import Bundle
from diagnose.collectors.dcgm import DcgmCollector
from diagnose.collectors.gpm import GpmCollector
from diagnose.collectors.nvml import NvmlCollector
from diagnose.collectors.process import ProcessCollector
from diagnose.signals.gpu import SIGNALS, pick
from diagnose.signals.gpu_series import Metric, time_weighted_mean
from diagnose.verdict.analyze import analyze
from gpu_replay import DcgmServer, capture, replay_factory, smi_recording, t4_recording
from helpers import REPO

SPEC = {s.name: s for s in SIGNALS}


def test_time_weighted_mean_weights_each_value_by_its_interval():
    # 0 for 1 s, then 100 for 3 s (a value covers the time since the previous point); the first
    # point has no previous one and counts for the median interval (2 s)
    expected = (2000 * 50 + 1000 * 0 + 3000 * 100) / 6000
    assert time_weighted_mean([(0, 50.0), (1_000, 0.0), (4_000, 100.0)]) == pytest.approx(expected)
    assert time_weighted_mean([(0, 10.0), (100, 30.0), (200, 30.0)]) == pytest.approx(70 / 3)  # regular: plain mean
    assert time_weighted_mean([(5, 42.0)]) == 42.0
    assert time_weighted_mean([]) is None


def test_a_gap_counts_as_missing_data_not_as_one_long_reading():
    pts = [(t, 0.0) for t in range(0, 1000, 100)] + [(100_000, 100.0)]
    assert time_weighted_mean(pts) == pytest.approx(500 / (10 * 100 + 500) * 100)


def test_best_source_wins_and_unknowns_keep_every_reason():
    dcgm = {"sm_active_pct": Metric(70.0, "DCGM DCGM_FI_PROF_SM_ACTIVE x100")}
    gpm = {"sm_active_pct": Metric(72.0, "GPM SM_UTIL")}
    both = {"dcgm": (dcgm, None), "gpm": (gpm, None), "nvml": ({}, None)}
    assert pick(SPEC["gpu.sm_active_pct"], both).source.startswith("DCGM")
    only_gpm = {"dcgm": ({}, "dcgm unavailable: not requested"), "gpm": (gpm, None), "nvml": ({}, None)}
    assert pick(SPEC["gpu.sm_active_pct"], only_gpm).value == 72.0
    none = {"dcgm": ({}, "dcgm unavailable: not requested"),
            "gpm": ({}, "GPM needs Hopper or newer; Tesla T4 is turing"), "nvml": ({}, None)}
    m = pick(SPEC["gpu.sm_active_pct"], none)
    assert m.value is None and m.reason == "dcgm: not requested; gpm: GPM needs Hopper or newer; Tesla T4 is turing"
    # NVML is never a source of SM activity: utilization.gpu only says a kernel ran
    assert "nvml" not in SPEC["gpu.sm_active_pct"].sources and SPEC["gpu.kernel_busy_pct"].sources[0] == "nvml"


def test_one_t4_through_nvml_and_dcgm(workload, tmp_path):
    server = DcgmServer()
    try:
        proc = workload("json_loop")
        rec = t4_recording(tmp_path / "calls.jsonl", proc.pid)
        bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec)),
                                              DcgmCollector(), ProcessCollector()),
                         duration_s=2.0, dcgm_url=server.url("t4"))
    finally:
        server.close()
    a = analyze(Bundle.open(bundle))
    s = a.signals
    busy = s["gpu.kernel_busy_pct"]
    assert busy.value == 91.0 and busy.source.startswith("NVML utilization.gpu")
    assert s["gpu.gr_engine_active_pct"].source.startswith("DCGM DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert "target's GPU 0 (NVML compute processes)" in s["gpu.dram_active_pct"].source
    assert s["gpu.power_pct_of_limit"].value == pytest.approx(100 * 68.244 / 70)  # NVML limit, NVML draw
    assert "GPM needs Hopper or newer; Tesla T4 is turing" in s["gpu.sm_active_pct"].reason
    assert s["gpu.ridge_flop_per_byte"].value == pytest.approx(65e12 / 0.32e12)
    assert s["gpu.dram_bytes_per_s_est"].value == pytest.approx(0.092781 * 0.32e12)
    waiting = [f for f in a.findings if f.rule_id in ("service.gpu_waiting_on_host", "io.gpu_and_host_waiting")]
    assert len(waiting) == 1 and "the GPU is mostly waiting, not busy" in waiting[0].summary
    row = a.details.gpu_devices[0]
    assert row.target and row.name == "Tesla T4" and row.sources["gpu.dram_active_pct"].startswith("DCGM")


def test_throttle_share_counts_power_and_thermal_reasons(workload, tmp_path):
    proc = workload("idle_parent")
    # SW power cap (0x4) in every other poll, GpuIdle (0x1, not throttling) in the rest
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", proc.pid, event_reasons=[0x4, 0x1])
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)),), duration_s=2.5)
    a = analyze(Bundle.open(bundle))
    # The expected share is what the polls that ran recorded: on a loaded host the poller gets
    # fewer polls than 20 Hz asks for, and an odd count (3 of 5 is 60%) is not half.
    rows = [json.loads(line) for line in (bundle / "nvml.jsonl").read_text().splitlines()]
    reasons = [int(r["values"]["clock_event_reasons"]) for r in rows
               if r.get("kind") == "reading" and "clock_event_reasons" in r.get("values", {})]
    assert len(reasons) >= 4 and {0x4, 0x1} <= set(reasons)
    count_share = 100.0 * sum(1 for v in reasons if v & 0x4) / len(reasons)
    assert a.details.gpu_devices[0].throttle_share_pct["sw_power_cap"] == pytest.approx(count_share, abs=0.1)
    # Time-weighted (gpu_series.time_weighted_mean: each reading covers the interval before it), so
    # poll jitter on a loaded host moves it off the count (65.7% against 50% seen in CI): the share
    # the recorded poll times give
    expected = time_weighted_mean((r["t_ns"], 100.0 if int(r["values"]["clock_event_reasons"]) & 0x4 else 0.0)
                                  for r in rows
                                  if r.get("kind") == "reading" and "clock_event_reasons" in r.get("values", {}))
    assert 0 < a.signals["gpu.throttled_share_pct"].value < 100
    assert a.signals["gpu.throttled_share_pct"].value == pytest.approx(expected, abs=0.01)
    assert "secondary.gpu_throttled" in {f.rule_id for f in a.findings}


def test_malformed_gpu_records_cost_only_themselves(workload, tmp_path):
    proc = workload("idle_parent")
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", proc.pid, scenario="compute")
    bundle = capture(proc.pid, tmp_path, (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec))))
    good = analyze(Bundle.open(bundle)).signals["gpu.kernel_busy_pct"].value
    with open(bundle / "nvml.jsonl", "a") as fh:
        fh.write('{"kind": "reading", "gpu": "zero", "t_ns": 5}\n')
        fh.write('{"kind": "reading", "gpu": 0, "t_ns": 6, "values": {"gpu_util_pct": "high"}, "samples": [1]}\n')
        fh.write('{"kind": "target", "gpus": [0, "x"], "pids": {"0": [["pid"], 7]}}\n{"torn": \n')
    with open(bundle / "gpm.jsonl", "a") as fh:
        fh.write('{"kind": "reading", "gpu": 0, "t_ns": 7, "metrics": {"any_tensor_util_pct": null}}\n')
    a = analyze(Bundle.open(bundle))
    assert a.signals["gpu.kernel_busy_pct"].value == pytest.approx(good)
    assert a.signals["gpu.tensor_active_pct"].value == pytest.approx(93.0433)
    assert a.data_quality.gpu.nvml_malformed_records == 1
    assert "gpu_signals" not in a.data_quality.streams.source_errors


def test_a_gpu_record_of_the_wrong_shape_is_dropped_and_counted_and_costs_nothing_else(tmp_path):
    """Typed records (diagnose/bundle/records/gpu.py) on a real H200 recording: a device record with
    a name that is not text, a record of an unknown kind and a DCGM scrape whose entity is not an
    object are dropped and counted; a reading with one malformed number keeps its other numbers."""
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures" / "gpu" / "compute-bf16-matmul", b,
                    ignore=shutil.ignore_patterns("findings.json", "report.md"))
    good = analyze(Bundle.open(b)).signals
    last = max(json.loads(ln)["t_ns"] for ln in (b / "nvml.jsonl").read_text().splitlines() if '"reading"' in ln)
    with open(b / "nvml.jsonl", "a") as fh:
        fh.write('{"kind": "device", "gpu": 0, "name": 5, "power_limit_mw": 1}\n{"kind": "bogus"}\n')
        fh.write(json.dumps({"kind": "reading", "gpu": 0, "t_ns": last + 100_000_000,
                             "values": {"gpu_util_pct": "busy", "temp_c": 99}}) + "\n")
    (b / "dcgm.jsonl").write_text('{"kind": "scrape", "t_ns": 5, "entities": [5]}\n')
    a = analyze(Bundle.open(b))
    assert "gpu_signals" not in a.data_quality.streams.source_errors
    assert a.data_quality.streams.invalid_records == {"nvml.jsonl": 2, "dcgm.jsonl": 1}
    assert a.data_quality.gpu.nvml_malformed_records == 2 and a.data_quality.gpu.dcgm_scrapes == 0
    assert a.signals["gpu.temp_max_c"].value == 99  # the malformed reading's good number counts
    for name in ("gpu.kernel_busy_pct", "gpu.power_pct_of_limit", "gpu.sm_active_pct"):  # the device stays H200's
        assert a.signals[name].value == pytest.approx(good[name].value), name
    assert a.details.gpu_devices[0].name == "NVIDIA H200"
