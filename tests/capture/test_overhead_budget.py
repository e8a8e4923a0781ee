"""The overhead budget (diagnose/capture/budget.py): the first py-spy rate from the thread count,
then rates lowered when diagnose used more than the budget and raised back when well under."""
from __future__ import annotations

import pytest

from diagnose.capture.budget import (
    MIN_PROCESS_HZ,
    MIN_PYSPY_HZ,
    OverheadBudget,
    planned_process_rate,
    planned_rate,
    process_cores,
    pyspy_cores,
    reserve_cores,
)


def test_first_rates_fit_the_threads_into_the_budget():
    assert planned_rate(100, 4, 0.10) == 100  # 4 threads x 100 Hz: ~5% of a core
    hz = planned_rate(100, 40, 0.10)  # 40 threads x 100 Hz would be ~21%
    assert 10 < hz < 50 and pyspy_cores(hz, 40) + process_cores(10.0, 40) <= 0.10
    assert planned_rate(100, 10_000, 0.10) == MIN_PYSPY_HZ
    b = OverheadBudget.plan(10.0, 100, 10.0, 40)
    assert b.rates.pyspy_hz == hz and "40 threads x 100 Hz" in b.changes[-1]["why"]
    assert OverheadBudget.plan(10.0, 100, 10.0, 4).changes == []


def test_many_threads_lower_the_proc_readings_first_within_their_share():
    assert planned_process_rate(10.0, 40, 0.10) == 10.0  # 1.5 ms x 10 Hz: under 30% of the budget
    hz = planned_process_rate(10.0, 200, 0.10)  # 4.7 ms a reading
    assert MIN_PROCESS_HZ < hz < 10.0 and process_cores(hz, 200) <= 0.3 * 0.10 + 1e-9
    b = OverheadBudget.plan(10.0, 100, 10.0, 200)
    assert b.rates.process_hz == hz and "/proc readings" in b.changes[0]["why"]
    assert b.rates.pyspy_hz == planned_rate(100, 200, 0.10, hz)


def test_over_budget_lowers_the_larger_part_first_then_raises_back():
    b = OverheadBudget.plan(10.0, 100, 10.0, 4)
    b._adjust(2.0, used=0.15, own=0.12, kids=0.03)  # own threads over half: halve the /proc readings
    assert b.rates.process_hz == 5.0 and b.rates.pyspy_hz == 100  # py-spy fits in what is left
    b._adjust(4.0, used=0.16, own=0.04, kids=0.12)  # py-spy over what is left: scaled down
    assert b.rates.pyspy_hz == int(100 * (0.10 - 0.04) / 0.12 * 0.9)
    b._adjust(6.0, used=0.03, own=0.01, kids=0.02)  # well under: back toward what was asked
    assert b.rates.pyspy_hz == int(45 * 1.5) + 1 and b.rates.process_hz == 10.0
    doc = b.to_json()
    assert doc["asked"] == {"pyspy_hz": 100, "process_hz": 10.0} and len(doc["changes"]) == 3


def test_the_captures_one_time_cpu_is_reserved_from_the_budget_over_its_duration():
    assert reserve_cores(0.10, None) == 0.0
    assert reserve_cores(0.10, 50.0) == pytest.approx(0.01)  # 0.5 CPU-s over 50 s: 1% of a core
    assert reserve_cores(0.10, 1.0) == pytest.approx(0.05)  # a 1 s capture: at most half the budget
    short, long_ = OverheadBudget.plan(10.0, 100, 10.0, 40, 20.0), OverheadBudget.plan(10.0, 100, 10.0, 40)
    assert short.rates.pyspy_hz < long_.rates.pyspy_hz  # 40 threads: py-spy gets what the reserve leaves
    assert short.to_json()["reserved_pct_of_core"] == 2.5
    before = short.rates.pyspy_hz
    short._adjust(2.0, used=0.085 + short.reserved_cores, own=0.015, kids=0.07)  # over, with the reserve
    assert short.rates.pyspy_hz == int(before * (0.10 - 0.025 - 0.015) / 0.07 * 0.9) < before


def test_py_spy_is_raised_only_as_far_as_its_cost_per_hz_keeps_the_total_under_raise_to():
    b = OverheadBudget.plan(10.0, 100, 10.0, 40)
    b._change(0.0, pyspy_hz=20, why="test")
    b._adjust(2.0, used=0.055, own=0.015, kids=0.04)  # 2 ms of CPU per s per Hz: 1.5x would be 7.5%
    assert b.rates.pyspy_hz == int(20 * 1.5) + 1
    b._adjust(4.0, used=0.059, own=0.015, kids=0.044)  # 31 Hz -> 1.5x (47 Hz) would be ~8.1%: capped
    assert b.rates.pyspy_hz == int((0.08 - 0.015) * 31 / 0.044) < int(31 * 1.5) + 1


@pytest.mark.live  # a thread's CPU share on this host: other tests beside it take the cores
def test_observe_measures_the_collector_threads_of_this_process():
    import threading
    import time

    b = OverheadBudget.plan(400.0, 100, 10.0, 1)
    stop = threading.Event()

    def spin() -> None:  # real CPU in a collector-named thread
        while not stop.is_set():
            sum(i * i for i in range(10_000))

    t = threading.Thread(target=spin, name="diagnose-spin")
    t.start()
    b.observe(0.0, 0.0)
    sum(i * i for i in range(2_000_000))  # the main thread's CPU (a live view's, say) is not counted
    time.sleep(0.6)
    b.observe(1.0, 0.3)  # 0.3 s of py-spy children meanwhile
    stop.set()
    t.join()
    assert b.used_cores and b.used_cores[0] > 0.3
    assert b.rates.pyspy_hz == 100  # within a 400% budget: nothing lowered
    with pytest.raises(AttributeError):
        b.rates.unknown_rate  # noqa: B018 - the rates are a closed set
