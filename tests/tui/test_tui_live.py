"""The live view on a real capture of a real process: it keeps up with the process collector's
10 Hz stream, reads every record, and never costs the capture a sample."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from diagnose.capture.session import Capture
from diagnose.capture.stop import StopFlag
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.gpm import GpmCollector
from diagnose.collectors.nvml import NvmlCollector
from diagnose.collectors.process import ProcessCollector
from diagnose.tui.app import make_app
from diagnose.tui.live.feed import LiveSession
from diagnose.tui.live.screen import LiveScreen
from diagnose.tui.results.screen import ResultsScreen
from gpu_replay import replay_factory, smi_recording
from helpers import findings, only_bundle

DURATION_S = 6.0
PROCESS_HZ = 10.0


def _counts(bundle) -> dict[str, dict]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return {c["name"]: c.get("counts") or {} for c in manifest["collectors"]}


async def _capture_with_live_view(target, options, out, export_dir):
    session = LiveSession(Capture(target, options, out), StopFlag())
    app = make_app(session=session, export_dir=export_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        live = app.screen
        assert isinstance(live, LiveScreen)
        deadline = time.monotonic() + DURATION_S + 60
        while not isinstance(app.screen, ResultsScreen) and time.monotonic() < deadline:
            await pilot.pause(0.2)
        assert isinstance(app.screen, ResultsScreen), "the results view never appeared"
        return app, live, session


@pytest.mark.slow
def test_live_view_keeps_up_with_the_10hz_stream_without_dropping_samples(workload, tmp_path):
    proc = workload("json_loop")
    target = resolve_target(proc.pid)
    options = CaptureOptions(duration_s=DURATION_S, process_hz=PROCESS_HZ)

    plain = Capture(target, options, tmp_path / "plain").run(StopFlag())
    app, live, session = asyncio.run(
        _capture_with_live_view(target, options, tmp_path / "live", tmp_path))

    without = _counts(plain.bundle_path)
    bundle = only_bundle(tmp_path / "live")
    with_live = _counts(bundle)
    records = with_live["process"]["records"]
    figures = (f"process records without/with live view: {without['process']['records']}/{records}; "
               f"py-spy samples {without['pyspy'].get('samples')}/{with_live['pyspy'].get('samples')}; "
               f"live updates drawn {live.updates}; analyses {app.feed.stats.analyses}, "
               f"max {app.feed.stats.analysis_s_max * 1000:.0f} ms")
    print(figures)
    # the capture lost nothing to the UI: its 10 Hz stream is as full as without the live view
    assert records >= 0.8 * DURATION_S * PROCESS_HZ, figures
    assert records >= 0.9 * without["process"]["records"], figures
    # the live view read every record the collector wrote, none twice
    lines = (bundle / "process.jsonl").read_text().splitlines()
    assert app.feed.cpu.records == records == len(lines), figures
    # it kept redrawing while capturing (on new data, ~2/s), and the analysis child re-ran the
    # analysis on the partial bundle (at low priority: on a saturated host it answers in seconds)
    assert live.updates >= DURATION_S / 2, figures
    assert app.feed.stats.analyses >= 1 and live.last.verdict is not None, figures
    # and the final results are the full analysis of the finished bundle, written to disk
    assert app.results.analysis.verdict.quadrant.value == "service"
    assert findings(bundle)["verdict"]["quadrant"] == "service"
    assert session.result.end_reason == "duration reached"


def test_q_stops_the_capture_early_and_shows_the_results(workload, tmp_path):
    proc = workload("json_loop")
    target = resolve_target(proc.pid)
    options = CaptureOptions(duration_s=60.0)

    async def go():
        session = LiveSession(Capture(target, options, tmp_path / "out"), StopFlag())
        app = make_app(session=session, export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(1.5)
            await pilot.press("q")
            deadline = time.monotonic() + 30
            while not isinstance(app.screen, ResultsScreen) and time.monotonic() < deadline:
                await pilot.pause(0.2)
            assert isinstance(app.screen, ResultsScreen)
            await pilot.press("q")
        return session

    t0 = time.monotonic()
    session = asyncio.run(go())
    assert time.monotonic() - t0 < 40
    assert session.result.end_reason == "stopped from the TUI" and session.result.partial
    assert json.loads((session.result.bundle_path / "manifest.json").read_text())["partial"]


def test_gpu_panel_during_a_capture_with_replayed_nvml(workload, tmp_path):
    """GPU counters through the live view: NVML/GPM readings of a loaded H100 (nvidia-smi capture in
    ../shared/data) replayed behind the live collectors' own backend interface."""
    proc = workload("json_loop")
    rec = smi_recording(tmp_path / "calls.jsonl", "h100", "load", proc.pid, scenario="compute")
    collectors = (NvmlCollector(replay_factory(rec)), GpmCollector(replay_factory(rec)), ProcessCollector())
    capture = Capture(resolve_target(proc.pid), CaptureOptions(duration_s=120.0, gpu_rate_hz=20.0),
                      tmp_path / "out", collectors=collectors)

    async def go():
        session = LiveSession(capture, StopFlag())
        app = make_app(session=session, export_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            live = app.screen
            deadline = time.monotonic() + 150
            while not isinstance(app.screen, ResultsScreen) and time.monotonic() < deadline:
                if app.feed.stats.analyses >= 2:  # the panel has data (the niced analyser may take seconds)
                    session.request_stop()
                await pilot.pause(0.2)
            assert isinstance(app.screen, ResultsScreen), "the results view never appeared"
            return app, live

    app, live = asyncio.run(go())
    signals = app.results.analysis.signals
    lines = {line.label: line for line in live.last.gpu.lines}
    assert not live.last.gpu.note
    assert any(label.startswith("GPU 0") and "(target)" in label for label in lines)
    for label, name in (("DRAM active", "gpu.dram_active_pct"), ("kernel busy", "gpu.kernel_busy_pct"),
                        ("power", "gpu.power_pct_of_limit")):
        assert signals[name].known, signals[name].reason
        assert lines[label].value.endswith("%") and lines[label].trend, lines[label]
    # this scenario's GPM recording has no SM_UTIL: shown as unknown, never as 0
    assert not signals["gpu.sm_active_pct"].known and lines["SM active"].value == "unknown"
