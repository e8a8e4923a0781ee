"""What the py-spy collector tells the overhead budget its windows cost (collectors/pyspy.py
``child_cpu_s``): every ended window's CPU, as the kernel counted it for the reaped children."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.bundle import BundleWriter
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.pyspy import PySpyCollector, find_pyspy

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


def _reaped_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy not installed")
def test_the_windows_cpu_is_what_the_kernel_counted_for_them(tmp_path):
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "mixed_threads.py"), "60"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().startswith("READY")
        options = CaptureOptions(duration_s=3.5, pyspy_window_s=1.0, rate_hz=100)
        c = PySpyCollector()
        t = resolve_target(target.pid)
        assert c.probe(t, options).available
        reaped0 = _reaped_s()
        (tmp_path / "b").mkdir(mode=0o700)
        c.start(t, options, BundleWriter(tmp_path / "b"))
        deadline = time.monotonic() + 60
        while c._thread is not None and c._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)  # its windows run to the capture's end by themselves
        status = c.stop(10)
        reaped = _reaped_s() - reaped0
    finally:
        target.kill()
        target.wait()
    assert status.counts["windows"] >= 2
    assert reaped > 0.05  # 40 threads at 100 Hz for ~3 s
    assert c.child_cpu_s() == pytest.approx(reaped, rel=0.02, abs=0.011)  # getrusage's 10 ms ticks
