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
"""
from __future__ import annotations

from dataclasses import dataclass

STALL_BUDGET_S = 0.05  # the most one stop or one export may hold the target's GIL
STALL_SHARE = 0.02  # the holds together: at most 2% of the capture's time
SAFETY = 0.4  # aim well below the budget: the op rate (1.7x seen at a start) and the cost per event (2x) move
PROBE_S = 0.002
MIN_WINDOW_S = 0.002
MAX_WINDOW_S = 10.0
MIN_GAP_S = 0.5
MAX_WINDOWS = 16  # the probe and fifteen more: past that a capture has the picture (each stop costs a hold)
DEFAULT_EVENTS_PER_CPU_S = 100_000.0  # until a window measured it (the llm demo decoding: ~55k per CPU-s)
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


def next_window(done: list[WindowStats], wanted_s: float, elapsed_s: float = 0.0) -> Next | None:
    """The next window, or None when ``wanted_s`` of profiled time is recorded or even the
    shortest window held the target past the budget. ``elapsed_s``: time since the first window
    started (s)."""
    profiled = sum(w.window_s for w in done)
    left = wanted_s - profiled
    if left <= 1e-6:
        return None
    if not done:
        return Next(min(PROBE_S, left), 0.0, f"a {PROBE_S * 1e3:.0f} ms probe window measures the op rate")
    last = done[-1]
    if len(done) >= MAX_WINDOWS:
        return None
    if last.hold_s > STALL_BUDGET_S and last.window_s <= MIN_WINDOW_S * 1.01:
        return None
    gap = max(MIN_GAP_S, sum(w.total_hold_s for w in done) / STALL_SHARE - elapsed_s)
    # the hold grows at most in proportion to the window (its fixed part does not grow at all), so
    # scaling the last window by budget / its hold keeps the next hold under the budget, unless the
    # op rate jumps: SAFETY leaves room for that, MAX_GROWTH limits how fast a cheap window grows
    factor = min(MAX_GROWTH, SAFETY * STALL_BUDGET_S / max(last.hold_s, 1e-4))
    window = min(left, MAX_WINDOW_S, max(MIN_WINDOW_S, last.window_s * factor))
    rate = last.events / last.window_s if last.window_s > 0 else 0.0
    return Next(window, gap, f"the last window recorded {last.events:,} events ({rate:,.0f}/s) and held the target "
                             f"{last.hold_s * 1e3:.1f} ms: the next is {window * 1e3:.0f} ms, to keep each hold under "
                             f"{STALL_BUDGET_S * 1e3:.0f} ms")


def cpu_cap_s(done: list[WindowStats]) -> float:
    """How much process CPU time (s) the next window may see before the agent stops it early.

    A window is sized from the last one's events; a service idle through the first windows (11 events
    each) and then busy (a burst of generation: 31,647 events in one window, a 745 ms hold) outgrows
    that plan. Ops come from CPU work, so the window is cut once the target's CPU during it, at the
    most events per CPU-second measured so far, would pass the event budget (SAFETY x STALL_BUDGET_S
    over the measured hold per event). A window is a measurement of the rate when it saw real work
    (>= MIN_MEASURED_EVENTS events, or >= MIN_MEASURED_CPU_S of CPU at >= half a core); until one has,
    DEFAULT_EVENTS_PER_CPU_S stands in (the llm demo decodes at ~55k)."""
    measured = [w for w in done if w.cpu_s >= MIN_MEASURED_CPU_S
                and (w.events >= MIN_MEASURED_EVENTS or w.cpu_s >= 0.5 * w.window_s)]
    rate = max((w.events / w.cpu_s for w in measured), default=DEFAULT_EVENTS_PER_CPU_S)
    costs = [w.hold_s / w.events for w in done if w.events >= MIN_MEASURED_EVENTS]
    per_event = max(costs, default=DEFAULT_HOLD_PER_EVENT_S)
    return max(MIN_MEASURED_CPU_S, SAFETY * STALL_BUDGET_S / per_event / max(rate, 1.0))


__all__ = ["MIN_WINDOW_S", "PROBE_S", "STALL_BUDGET_S", "STALL_SHARE", "Next", "WindowStats", "cpu_cap_s",
           "next_window"]
