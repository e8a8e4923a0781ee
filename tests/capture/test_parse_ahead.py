"""The capture parses py-spy windows and torch traces while it runs (diagnose/capture/ahead.py): the
analysis at its end takes those results, and its findings.json is byte for byte what `diagnose
analyze` writes from the bundle on disk, also when the capture was cut short (Ctrl-C, the target
exiting) with only part of it parsed ahead."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

from diagnose.collectors import CaptureOptions
from diagnose.pipeline import AttachRequest, attach
from helpers import run_diagnose

FAST = dict(skip=("nvml", "gpm", "dcgm", "agent", "otlp", "serving"), pyspy_window_s=1.0)
MIN_LIVED_S = 3.0  # past the 2 s of secondary.target_exited_early (rules/cpu.py), with room for a slow start


class EndAfterParsedAhead:
    """A headless view whose capture ends (``end(stop)``) once the parsing child delivered a result,
    and not before MIN_LIVED_S (a target gone sooner gets no verdict: secondary.target_exited_early)."""

    def __init__(self, end: Callable[[threading.Event], None]):
        self.end = end
        self.received_at_end = 0

    def run(self, capture, stop, finish):
        def watch() -> None:
            started = time.monotonic()
            deadline = started + 60
            while not stop.is_set() and time.monotonic() < deadline:
                if capture.ahead is not None and capture.ahead.received >= 1 \
                        and time.monotonic() - started >= MIN_LIVED_S:
                    self.received_at_end = capture.ahead.received
                    self.end(stop)
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        result = capture.run(stop)
        watcher.join()
        return result, None


def same_as_analyze(bundle) -> None:
    live = (bundle / "findings.json").read_bytes()
    res = run_diagnose("analyze", str(bundle))
    assert res.returncode == 0, res.stderr
    assert (bundle / "findings.json").read_bytes() == live


@pytest.mark.parametrize("how", ["interrupted", "target exited"])
def test_a_capture_cut_short_after_some_windows_were_parsed_ahead_still_analyses(how, workload, tmp_path):
    proc = workload("json_loop")
    out = tmp_path / "out"
    out.mkdir()
    ends = {"interrupted": lambda stop: stop.set(), "target exited": lambda stop: proc.kill()}
    view = EndAfterParsedAhead(ends[how])
    done = attach(AttachRequest(proc.pid, CaptureOptions(duration_s=60.0, **FAST), out, ("test",), {}), view)
    assert done.capture.end_reason == how and view.received_at_end >= 1
    ahead = done.report.bundle.ahead
    assert ahead is not None and ahead.used >= 1 and ahead.stale == 0  # windows taken, not parsed again
    assert done.report.analysis.verdict.quadrant.value == "service"
    cost = json.loads((done.capture.bundle_path / "manifest.json").read_text())["cost"]
    assert 0 < cost["parse_ahead_cpu_s"] <= cost["children_cpu_s"]  # the child's CPU is diagnose's cost
    same_as_analyze(done.capture.bundle_path)


def test_windows_parsed_ahead_during_a_full_capture_give_the_findings_of_analyze(workload, tmp_path):
    proc = workload("json_loop")
    out = tmp_path / "out"
    out.mkdir()
    from diagnose.capture.progress import HeadlessView

    done = attach(AttachRequest(proc.pid, CaptureOptions(duration_s=4.0, **FAST), out, ("test",), {}),
                  HeadlessView(False))
    assert done.capture.end_reason == "duration reached"
    windows = len(list((done.capture.bundle_path / "pyspy").iterdir()))
    ahead = done.report.bundle.ahead
    # what arrived before the end (on a loaded host the nice-19 child may not have reached any) was
    # taken, every file unchanged; the cut-short captures above wait for a first result
    assert ahead is not None and ahead.used <= windows and not ahead.parsed and ahead.stale == 0
    same_as_analyze(done.capture.bundle_path)


@pytest.mark.slow
def test_the_demo_service_traces_and_windows_parsed_ahead(tmp_path):
    """The demo's service under the agent for 16 s: torch traces and py-spy windows arrive during the
    capture, are taken by the analysis, and the findings are those of `diagnose analyze`."""
    pytest.importorskip("torch")
    pytest.importorskip("aiohttp")
    from diagnose.capture.progress import HeadlessView
    from diagnose.demo.runner import running_demo

    out = tmp_path / "out"
    out.mkdir()
    with running_demo("service", None, False) as run:
        options = CaptureOptions(duration_s=16.0, torch_window_s=4.0)
        done = attach(AttachRequest(run.pid, options, out, ("test",), {}, run.stop), HeadlessView(False))
    ahead = done.report.bundle.ahead
    kinds = [k[0] for k in ahead.taken] if ahead else []
    assert "pyspy.window" in kinds and "torch.outcome" in kinds and ahead.stale == 0, (kinds, ahead)
    same_as_analyze(done.capture.bundle_path)
