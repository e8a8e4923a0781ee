"""The agent's one profiler thread (diagnose/agent/inproc/torchthread.py) tells its caller a job ended
through the caller's own event: the capture thread waits on one event for its stop and for the end
of a torch window (it polled the window every 50 ms: a wake, so a GIL handoff, each time). Run in
a child process: the profiler thread lives as long as its process."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import REPO

CHILD = textwrap.dedent("""
    import threading
    from diagnose.agent.inproc.torchthread import TorchThread

    thread, wake = TorchThread(), threading.Event()
    job = thread.submit(lambda: 42, "a job", wake)
    assert wake.wait(10) and job.done.is_set() and job.result(0) == 42
    wake.clear()
    failing = thread.submit(lambda: 1 / 0, "a failing job", wake)
    assert wake.wait(10)
    try:
        failing.result(0)
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("the job's error was not raised to its caller")
    assert thread.submit(lambda: 7, "a job without an event").result(10) == 7
    print("ok")
""")


def test_a_job_sets_the_callers_event_when_it_returns_or_raises():
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
