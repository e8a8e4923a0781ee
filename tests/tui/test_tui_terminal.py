"""`diagnose tui` and the live view on a real pseudo-terminal, and the headless fallbacks."""
from __future__ import annotations

import os
import signal
import time

import pytest

from helpers import REPO, findings, is_report, only_bundle, run_diagnose
from pty_helpers import PtyRun

SERVICE = REPO / "fixtures" / "cpu" / "service-json"


def test_tui_on_a_terminal_draws_the_results_and_quits_on_q(tmp_path):
    run = PtyRun("tui", str(SERVICE), "--export-dir", str(tmp_path))
    try:
        assert run.wait_for("Findings", 30), run.text[-2000:]
        assert run.wait_for("SERVICE-BOUND", 10)
        run.send("e")
        assert run.wait_for("wrote", 10)
        run.send("q")
    finally:
        code = run.finish()
    assert code == 0
    assert (tmp_path / "service-json-md.md").is_file()


def test_dumb_terminal_falls_back_to_the_report():
    run = PtyRun("tui", str(SERVICE), term="dumb")
    code = run.finish()
    assert code == 0 and "## Where the time went" in run.text and "Findings" in run.text


def test_no_tty_prints_the_report_instead_of_hanging():
    r = run_diagnose("tui", str(SERVICE), timeout=60)
    assert r.returncode == 0 and is_report(r.stdout)
    assert "\x1b[" not in r.stdout


def test_not_a_bundle_is_one_line_and_exit_2(tmp_path):
    r = run_diagnose("tui", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not a diagnose bundle" in r.stderr


@pytest.mark.slow
def test_live_view_during_a_real_attach_then_the_results(workload, tmp_path):
    proc = workload("json_loop")
    run = PtyRun("attach", str(proc.pid), "--duration", "4", "--out", str(tmp_path))
    try:
        assert run.wait_for("capturing", 30), run.text[-2000:]
        assert run.wait_for("Verdict so far", 10)
        assert run.wait_for("Findings", 60), run.text[-2000:]  # the results view replaced it
        run.send("q")
    finally:
        code = run.finish(60)
    assert code == 0, run.text[-2000:]
    bundle = only_bundle(tmp_path)
    assert findings(bundle)["verdict"]["quadrant"] == "service"
    assert "verdict: service" in run.text  # the CLI's summary after the TUI closed


def test_sigterm_during_the_live_view_writes_the_report_and_exits(workload, tmp_path):
    proc = workload("json_loop")
    run = PtyRun("attach", str(proc.pid), "--duration", "60", "--out", str(tmp_path))
    try:
        assert run.wait_for("capturing", 30), run.text[-2000:]
        time.sleep(1.0)
        os.kill(run.proc.pid, signal.SIGTERM)
    finally:
        code = run.finish(60)
    assert code == 0, run.text[-2000:]  # no key needed: a terminated capture does not wait for q
    bundle = only_bundle(tmp_path)
    assert (bundle / "report.md").is_file()
    assert "partial capture: terminated (SIGTERM)" in run.text


def test_closing_the_terminal_ends_the_capture_with_its_report(workload, tmp_path):
    """No key, no signal: the pty just goes away. The TUI must not keep running (or spinning)."""
    proc = workload("json_loop")
    run = PtyRun("attach", str(proc.pid), "--duration", "60", "--out", str(tmp_path))
    assert run.wait_for("capturing", 30), run.text[-2000:]
    run.hangup()
    t0 = time.monotonic()
    run.finish(60)  # its exit code is moot: printing the summary to a closed terminal fails
    assert time.monotonic() - t0 < 30
    bundle = only_bundle(tmp_path)
    assert findings(bundle)["capture"]["end_reason"] == "terminal closed"
    assert (bundle / "report.md").is_file()


def test_closing_the_terminal_on_the_results_view_ends_diagnose(workload, tmp_path):
    """The capture is over and its report written; the terminal closes. Textual's shutdown can
    block writing to the dead terminal: diagnose must still leave (and free the attach lock)."""
    proc = workload("json_loop")
    run = PtyRun("attach", str(proc.pid), "--duration", "30", "--out", str(tmp_path))
    assert run.wait_for("capturing", 30), run.text[-2000:]
    run.send("\x03")  # Ctrl-C is a key here: the capture stops and the results view opens
    assert run.wait_for("Findings", 60), run.text[-2000:]
    bundle = only_bundle(tmp_path)
    assert (bundle / "report.md").is_file()
    run.hangup()
    t0 = time.monotonic()
    run.finish(40)
    assert time.monotonic() - t0 < 25
