"""The capture loop on a fake clock: every ending reason, collector isolation, the manifest's
``partial`` and the progress callback, each in milliseconds.

The collectors here are small doubles of diagnose's own Collector interface; the real collectors
on real processes (py-spy, signals mid-capture) are covered end to end in tests/cli/test_bad_input.py,
tests/capture/test_hostile.py and tests/tui/.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import threading

import psutil
import pytest

from diagnose.bundle import CollectorState, CollectorStatus
from diagnose.capture.clock import FAKE_EPOCH_NS, FakeClock
from diagnose.capture.session import Capture, Progress
from diagnose.capture.stop import StopFlag
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions, Collector, Probe
from diagnose.model import Target

AVAILABLE = Probe(True)


class DoubleCollector(Collector):
    """Does nothing but record its calls; ``fail_in`` names the phase that raises."""

    def __init__(self, name: str, *, probe: Probe = AVAILABLE, fail_in: str | None = None,
                 final: CollectorState = CollectorState.OK, final_reason: str | None = None):
        self.name = name
        self._probe = probe
        self._fail_in = fail_in
        self._final = final
        self._final_reason = final_reason
        self.calls: list[str] = []

    def _call(self, phase: str) -> None:
        self.calls.append(phase)
        if phase == self._fail_in:
            raise RuntimeError(f"{self.name} broke in {phase}")

    def probe(self, target, options) -> Probe:
        self._call("probe")
        return self._probe

    def start(self, target, options, bundle) -> None:
        self._call("start")

    def stop(self, timeout_s: float) -> CollectorStatus:
        self._call("stop")
        return CollectorStatus(self.name, self._final, self._final_reason, self.counts())

    def counts(self) -> dict[str, int]:
        return {"records": 3}


def this_process() -> Target:
    """This test process as the target: alive for the whole capture (resolve_target refuses it)."""
    p = psutil.Process()
    return Target(p.pid, p.name(), p.exe(), tuple(p.cmdline()), p.username(), p.uids().real,
                  p.create_time(), "test-host")


def run_capture(tmp_path, *collectors, clock=None, stop=None, target=None, on_progress=None,
                duration_s: float = 5.0, skip: tuple[str, ...] = ()):
    capture = Capture(target or this_process(), CaptureOptions(duration_s=duration_s, skip=skip),
                      tmp_path, command=["test"], collectors=collectors, clock=clock or FakeClock())
    result = capture.run(stop if stop is not None else StopFlag(), on_progress)
    return result, json.loads((result.bundle_path / "manifest.json").read_text())


def elapsed_s(manifest: dict) -> float:
    return (manifest["ended_ns"] - manifest["started_ns"]) / 1e9


def states(manifest: dict) -> dict[str, tuple[str, str | None]]:
    return {c["name"]: (c["state"], c["reason"]) for c in manifest["collectors"]}


def test_duration_reached_ends_a_complete_capture(tmp_path):
    a, b = DoubleCollector("a"), DoubleCollector("b")
    clock = FakeClock()
    result, manifest = run_capture(tmp_path, a, b, clock=clock, duration_s=5.0)
    assert result.end_reason == manifest["end_reason"] == "duration reached"
    assert result.partial is False and manifest["partial"] is False
    assert manifest["started_ns"] == FAKE_EPOCH_NS and elapsed_s(manifest) == 5.0
    assert result.bundle_path.name.endswith("-20231114T221320Z")  # named from the clock's wall time
    assert states(manifest) == {"a": ("ok", None), "b": ("ok", None)}
    assert a.calls == b.calls == ["probe", "start", "stop"]
    assert max(clock.waits) == 0.25 and sum(clock.waits) == pytest.approx(5.0)  # polls at 4 Hz


def test_a_deadline_between_two_polls_is_met_without_overshoot(tmp_path):
    clock = FakeClock()
    _, manifest = run_capture(tmp_path, DoubleCollector("a"), clock=clock, duration_s=0.6)
    assert clock.waits[:2] == [0.25, 0.25] and clock.waits[2] == pytest.approx(0.1)
    assert elapsed_s(manifest) == pytest.approx(0.6)


@pytest.mark.parametrize("reason", ["interrupted (SIGINT)", "terminated (SIGTERM)",
                                    "hung up (SIGHUP, terminal closed)", "stopped from the TUI"])
def test_stop_ends_the_capture_early_with_its_reason(tmp_path, reason):
    collector, clock, stop = DoubleCollector("a"), FakeClock(), StopFlag()
    clock.at(1.6, stop.trigger, reason)  # between two polls: the wait returns when it is set
    result, manifest = run_capture(tmp_path, collector, clock=clock, stop=stop, duration_s=30.0)
    assert manifest["end_reason"] == reason and manifest["partial"] is True and result.partial
    assert elapsed_s(manifest) == pytest.approx(1.6)
    assert collector.calls == ["probe", "start", "stop"] and states(manifest)["a"] == ("ok", None)


def test_the_first_stop_reason_is_kept(tmp_path):
    clock, stop = FakeClock(), StopFlag()
    clock.at(1.0, lambda: (stop.trigger("terminated (SIGTERM)"), stop.trigger("hung up (SIGHUP)")))
    _, manifest = run_capture(tmp_path, DoubleCollector("a"), clock=clock, stop=stop)
    assert manifest["end_reason"] == "terminated (SIGTERM)"


def test_a_plain_event_reads_interrupted_and_a_stop_before_the_loop_ends_it_at_once(tmp_path):
    stop = threading.Event()
    stop.set()
    clock = FakeClock()
    _, manifest = run_capture(tmp_path, DoubleCollector("a"), clock=clock, stop=stop)
    assert manifest["end_reason"] == "interrupted" and manifest["partial"] is True
    assert elapsed_s(manifest) == 0.0 and clock.waits == []


def test_target_exiting_ends_the_capture_when_it_is_gone(tmp_path):
    child = subprocess.Popen(["sleep", "60"])
    try:
        target = resolve_target(child.pid)
        clock = FakeClock()
        clock.at(2.1, lambda: (child.kill(), child.wait()))  # dies and is reaped: no zombie either
        collector = DoubleCollector("a")
        _, manifest = run_capture(tmp_path, collector, clock=clock, target=target, duration_s=30.0)
    finally:
        child.kill()
        child.wait()
    assert manifest["end_reason"] == "target exited" and manifest["partial"] is True
    assert elapsed_s(manifest) == pytest.approx(2.25)  # seen on the next poll, not at the deadline
    assert collector.calls == ["probe", "start", "stop"]
    assert manifest["target"]["pid"] == child.pid


def test_no_collector_could_start(tmp_path):
    missing = DoubleCollector("a", probe=Probe(False, "not a Python process"))
    skipped = DoubleCollector("b")
    clock = FakeClock()
    result, manifest = run_capture(tmp_path, missing, skipped, clock=clock, skip=("b",))
    assert manifest["end_reason"] == "no collector could start" and manifest["partial"] is True
    assert elapsed_s(manifest) == 0.0 and clock.waits == []
    assert states(manifest) == {"a": ("unavailable", "not a Python process"),
                                "b": ("unavailable", "skipped (--skip b)")}
    assert missing.calls == ["probe"] and skipped.calls == []
    assert not result.captured_anything


@pytest.mark.parametrize("phase, calls, reason", [
    ("probe", ["probe"], "RuntimeError: broken broke in probe"),
    ("start", ["probe", "start"], "RuntimeError: broken broke in start"),
    ("stop", ["probe", "start", "stop"], "stop failed: broken broke in stop"),
])
def test_a_collector_raising_is_recorded_failed_and_the_others_go_on(tmp_path, phase, calls, reason):
    broken, good = DoubleCollector("broken", fail_in=phase), DoubleCollector("good")
    result, manifest = run_capture(tmp_path, broken, good, duration_s=2.0)
    assert manifest["end_reason"] == "duration reached" and elapsed_s(manifest) == 2.0
    assert states(manifest) == {"broken": ("failed", reason), "good": ("ok", None)}
    assert broken.calls == calls and good.calls == ["probe", "start", "stop"]
    assert manifest["partial"] is False  # a failed collector is in the report, not a cut capture
    assert result.captured_anything


def test_one_partial_collector_makes_a_full_length_capture_partial(tmp_path):
    partial = DoubleCollector("a", final=CollectorState.PARTIAL, final_reason="lost the agent")
    result, manifest = run_capture(tmp_path, partial, DoubleCollector("b"), duration_s=1.0)
    assert manifest["end_reason"] == "duration reached"
    assert manifest["partial"] is True and result.partial
    assert states(manifest)["a"] == ("partial", "lost the agent")


def test_the_manifest_says_capturing_while_the_loop_waits(tmp_path):
    seen: list[dict] = []

    def on_progress(p: Progress) -> None:
        if not seen:
            (bundle,) = [d for d in tmp_path.iterdir() if d.name.startswith("diagnose-")]
            seen.append(json.loads((bundle / "manifest.json").read_text()))

    _, final = run_capture(tmp_path, DoubleCollector("a"), on_progress=on_progress, duration_s=1.0)
    assert seen[0]["end_reason"] == "capturing" and seen[0]["ended_ns"] is None
    assert seen[0]["partial"] is True and states(seen[0])["a"] == ("running", None)
    assert final["end_reason"] == "duration reached" and final["ended_ns"] is not None


def test_progress_gets_elapsed_and_remaining_from_the_clock(tmp_path):
    shown: list[Progress] = []
    clock = FakeClock(start_s=1000.0)  # the loop measures from its start, not from clock zero
    run_capture(tmp_path, DoubleCollector("a"), DoubleCollector("b", probe=Probe(False, "no GPU")),
                clock=clock, on_progress=shown.append, duration_s=1.0)
    assert [p.elapsed_s for p in shown] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [p.remaining_s for p in shown] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert shown[0].counts == {"a": {"records": 3}}  # only the running collectors count
    assert shown[0].states == {"a": "running", "b": "unavailable"}


def test_an_error_in_the_loop_still_stops_every_started_collector(tmp_path):
    a, b = DoubleCollector("a"), DoubleCollector("b")
    clock = FakeClock()

    def full_disk(p: Progress) -> None:
        if p.elapsed_s >= 0.5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError):
        run_capture(tmp_path, a, b, clock=clock, on_progress=full_disk)
    assert a.calls == b.calls == ["probe", "start", "stop"]
    assert clock.monotonic_s() == 0.5
