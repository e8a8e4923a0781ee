"""An agent that cannot answer at the stop (its target holds the interpreter in a C call, as
Kineto's profiler stop does while it post-processes a window) is waited for, bounded, while the
target lives: not declared lost. Real target under `diagnose run`, real agent, real socket."""
from __future__ import annotations

import os
import signal
import time

from agent_helpers import read_until, service  # noqa: F401  (fixture)
from diagnose.bundle import BundleWriter, CollectorState
from diagnose.capture.target import resolve_target
from diagnose.collectors import agent as agent_collector
from diagnose.collectors.base import CaptureOptions

HOLD_S = "2.0"  # the target holds the GIL this long (s), from just before the stop


def _capture(service, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(agent_collector, "CALL_TIMEOUT_S", 0.3)
    svc = service(HOLD_S, workload="gil_holder")
    target = resolve_target(svc.pid)
    bundle = tmp_path / "b"
    bundle.mkdir(mode=0o700)
    writer = BundleWriter(bundle)
    collector = agent_collector.AgentCollector()
    opts = CaptureOptions(duration_s=30, torch_window_s=0)
    assert collector.probe(target, opts).available
    collector.start(target, opts, writer)
    time.sleep(0.3)
    os.kill(svc.pid, signal.SIGUSR1)
    read_until(svc.proc, "HOLD", 10, svc.lines)
    return svc, collector, writer


def test_an_agent_busy_under_the_gil_at_the_stop_is_waited_for_and_its_lateness_said(
        service, tmp_path, monkeypatch):  # noqa: F811
    svc, collector, writer = _capture(service, tmp_path, monkeypatch)
    t0 = time.monotonic()
    status = collector.stop(20.0)
    waited = time.monotonic() - t0
    writer.close()
    read_until(svc.proc, "HELD", 20, svc.lines)
    held = float(svc.lines[-1].split()[1])
    assert status.state != CollectorState.FAILED, status  # partial: this target has no spans to give
    assert "lost the agent" not in (status.reason or "")
    assert status.counts["agent_unanswered_s"] >= 0.5 * held, (status.counts, held)
    assert waited >= 0.8 * held
    assert "finished" in status.reason and "after the capture ended" in status.reason, status.reason


def test_the_wait_is_bounded_and_says_the_agent_did_not_answer(service, tmp_path, monkeypatch):  # noqa: F811
    svc, collector, writer = _capture(service, tmp_path, monkeypatch)
    t0 = time.monotonic()
    status = collector.stop(0.4)
    waited = time.monotonic() - t0
    writer.close()
    assert waited < 0.4 + agent_collector.CALL_TIMEOUT_S + 0.5, waited
    # no answer at all, or the stop taken just before the hold and no answer since
    if status.state == CollectorState.FAILED:
        assert "did not answer" in status.reason and "while the target ran" in status.reason, status.reason
    else:
        assert status.state == CollectorState.PARTIAL and "still capturing" in status.reason, status
        assert "torch trace" not in status.reason and "torch_export_pending" not in status.counts  # none asked


def test_a_target_that_dies_during_the_stop_is_lost_not_waited_for(service, tmp_path, monkeypatch):  # noqa: F811
    svc, collector, writer = _capture(service, tmp_path, monkeypatch)
    os.killpg(svc.pid, signal.SIGKILL)
    svc.proc.wait(5)
    t0 = time.monotonic()
    status = collector.stop(20.0)
    writer.close()
    assert time.monotonic() - t0 < 3.0
    assert "lost the agent" in status.reason, status

