"""How long each torch profiler window may be, and how far apart: the agent's overhead budget.

The profiler's stop and its export each hold the target's GIL for a time that grows with the
events recorded (measured on torch 2.13 CPU: 8-27 us per event to stop, 6-11 us to export; a 10 s
window of a 460k ops/s loop held the target for a minute). So the windows are sized by events,
not seconds: a PROBE_S window first measures what a window costs, then each window is the last
one scaled by SAFETY x STALL_BUDGET_S / its larger hold (stop or export), growing at most
MAX_GROWTH-fold (and shrinking when a hold came close to the budget), and the next window waits
until the holds so far stay under STALL_SHARE of the time. Windows repeat until ``wanted_s`` of
profiled time is recorded, MAX_WINDOWS ran, or the capture ends. Pure and standard library only
(runs inside the target).

The holds are not the whole cost: while a window is on, every op of the target pays the profiler,
so the windows together may be on for at most DUTY_SHARE of the capture (the duty cycle): each
window is at most DUTY_SHARE x capture / SPREAD_WINDOWS long, and the next starts only once the
profiled time so far, that window included, stays within DUTY_SHARE of the time since the first
started; so the windows come evenly through the capture rather than profiling it whole (a 10 s
window in a 10 s capture did). Once they stop growing, windows start at least capture / MAX_WINDOWS
apart, so that those the hold budget keeps short also reach the end of the capture.
"""
from __future__ import annotations

from dataclasses import dataclass

STALL_BUDGET_S = 0.05  # the most one stop or one export may hold the target's GIL
STALL_SHARE = 0.005
"""The holds together: at most 0.5% of the capture's time. Every request in flight during a hold waits
for it: at 2% (holds of 8-22 ms, 1.4% of a 10 s capture) a closed loop's P99 was a hold (1.65x the
reference, benchmarks/overhead.py); under 1% of the time the P99 is the service's own."""
SAFETY = 0.4  # aim well below the budget: the op rate (1.7x seen at a start) and the cost per event (2x) move
PROBE_S = 0.002
MIN_WINDOW_S = 0.002
MAX_WINDOW_S = 10.0
MIN_GAP_S = 0.5
MAX_WINDOWS = 16  # the probe and fifteen more: past that a capture has the picture (each stop costs a hold)
DUTY_SHARE = 0.01
"""The most of the capture's time the torch windows may be on, together (0.01 = 1%). Measured on torch
2.13 CPU (benchmarks/torch_window_cost.py, the agent's window settings): a window on costs every op
~1 us, 1.41x the CPU of the demo's model per batch (8 rows, Mlp 256-256-10), 2.1x for a loop of tiny
ops (a 4x64 matmul, add, relu), 1.06x for a 256x1024x1024 matmul. A target whose CPU is all in such
ops loses share x (slowdown - 1) / (1 + share x (slowdown - 1)) of its throughput. The requests served
while a window is on are the slowest ones: at 5% (1.7% in effect, the holds bounding it) they were a
closed loop's P99, 1.5-1.6x the reference; at 1% it was 1.25-1.43x in five runs (benchmarks/overhead.py,
docs/measured.md)."""
SPREAD_WINDOWS = 8  # the duty budget of a capture in about this many windows, evenly apart
# Until a window measured it, the most a target may record: a small-op loop (8x8 matmul + add, torch 2.13
# CPU) ~900k events per CPU-second; at 100k such a loop's second window recorded 9,400 events and held
# its target 46 ms (the llm demo decoding: ~55k). An overestimate only cuts the first windows short.
DEFAULT_EVENTS_PER_CPU_S = 1_000_000.0
DEFAULT_HOLD_PER_EVENT_S = 30e-6  # the larger hold per event until measured (8-27 us to stop, 6-11 to export)
MIN_MEASURED_EVENTS = 100
MIN_MEASURED_CPU_S = 0.005
MAX_GROWTH = 8.0  # the hold's fixed part does not grow: scaling by budget / hold over-estimates it


@dataclass(frozen=True)
class WindowStats:
    """One finished window: its length (s), events recorded, the two holds (s), and the target's
    process CPU time during it (s, ``time.process_time``: every thread)."""

    window_s: float
    events: int
    stop_s: float
    export_s: float
    cpu_s: float = 0.0

    @property
    def hold_s(self) -> float:
        return max(self.stop_s, self.export_s)

    @property
    def total_hold_s(self) -> float:
        return self.stop_s + self.export_s


@dataclass(frozen=True)
class Next:
    window_s: float
    gap_s: float  # from the end of the last export to the next start
    reason: str


