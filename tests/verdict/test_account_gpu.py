"""The GPU account's arithmetic on the two shapes of real training traces that used to end
"unknown" (issue: busy 84% with 61% compute and 23% communication/copies; idle 69% while the host
blocks in synchronisations and device-to-host copies into pageable memory, the idle mostly HTA's
"other"). Pure functions over signals: each value stands for what the kernel-timeline source writes."""
from __future__ import annotations

from diagnose.account.gpu import gpu_account
from diagnose.model import Quadrant, Signal
from diagnose.results.details import Details
from diagnose.verdict.account import decide


def _signals(**values: float) -> dict[str, Signal]:
    names = {"idle": "gpu.idle_pct", "short": "gpu.short_gap_idle_pct", "host_wait": "gpu.idle_host_wait_pct",
             "exposed": "gpu.comm_exposed_pct", "g_compute": "kernels.group_share_pct[compute]",
             "g_memory": "kernels.group_share_pct[memory]", "g_comm": "kernels.group_share_pct[communication]",
             "sync": "torch.sync_blocked_pct", "cover": "gpu.kernel_window_pct",
             "io": "join.gap_category_share_pct[io_wait]"}
    return {names[k]: Signal(names[k], v, "%", "kernel timeline") for k, v in values.items()}


DETAILS = Details(torch_traces=({"temporal": {"span_ns": 2_000_000_000}, "coverage": {"host_span_ns": 2_100_000_000}},))


def test_busy_gpu_with_exposed_communication_is_compute_with_the_communication_named():
    sig = _signals(idle=16, short=4, host_wait=50, exposed=23, g_compute=80, g_memory=0, g_comm=20, cover=95)
    acc = gpu_account(sig, DETAILS)
    shares = {t.kind: round(t.share, 3) for t in acc.terms}
    assert shares["gpu.compute"] == 0.61 and shares["gpu.comm_exposed"] == 0.23
    assert round(sum(shares.values()), 6) == 1.0 and acc.total_s == 2.0
    v = decide((acc,), [])
    assert v.quadrant == Quadrant.COMPUTE and v.layer.value == "model"
    assert v.scores[Quadrant.IO] == 0.23 and v.mixed_with is None  # 23 < 0.75 x 61: not mixed


def test_close_second_quadrant_makes_a_mixed_verdict():
    sig = _signals(idle=10, short=0, host_wait=100, exposed=40, g_compute=100, g_memory=0, g_comm=0, cover=95)
    v = decide((gpu_account(sig, DETAILS),), [])
    assert v.quadrant == Quadrant.COMPUTE and v.mixed_with == Quadrant.IO
    assert v.headline.startswith("compute-bound, with io (GPU in exposed communication")


def test_idle_gpu_behind_host_syncs_is_service_with_engine_remedies():
    sig = _signals(idle=69, short=3, host_wait=10, sync=45, g_compute=70, g_memory=30, cover=90)
    acc = gpu_account(sig, DETAILS)
    shares = {t.kind: round(t.share, 3) for t in acc.terms}
    assert shares["gpu.idle_sync"] == 0.45 and shares["gpu.idle_launch"] == 0.03
    v = decide((acc,), [])
    assert v.quadrant == Quadrant.SERVICE and v.layer.value == "engine"
    assert v.headline.startswith("service-bound: act on the engine layer first (plan: engine -> service")


def test_reads_during_the_gaps_make_the_idle_time_the_input_pipeline():
    sig = _signals(idle=80, short=0, host_wait=100, io=75, g_compute=100, cover=90)
    v = decide((gpu_account(sig, DETAILS),), [])
    assert v.quadrant == Quadrant.IO and v.layer.value == "system"


def test_a_kernel_window_covering_little_of_the_trace_counts_the_idle_outside_it():
    sig = _signals(idle=0, short=0, g_compute=100, cover=10)
    acc = gpu_account(sig, DETAILS)
    shares = {t.kind: round(t.share, 3) for t in acc.terms}
    assert shares == {"gpu.idle_outside": 0.9, "gpu.compute": 0.1} and acc.total_s == 20.0
