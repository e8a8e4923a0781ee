"""--thresholds reach every view: the live TUI's final Report and documents, its provisional
analyses, `diagnose tui` and `tui --live` all use the overrides the user passed (the bug was a TUI
that analysed and wrote findings.json without them, so the findings changed after exit). The
quadrant comes from the time account, which thresholds do not move; the fired rules, their
remedies and the headline's lead finding do."""
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
# Raise the two service rules out of reach: their findings disappear from the fixture and workload.
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

    doc = findings(done.capture.bundle_path)
    written = {f["rule_id"] for f in doc["findings"]}
    again = analyse(done.capture.bundle_path, NOT_SERVICE)  # what headless writes
    default = analyse(done.capture.bundle_path)
    assert "service.serialization" in {f.rule_id for f in default.analysis.findings}, "the rule fires without overrides"
    assert view.shown is done.report  # the CLI got the TUI's Report, it did not analyse again
    fired = {f.rule_id for f in view.shown.analysis.findings}
    assert fired == {f.rule_id for f in again.analysis.findings} == written and "service.serialization" not in fired
    assert view.shown.verdict.headline == again.verdict.headline == doc["verdict"]["headline"]
    assert doc["verdict"]["quadrant"] == default.verdict.quadrant.value == Quadrant.SERVICE.value
    assert done.report.overrides == NOT_SERVICE
    assert json.loads((done.capture.bundle_path / "findings.json").read_text())["data_quality"][
        "analysis"]["threshold_overrides"] == NOT_SERVICE


def test_provisional_analyses_use_the_overrides():
    child = BackgroundAnalyser()
    try:
        for overrides, fires in (({}, True), (NOT_SERVICE, False)):
            child.request(SERVICE, overrides)
            deadline = time.monotonic() + 60
            while (got := child.poll()) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got is not None, "no answer from the analysis child"
            assert ("service.serialization" in {f.rule_id for f in got[0].findings}) is fires
            assert got[0].verdict.quadrant == Quadrant.SERVICE  # the account, not the thresholds
    finally:
        child.close()


def test_tui_command_takes_thresholds(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(NOT_SERVICE))
    for extra in ((), ("--live",)):
        r = run_diagnose("tui", str(SERVICE), "--no-tui", "--thresholds", str(path), *extra)
        assert r.returncode == 0, r.stderr
        assert "### Serialization dominates the CPU" not in r.stdout and "Threshold overrides" in r.stdout
    r = run_diagnose("tui", str(SERVICE), "--no-tui")
    assert r.stdout.startswith("# Service-bound") and "### Serialization dominates the CPU" in r.stdout
