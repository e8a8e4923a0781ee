"""The serving engine's request-time account (diagnose/account/engine.py) on the recordings of
fixtures/serving-metrics: each phase's share of the window's end-to-end request time."""
from __future__ import annotations

import pytest

from diagnose.account.engine import engine_account
from diagnose.results.details import Details, HistogramDetail, ServingDetails
from diagnose.signals.serving import serving_details
from diagnose.signals.serving_metrics import serving_metrics
from serving_sim import recording, window_s


def shares(variant: str) -> tuple[dict[str, float], object]:
    records, index = recording(variant)
    acc = engine_account(Details(serving=serving_details(serving_metrics(records))))
    return {t.kind: t.share for t in acc.terms}, (acc, index)


@pytest.mark.parametrize("variant, expected", [
    # per step: queue 14 s, prefill 6 s, decode 10 s of 35 s end to end (5 s outside them)
    ("vllm", {"engine.queue": 14 / 35, "engine.prefill": 6 / 35, "engine.decode": 10 / 35}),
    # Triton duration counters: queue 1.5 s, compute_infer 3 s, input + output 0.5 s of 5 s
    ("triton", {"engine.queue": 0.3, "engine.compute_infer": 0.6, "engine.tensor_io": 0.1}),
    ("tgi", {"engine.queue": 0.6, "engine.inference": 0.4}),
])
def test_phase_shares(variant, expected):
    got, (acc, _) = shares(variant)
    assert got == pytest.approx(expected)
    assert acc.resource == "requests" and acc.terms[0].kind == max(expected, key=expected.get)


def test_sglang_scheduler_wait_takes_its_share_of_the_running_time():
    got, (acc, index) = shares("sglang")
    wait = 0.75 / window_s(index)  # 0.25 s of GPU overlap wait a step, 3 steps
    assert got["engine.queue"] == pytest.approx(0.1)
    # details() keeps the window to the ms
    assert got["engine.scheduler_wait"] == pytest.approx(0.9 * wait, rel=1e-3)
    assert got["engine.inference"] == pytest.approx(0.9 * (1 - wait), rel=1e-3)
    kinds = {t.kind: t for t in acc.terms}
    assert kinds["engine.scheduler_wait"].rule_id == "service.engine_scheduler_gaps"
    assert any("waited for the CPU scheduler" in n for n in acc.notes)


def test_no_end_to_end_time_no_account():
    assert engine_account(Details()) is None
    empty = HistogramDetail(0, None, None, None, "e2e", 0, False)
    assert engine_account(Details(serving=ServingDetails(histograms={"e2e": empty}))) is None
