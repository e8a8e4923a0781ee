"""Capacity and cost arithmetic (diagnose/capacity/plan.py), checked by hand, and `diagnose plan`
on a real imported capture."""
from __future__ import annotations

import json

import pytest

from diagnose.capacity.plan import PlanError, Target, cost_per_1m_tokens, instances_needed, littles_law_in_flight
from helpers import REPO, SHARED_DATA, only_bundle, run_diagnose


def test_the_methods_worked_numbers():
    assert littles_law_in_flight(1000, 0.050) == pytest.approx(50.0)  # 1000 QPS x 50 ms = 50 in flight
    assert cost_per_1m_tokens(10.0, 2000.0) == pytest.approx(1.3889, abs=1e-4)  # 1e6/2000 s = 0.139 h x 10
    assert cost_per_1m_tokens(10.0, 2000.0, gpus=8) == pytest.approx(11.111, abs=1e-3)
    assert instances_needed(1000, 120, 1.3) == 11  # 10.83 rounded up
    assert instances_needed(1000, 130, 1.3) == 10  # exactly 10.0 is 10, not 11
    assert instances_needed(1, 500, 1.3) == 1


def test_bad_targets_are_refused():
    from diagnose.capacity.plan import check_target

    for bad in (Target(0), Target(-5), Target(float("nan")), Target(100, headroom=0), Target(100, slo_p99_ms=-1),
                Target(100, gpus_per_instance=0)):
        with pytest.raises(PlanError):
            check_target(bad)


def test_plan_on_a_real_capture(tmp_path):
    otlp = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"
    if not otlp.exists():
        pytest.skip("../shared/data is absent")
    assert run_diagnose("analyze", str(otlp), "--out", str(tmp_path)).returncode == 0
    res = run_diagnose("plan", str(only_bundle(tmp_path)), "--target-qps", "1000", "--slo-p99", "50",
                       "--format", "json")
    assert res.returncode == 0, res.stderr
    p = json.loads(res.stdout)
    # the example holds one 1 s request: 1 QPS per instance, so 1000 x 1.3 instances, 1000 in flight
    assert p["per_instance_qps"] == pytest.approx(1.0) and p["instances"] == 1300
    assert p["in_flight_total"] == pytest.approx(1000.0)
    assert any("over the SLO" in n for n in p["notes"]) and p["cost_per_1m_tokens"] is None


def test_plan_without_requests_says_why():
    res = run_diagnose("plan", str(REPO / "fixtures" / "cpu" / "service-json"), "--target-qps", "10")
    assert res.returncode == 2 and res.stderr.startswith("diagnose: error: no request rate in this capture")
    assert len(res.stderr.strip().splitlines()) == 1
