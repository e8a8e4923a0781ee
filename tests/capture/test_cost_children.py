"""The manifest's cost counts every child diagnose ran for itself (diagnose/capture/cost.py): the
ones reaped during the capture (py-spy windows) and a registered one still running at its end (the
live view's analysis child), not a child that is not diagnose's (the demo's service)."""
from __future__ import annotations

import subprocess
import sys

import psutil

from diagnose.capture.cost import CostMeter, own_child

BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < float(sys.argv[1]): pass\n"
BURN_THEN_WAIT = BURN + "print('BURNT', flush=True)\nsys.stdin.read()\n"


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def test_reaped_and_registered_running_children_count_and_others_do_not():
    mine = subprocess.Popen([sys.executable, "-c", BURN_THEN_WAIT, "0.3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    not_mine = subprocess.Popen([sys.executable, "-c", BURN_THEN_WAIT, "0.3"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        own_child(mine.pid)
        meter = CostMeter()
        before = _cpu(psutil.Process(mine.pid))
        subprocess.run([sys.executable, "-c", BURN, "0.3"], check=True)  # reaped: RUSAGE_CHILDREN
        for p in (mine, not_mine):
            assert p.stdout is not None and p.stdout.readline().strip() == "BURNT"
        during = _cpu(psutil.Process(mine.pid)) - before
        cost = meter.finish()
    finally:
        for p in (mine, not_mine):
            p.kill()
            p.wait()
    assert during > 0.1
    # the reaped child (>= 0.3 s) and the registered one's CPU during the meter; the other's 0.3 s not
    assert 0.3 + during - 0.05 <= cost["children_cpu_s"] < 0.3 + during + 0.25


def test_a_registered_child_gone_before_the_end_is_not_counted_twice():
    p = subprocess.Popen([sys.executable, "-c", BURN, "0.2"])
    own_child(p.pid)
    meter = CostMeter()
    p.wait()  # reaped: its CPU is in RUSAGE_CHILDREN now, once
    cost = meter.finish()
    assert 0.15 <= cost["children_cpu_s"] < 0.5
