"""find_knee on hand-made sweeps: where the two-segment fit puts the knee, and why it refuses one."""
from __future__ import annotations

import numpy as np
import pytest

from diagnose.capacity.knee import KneeError, LoadStep, _best_fit, _hinge, find_knee

RATES = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]


def steps(p99: list[float], achieved: list[float] | None = None, rates: list[float] = RATES) -> list[LoadStep]:
    return [LoadStep(x, a, y) for x, a, y in zip(rates, achieved or rates, p99)]


def test_flat_then_steep_puts_the_knee_at_the_breakpoint():
    k = find_knee(steps([5, 5, 5, 5, 25, 45, 65]))
    assert k.accepted and k.basis == "two-segment fit"
    assert k.breakpoint_qps == pytest.approx(40.0)
    assert (k.step, k.offered_qps, k.achieved_qps, k.p99_ms) == (3, 40.0, 40.0, 5)
    assert k.slope_before_ms_per_qps == pytest.approx(0.0, abs=1e-9)
    assert k.slope_after_ms_per_qps == pytest.approx(2.0)
    assert k.fit_improvement == pytest.approx(1.0)


def test_a_join_between_steps_picks_the_last_step_on_the_flat_side():
    # the lines 5 and 5 + 2 (x - 45) meet at 45 QPS, between the 40 and 50 QPS steps
    k = find_knee(steps([5, 5, 5, 5, 15, 35, 55]))
    assert k.accepted and k.breakpoint_qps == pytest.approx(45.0)
    assert k.offered_qps == 40.0 and k.p99_ms == 5


def test_purely_linear_has_no_knee_and_says_why():
    k = find_knee(steps([5 + 0.5 * x for x in RATES]))
    assert not k.accepted and k.step is None and k.achieved_qps is None
    assert k.reason.startswith("P99 rises without a knee") and "--slo-p99" in k.reason
    assert k.slope_after_ms_per_qps == pytest.approx(k.slope_before_ms_per_qps)


def test_a_flat_sweep_stayed_below_the_knee():
    k = find_knee(steps([5, 5.2, 4.9, 5.1, 5, 5.3, 5.1]))
    assert not k.accepted and "stayed below the knee; step higher" in k.reason


@pytest.mark.parametrize("n", [0, 1, 3])
def test_too_few_steps(n):
    k = find_knee(steps([5, 5, 50, 90][:n], rates=RATES[:n]))
    assert not k.accepted and k.reason.startswith(f"too few steps: {n}")


def test_a_noisy_knee_is_found_near_its_breakpoint():
    rng = np.random.default_rng(7)
    rates = [float(r) for r in range(20, 220, 20)]  # 10 steps, the knee at 120
    p99 = [10 + rng.normal(0, 0.8) + max(0.0, r - 120) * 1.5 for r in rates]
    k = find_knee(steps(p99, rates=rates))
    assert k.accepted and k.basis == "two-segment fit"
    assert k.breakpoint_qps is not None and 110 <= k.breakpoint_qps <= 130
    assert k.offered_qps in (100.0, 120.0)


def test_hudsons_join_is_the_least_squares_optimum():
    """The exact method matches a brute-force search over a fine grid of join points."""
    rng = np.random.default_rng(3)
    x = np.array([5.0, 9, 14, 22, 30, 41, 55, 70])
    y = 3 + 0.05 * x + np.maximum(0, x - 33) * 0.9 + rng.normal(0, 0.7, x.size)
    best = _best_fit(x, y)
    grid = min(_hinge(x, y, c).sse for c in np.linspace(x[1], x[-2], 2001))
    assert best.sse <= grid + 1e-9
    assert 22 <= best.join <= 41


def test_throughput_that_stops_following_the_load_is_a_knee():
    # P99 climbs smoothly (no two-segment shape) but the 60 QPS step serves only 45
    k = find_knee(steps([5, 6, 7, 8, 9, 10, 11], achieved=[10, 20, 30, 40, 50, 45, 46]))
    assert k.accepted and k.basis == "saturation"
    assert (k.offered_qps, k.achieved_qps) == (50.0, 50.0) and "60 QPS offered" in k.reason


def test_steps_past_the_first_saturated_one_are_left_out_of_the_fit():
    # P99 past saturation measures the step's length: 2,000 ms at 70 QPS must not flatten the fit
    k = find_knee(steps([5, 5, 5, 5, 25, 60, 2000], achieved=[10, 20, 30, 40, 50, 50, 50]))
    assert k.accepted and k.basis == "two-segment fit" and k.offered_qps == 40.0


def test_a_sweep_saturated_from_the_first_step_says_step_lower():
    k = find_knee(steps([500, 900, 1300, 1700], achieved=[5, 5, 5, 5], rates=[10, 20, 30, 40]))
    assert not k.accepted and "step lower" in k.reason


def test_the_arrivals_counted_decide_saturation_not_the_nominal_rate():
    # chance brought 52 arrivals/s to the 60 QPS step and all were served: not saturated
    s = LoadStep(60.0, 51.0, 5.0, arrival_qps=52.0)
    assert not s.saturated and LoadStep(60.0, 51.0, 5.0).saturated


def test_steps_in_any_order_and_without_a_p99():
    given = steps([5, 5, 5, 5, 25, 45, 65])
    shuffled = [given[i] for i in (6, 2, 0, 4, 1, 5, 3)] + [LoadStep(80.0, 0.0, None)]
    k = find_knee(shuffled)
    assert k.accepted and shuffled[k.step].offered_qps == 40.0


@pytest.mark.parametrize("bad", [
    [LoadStep(10, 10, 5), LoadStep(10, 10, 6)],
    [LoadStep(0, 0, 5)],
    [LoadStep(10, 10, float("nan"))],
    [LoadStep(10, -1, 5)],
])
def test_invalid_steps_are_refused(bad):
    with pytest.raises(KneeError):
        find_knee(bad)


def test_knee_to_json():
    k = find_knee(steps([5, 5, 5, 5, 25, 45, 65]))
    j = k.to_json()
    assert j["accepted"] is True and j["offered_qps"] == 40.0 and set(j) >= {"reason", "basis", "breakpoint_qps"}


def test_a_plateau_after_the_jump_does_not_put_the_knee_on_a_degraded_step():
    """The demo service's sweep on a loaded 2-core host: P99 jumped 12x at 211 QPS offered, then sat on
    a plateau, and the fit's join landed past 211: the knee is the last step still flat (141)."""
    rates = [70.0, 141.0, 211.0, 282.0, 387.0, 528.0]
    k = find_knee([LoadStep(x, a, y) for x, a, y in zip(rates, [70, 141, 192, 251, 361, 434],
                                                        [15.2, 23.3, 272.2, 241.6, 208.9, 475.1])])
    assert k.accepted and k.basis == "saturation"  # 251 of 282 offered: under 0.9x
    assert (k.offered_qps, k.p99_ms) == (141.0, 23.3), k


def test_p99_that_climbs_gently_with_the_load_is_still_the_flat_side():
    """The demo service on a quiet host: 7, 14, 24, 28 ms, then 111 and 697: the knee is at 344 QPS,
    not walked back to the first step because 14 ms is twice 7."""
    rates = [86.0, 172.0, 258.0, 344.0, 473.0, 645.0]
    k = find_knee([LoadStep(x, a, y) for x, a, y in zip(rates, [86, 173, 263, 351, 455, 465],
                                                        [6.8, 14.3, 23.7, 28.1, 111.2, 697.1])])
    assert k.accepted and k.offered_qps == 344.0, k
