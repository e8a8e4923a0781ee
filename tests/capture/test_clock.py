"""The capture loop's clocks: the real one waits on the event, the fake one moves time at once."""
from __future__ import annotations

import threading
import time

from diagnose.capture.clock import FAKE_EPOCH_NS, SYSTEM_CLOCK, FakeClock


def test_system_clock_is_the_real_time_and_the_events_wait():
    assert abs(SYSTEM_CLOCK.time_ns() - time.time_ns()) < 10**9
    assert abs(SYSTEM_CLOCK.monotonic_s() - time.monotonic()) < 1.0
    event = threading.Event()
    assert SYSTEM_CLOCK.wait(event, 0.01) is False
    event.set()
    t0 = time.monotonic()
    assert SYSTEM_CLOCK.wait(event, 30.0) is True and time.monotonic() - t0 < 1.0


def test_fake_wait_runs_the_full_timeout_at_once_when_nothing_sets_the_event():
    clock, event = FakeClock(), threading.Event()
    t0 = time.monotonic()
    assert clock.wait(event, 3600.0) is False
    assert time.monotonic() - t0 < 0.1
    assert clock.monotonic_s() == 3600.0 and clock.time_ns() == FAKE_EPOCH_NS + 3600 * 10**9


def test_fake_wait_returns_when_a_scheduled_action_sets_the_event():
    clock, event = FakeClock(), threading.Event()
    ran: list[tuple[str, float]] = []
    clock.at(2.0, lambda: ran.append(("later", clock.monotonic_s())))
    clock.at(1.0, lambda: ran.append(("first", clock.monotonic_s())))
    clock.at(1.5, event.set)
    assert clock.wait(event, 10.0) is True
    assert clock.monotonic_s() == 1.5 and ran == [("first", 1.0)]
    event.clear()
    clock.advance(1.0)
    assert ran == [("first", 1.0), ("later", 2.0)] and clock.monotonic_s() == 2.5


def test_fake_actions_due_together_run_in_order_and_a_past_one_runs_on_the_next_wait():
    clock, ran = FakeClock(start_s=10.0), []
    clock.at(11.0, ran.append, "a")
    clock.at(11.0, ran.append, "b")
    clock.at(5.0, ran.append, "overdue")
    assert clock.wait(threading.Event(), 1.0) is False
    assert ran == ["overdue", "a", "b"] and clock.monotonic_s() == 11.0
    assert clock.time_ns() == FAKE_EPOCH_NS + 10**9  # wall time counts from the start
    assert clock.waits == [1.0]
