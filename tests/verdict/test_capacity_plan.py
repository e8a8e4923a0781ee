"""Capacity and cost arithmetic (diagnose/capacity/plan.py), checked by hand, and `diagnose plan`
on a real imported capture."""
from __future__ import annotations

import dataclasses
import json

import pytest

from diagnose.bundle import Bundle
from diagnose.capacity.plan import PlanError, Target, cost_per_1m_tokens, instances_needed, littles_law_in_flight, plan
from diagnose.model import Quadrant
from diagnose.pipeline import analyse
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


def test_plan_on_a_no_load_capture_says_first_that_it_overstates_the_need(tmp_path):
    """A capture of a service that mostly waited for work measured the offered QPS, not its capacity."""
    otlp = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"
    if not otlp.exists():
        pytest.skip("../shared/data is absent")
    assert run_diagnose("analyze", str(otlp), "--out", str(tmp_path)).returncode == 0
    report = analyse(Bundle.open(only_bundle(tmp_path)))
    assert report.analysis.verdict.quadrant is not Quadrant.NO_LOAD
    loaded = plan(report, Target(100.0))
    assert not any("no load" in n for n in loaded.notes)
    idle = dataclasses.replace(report.analysis, verdict=dataclasses.replace(report.analysis.verdict,
                                                                             quadrant=Quadrant.NO_LOAD))
    p = plan(dataclasses.replace(report, analysis=idle), Target(100.0))
    assert p.notes[0].startswith("the verdict is no load") and "--sweep" in p.notes[0]
    assert p.instances == loaded.instances  # the arithmetic is the same: the note says what it rests on
