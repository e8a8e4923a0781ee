"""Every fault ends with a report: repeated signals finish the capture once; a third deliberate one
aborts after naming the bundle (diagnose/capture/stop.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from diagnose.capture.stop import FINISHING, REPEAT_S, CaptureAborted, StopSignals
from helpers import only_bundle, wait_for_capture


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def own_handlers():
    """StopSignals leaves its settled handlers behind: give pytest its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signals_every_50_ms_mid_capture_finish_it_once_with_the_report(workload, tmp_path, sig):
    proc = workload("idle")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--no-tui",
         "--skip", "agent", "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_capture(tmp_path, diag)  # py-spy is sampling: mid-capture
    stop = threading.Event()

    def supervisor() -> None:  # stop, and retry every 50 ms until it is gone
        while diag.poll() is None and not stop.is_set():
            diag.send_signal(sig)
            stop.wait(0.05)

    threading.Thread(target=supervisor, daemon=True).start()
    try:
        out, err = diag.communicate(timeout=90)
    finally:
        stop.set()
    assert diag.returncode == 0, err  # README: 0, a report was written
    bundle = only_bundle(tmp_path)
    assert (bundle / "report.md").is_file() and (bundle / "findings.json").is_file(), err
    assert f"report: {bundle / 'report.md'}" in out, out
    assert "Aborted!" not in err and "Traceback" not in err, err
    # said once at most: a finish faster than the 50 ms retry sees no second signal at all
    assert err.count(FINISHING) <= 1, err
    assert "aborted" not in err, err


def test_first_stops_second_warns_third_aborts_naming_the_bundle(tmp_path):
    clock, lines = FakeClock(), []
    s = StopSignals(write=lines.append, clock=clock)
    s.bundle = lambda: tmp_path / "diagnose-1-x"
    s.handle(signal.SIGTERM)
    assert s.stop.is_set() and s.stop.reason == "terminated (SIGTERM)" and lines == []
    clock.now += REPEAT_S + 0.1
    s.handle(signal.SIGTERM)
    assert lines == [FINISHING]
    clock.now += REPEAT_S + 0.1
    with pytest.raises(CaptureAborted) as aborted:
        s.handle(signal.SIGINT)
    assert aborted.value.exit_code == 130
    assert f"bundle {tmp_path / 'diagnose-1-x'}" in lines[-1]
    assert f"`diagnose analyze {tmp_path / 'diagnose-1-x'}`" in lines[-1]


def test_a_burst_is_one_request_however_long_it_lasts():
    clock, lines = FakeClock(), []
    s = StopSignals(write=lines.append, clock=clock)
    for _ in range(200):  # 10 s of a supervisor retrying every 50 ms
        s.handle(signal.SIGTERM)
        clock.now += 0.05
    assert s.stop.is_set() and lines == [FINISHING]
    # the main thread busy in C code for seconds: the handler runs late, once, for many signals
    clock.now += 5.0
    s.handle(signal.SIGTERM, arrived=40)
    assert lines == [FINISHING]


def test_a_signal_once_the_capture_ended_by_itself_warns_then_aborts():
    clock, lines = FakeClock(), []
    s = StopSignals(write=lines.append, clock=clock)
    s.finishing = True
    s.handle(signal.SIGINT)
    assert lines == [FINISHING]
    clock.now += REPEAT_S + 0.1
    with pytest.raises(CaptureAborted):
        s.handle(signal.SIGINT)
    assert "before a bundle was created" in lines[-1]


def test_real_signals_reach_the_policy_and_the_wakeup_pipe_counts_arrivals(own_handlers):
    clock, lines = FakeClock(), []
    with StopSignals(write=lines.append, clock=clock) as s:
        os.kill(os.getpid(), signal.SIGINT)
        assert s.stop.is_set()
        os.write(s._wakeup.write_fd, bytes([signal.SIGINT]) * 3)  # what the C handler writes per signal
        assert s._wakeup.arrived() == 3 and s._wakeup.arrived() == 1
        clock.now += REPEAT_S + 0.1
        os.kill(os.getpid(), signal.SIGTERM)
        assert lines == [FINISHING]
        clock.now += REPEAT_S + 0.1
        with pytest.raises(CaptureAborted):
            os.kill(os.getpid(), signal.SIGHUP)
    # after the report line: the rest of a burst is ignored, a new signal exits with 128 + N
    os.kill(os.getpid(), signal.SIGTERM)
    clock.now += REPEAT_S + 0.1
    with pytest.raises(SystemExit) as leaving:
        os.kill(os.getpid(), signal.SIGTERM)
    assert leaving.value.code == 143


def test_outside_a_capture_sigint_exits_130_not_clicks_aborted(own_handlers):
    from diagnose.capture.stop import restore_signal_handlers

    restore_signal_handlers()  # what `diagnose` installs first (cli.entry)
    with pytest.raises(SystemExit) as leaving:
        os.kill(os.getpid(), signal.SIGINT)
    assert leaving.value.code == 130