def duty_budget_s(wanted_s: float, capture_s: float | None) -> float:
    """The profiled time (s) a capture of ``capture_s`` may have: ``wanted_s`` within DUTY_SHARE."""
    return wanted_s if capture_s is None else min(wanted_s, DUTY_SHARE * capture_s)


def next_window(done: list[WindowStats], wanted_s: float, elapsed_s: float = 0.0,
                capture_s: float | None = None) -> Next | None:
    """The next window, or None when ``wanted_s`` of profiled time is recorded (within DUTY_SHARE
    of ``capture_s``, the capture's length, when given) or even the shortest window held the target
    past the budget. ``elapsed_s``: time since the first window started (s)."""
    profiled = sum(w.window_s for w in done)
    left = duty_budget_s(wanted_s, capture_s) - profiled
    if left <= 1e-6:
        return None
    if not done:
        return Next(min(PROBE_S, left), 0.0, f"a {PROBE_S * 1e3:.0f} ms probe window measures the op rate")
    last = done[-1]
    if len(done) >= MAX_WINDOWS:
        return None
    if last.hold_s > STALL_BUDGET_S and last.window_s <= MIN_WINDOW_S * 1.01:
        return None
    # the hold grows at most in proportion to the window (its fixed part does not grow at all), so
    # scaling the last window by budget / its hold keeps the next hold under the budget, unless the
    # op rate jumps: SAFETY leaves room for that, MAX_GROWTH limits how fast a cheap window grows
    factor = min(MAX_GROWTH, SAFETY * STALL_BUDGET_S / max(last.hold_s, 1e-4))
    window = min(left, MAX_WINDOW_S, max(MIN_WINDOW_S, last.window_s * factor))
    duty_cap = DUTY_SHARE * capture_s / SPREAD_WINDOWS if capture_s is not None else MAX_WINDOW_S
    by_duty = window > duty_cap
    window = max(min(window, duty_cap), min(left, MIN_WINDOW_S))
    # once the windows stopped growing, their starts come this far apart (not while they still grow:
    # a long capture would otherwise wait minutes for a window worth reading)
    grown = window <= last.window_s * 1.01
    spread = capture_s / MAX_WINDOWS - last.window_s if capture_s is not None and grown else 0.0
    gap = max(MIN_GAP_S, sum(w.total_hold_s for w in done) / STALL_SHARE - elapsed_s,
              (profiled + window) / DUTY_SHARE - elapsed_s - window, spread)
    rate = last.events / last.window_s if last.window_s > 0 else 0.0
    why = (f"to keep the windows within {DUTY_SHARE:.0%} of the capture in about {SPREAD_WINDOWS}" if by_duty
           else f"to keep each hold under {STALL_BUDGET_S * 1e3:.0f} ms")
    return Next(window, gap, f"the last window recorded {last.events:,} events ({rate:,.0f}/s) and held the target "
                             f"{last.hold_s * 1e3:.1f} ms: the next is {window * 1e3:.0f} ms, {why}, "
                             f"{gap:.1f} s after the last")


def cpu_cap_s(done: list[WindowStats]) -> float:
    """How much process CPU time (s) the next window may see before the agent stops it early.

    A window is sized from the last one's events; a service idle through the first windows (11 events
    each) and then busy (a burst of generation: 31,647 events in one window, a 745 ms hold) outgrows
    that plan. Ops come from CPU work, so the window is cut once the target's CPU during it, at the
    most events per CPU-second measured so far, would pass the event budget (SAFETY x STALL_BUDGET_S
    over the measured hold per event). A window is a measurement of the rate when it saw real work
    (>= MIN_MEASURED_EVENTS events, or >= MIN_MEASURED_CPU_S of CPU at >= half a core); until one has,
    DEFAULT_EVENTS_PER_CPU_S stands in (a small-op loop's order), the cap at least MIN_MEASURED_CPU_S."""
    measured = [w for w in done if w.cpu_s >= MIN_MEASURED_CPU_S
                and (w.events >= MIN_MEASURED_EVENTS or w.cpu_s >= 0.5 * w.window_s)]
    rate = max((w.events / w.cpu_s for w in measured), default=DEFAULT_EVENTS_PER_CPU_S)
    costs = [w.hold_s / w.events for w in done if w.events >= MIN_MEASURED_EVENTS]
    per_event = max(costs, default=DEFAULT_HOLD_PER_EVENT_S)
    return max(MIN_MEASURED_CPU_S, SAFETY * STALL_BUDGET_S / per_event / max(rate, 1.0))


__all__ = ["DUTY_SHARE", "MIN_WINDOW_S", "PROBE_S", "STALL_BUDGET_S", "STALL_SHARE", "Next", "WindowStats",
           "cpu_cap_s", "duty_budget_s", "next_window"]
