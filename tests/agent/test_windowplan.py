"""The torch window plan (diagnose/agent/inproc/windowplan.py), hand-checked."""
from __future__ import annotations

import pytest

from diagnose.agent.inproc.windowplan import (
    DUTY_SHARE,
    MAX_GROWTH,
    MIN_GAP_S,
    MIN_WINDOW_S,
    PROBE_S,
    SAFETY,
    STALL_BUDGET_S,
    STALL_SHARE,
    WindowStats,
    next_window,
)


def test_a_probe_first_then_growth_capped_by_the_budget():
    first = next_window([], 10.0)
    assert first.window_s == PROBE_S and first.gap_s == 0
    cheap = [WindowStats(0.002, 20, 0.0005, 0.0008)]  # 0.8 ms hold: growth is capped
    nxt = next_window(cheap, 10.0, elapsed_s=0.01)
    assert nxt.window_s == pytest.approx(0.002 * MAX_GROWTH)
    # the next starts once the profiled time, that window included, is within the duty share
    assert nxt.gap_s == pytest.approx(max(MIN_GAP_S, (0.002 + nxt.window_s) / DUTY_SHARE - 0.01 - nxt.window_s))


def test_a_costly_window_shrinks_the_next_and_the_gap_keeps_the_share():
    costly = [WindowStats(0.1, 5000, 0.045, 0.04)]  # 45 ms hold for 100 ms of profiling
    nxt = next_window(costly, 10.0, elapsed_s=0.2)
    assert nxt.window_s == pytest.approx(0.1 * SAFETY * STALL_BUDGET_S / 0.045)
    assert nxt.gap_s == pytest.approx(0.085 / STALL_SHARE - 0.2)  # holds over the share of time
    assert nxt.gap_s > (0.1 + nxt.window_s) / DUTY_SHARE - 0.2 - nxt.window_s  # here, not the duty share
    assert "5,000 events" in nxt.reason


def test_stops_when_done_or_when_even_the_shortest_window_is_too_costly():
    assert next_window([WindowStats(1.0, 10, 0.001, 0.001)], 1.0) is None
    assert next_window([WindowStats(MIN_WINDOW_S, 9000, 0.08, 0.01)], 10.0) is None
    last = next_window([WindowStats(0.9, 10, 0.001, 0.001)], 1.0)
    assert last.window_s == pytest.approx(0.1)  # what is left of the wanted time


def test_a_window_is_cut_once_the_targets_cpu_would_pass_its_event_budget():
    """The llm demo: windows of 11 events while idle, then one met a burst of generation (31,647 events,
    a 745 ms hold). The CPU a window may see is the event budget at the most events per CPU-second
    measured, a small-op loop's order until a window saw real work (at the decode loop's order, 100k, a
    small-op loop's second window recorded 9,400 events and held its target 46 ms), never under
    MIN_MEASURED_CPU_S."""
    from diagnose.agent.inproc.windowplan import DEFAULT_EVENTS_PER_CPU_S, MIN_MEASURED_CPU_S, cpu_cap_s

    idle = [WindowStats(0.002, 1, 0.0003, 0.0004, 0.001), WindowStats(0.5, 11, 0.001, 0.001, 0.01)]
    cap = cpu_cap_s(idle)
    assert DEFAULT_EVENTS_PER_CPU_S >= 900_000 and cap == MIN_MEASURED_CPU_S  # 5 ms: ~4,500 events at 900k/s
    probe = [WindowStats(0.0021, 11, 0.0002, 0.0005, 0.0002)]  # the probe of the loop above: 11 events
    assert cpu_cap_s(probe) * 900_000 * 5.5e-6 < 0.4 * STALL_BUDGET_S * 1.5  # its stop ~4.6-5.5 us an event
    # a compute-bound model: few events, much CPU (two cores for a second): no early cut to speak of
    assert cpu_cap_s([WindowStats(1.0, 200, 0.003, 0.002, 2.0)]) > 10.0
    # a small-ops loop measured at 400k events per CPU-second: the cut comes at its planned size
    fast = [WindowStats(0.05, 20_000, 0.02, 0.008, 0.05)]
    assert cpu_cap_s(fast) == pytest.approx(SAFETY * STALL_BUDGET_S / (0.02 / 20_000) / 400_000)


def _simulate(capture_s: float, wanted_s: float, events_per_s: float) -> list[tuple[float, float]]:
    """(start s, window s) of the windows the plan gives a capture of ``capture_s``, each window's
    holds ~18 us an event."""
    done: list[WindowStats] = []
    plan: list[tuple[float, float]] = []
    t, first = 0.0, None
    while (nxt := next_window(done, wanted_s, t - first if first is not None else 0.0, capture_s)) is not None:
        t += nxt.gap_s
        if t + nxt.window_s > capture_s:
            break
        first = t if first is None else first
        events = int(nxt.window_s * events_per_s)
        done.append(WindowStats(nxt.window_s, events, events * 10e-6, events * 8e-6))
        plan.append((t, nxt.window_s))
        t += nxt.window_s + events * 18e-6
    return plan


@pytest.mark.parametrize("capture_s, events_per_s", [(12.0, 20_000), (12.0, 400_000), (60.0, 2_000), (600.0, 20_000)])
def test_the_windows_stay_within_the_duty_share_spread_through_the_capture(capture_s, events_per_s):
    """Issue 24: a 10 s window in a 10 s capture profiled all of it, and every op of the target paid
    the profiler the whole time (1.4x the demo model's CPU). Now at most DUTY_SHARE of the capture,
    whatever --torch-window asks, and the windows reach its last part."""
    from diagnose.agent.inproc.windowplan import DUTY_SHARE, duty_budget_s

    plan = _simulate(capture_s, 10.0, events_per_s)
    assert len(plan) >= 3
    assert sum(w for _, w in plan) <= DUTY_SHARE * capture_s + 1e-9 == duty_budget_s(60.0, capture_s) + 1e-9
    for i, (start, window) in enumerate(plan[1:], 1):  # the running share, from the first start on
        assert sum(w for _, w in plan[:i + 1]) <= DUTY_SHARE * (start + window) + 1e-9, plan
    assert plan[-1][0] >= 0.5 * capture_s, plan  # not bunched at the start


def test_without_a_capture_length_only_the_running_share_limits_the_windows():
    from diagnose.agent.inproc.windowplan import DUTY_SHARE

    done = [WindowStats(0.002, 20, 0.0005, 0.0008), WindowStats(0.016, 200, 0.002, 0.002)]
    nxt = next_window(done, 10.0, elapsed_s=0.6)
    assert nxt.window_s == pytest.approx(0.128)
    assert nxt.gap_s == pytest.approx((0.018 + 0.128) / DUTY_SHARE - 0.6 - 0.128)
