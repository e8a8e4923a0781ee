"""--thresholds reach every view: the live TUI's final Report and documents, its provisional
analyses, `diagnose tui` and `tui --live` all use the overrides the user passed (the bug was a TUI
that analysed and wrote findings.json without them, so the verdict changed after exit)."""
from __future__ import annotations

import asyncio
import json
import time

from diagnose.collectors import CaptureOptions
from diagnose.model import Quadrant
from diagnose.pipeline import AttachRequest, analyse, attach
from diagnose.tui.live.background_analysis import BackgroundAnalyser
from diagnose.tui.results.screen import ResultsScreen
from diagnose.tui.runner import LiveTuiView
from helpers import REPO, findings, run_diagnose

SERVICE = REPO / "fixtures" / "cpu" / "service-json"
# Raise the two service rules out of reach: the service-bound fixture and workload become unknown.
NOT_SERVICE = {"service.serialization:cpu.category_share_pct[serialization]": 101.0,
               "service.gil_bound:cpu.python_busy_pct": 101.0}


class PilotTuiView(LiveTuiView):
    """The live TUI view exactly as `attach` uses it, driven by Textual's pilot instead of a tty."""

    shown = None

    def run_app(self, app) -> None:
        async def go():
            async with app.run_test(size=(100, 30)) as pilot:
                deadline = time.monotonic() + 90
                while not isinstance(app.screen, ResultsScreen) and time.monotonic() < deadline:
                    await pilot.pause(0.2)
                assert isinstance(app.screen, ResultsScreen), "the results view never appeared"
                self.shown = app.results

        asyncio.run(go())


def test_live_tui_with_thresholds_writes_the_verdict_headless_writes(workload, tmp_path):
    proc = workload("json_loop")
    options = CaptureOptions(duration_s=4.0, skip=("nvml", "gpm", "dcgm", "agent", "otlp"))
    view = PilotTuiView(tmp_path, NOT_SERVICE)
    done = attach(AttachRequest(proc.pid, options, tmp_path / "out", ("test",), NOT_SERVICE), view)

    written = findings(done.capture.bundle_path)["verdict"]["quadrant"]
    again = analyse(done.capture.bundle_path, NOT_SERVICE).verdict.quadrant  # what headless writes
    default = analyse(done.capture.bundle_path).verdict.quadrant
    assert default == Quadrant.SERVICE, "the workload is service-bound without the overrides"
    assert view.shown is done.report  # the CLI got the TUI's Report, it did not analyse again
    assert view.shown.verdict.quadrant == again != Quadrant.SERVICE
    assert written == again.value
    assert done.report.overrides == NOT_SERVICE
    assert json.loads((done.capture.bundle_path / "findings.json").read_text())["data_quality"][
        "threshold_overrides"] == NOT_SERVICE


def test_provisional_analyses_use_the_overrides():
    child = BackgroundAnalyser()
    try:
        for overrides, quadrant in (({}, Quadrant.SERVICE), (NOT_SERVICE, Quadrant.UNKNOWN)):
            child.request(SERVICE, overrides)
            deadline = time.monotonic() + 60
            while (got := child.poll()) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got is not None, "no answer from the analysis child"
            assert got[0].verdict.quadrant == quadrant
    finally:
        child.close()


def test_tui_command_takes_thresholds(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(NOT_SERVICE))
    for extra in ((), ("--live",)):
        r = run_diagnose("tui", str(SERVICE), "--no-tui", "--thresholds", str(path), *extra)
        assert r.returncode == 0, r.stderr
        assert "**Verdict: unknown**" in r.stdout and "threshold overrides" in r.stdout
    r = run_diagnose("tui", str(SERVICE), "--no-tui")
    assert "**Verdict: service-bound**" in r.stdout
