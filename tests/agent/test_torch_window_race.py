"""Torch windows never crash the target: the race between torch's finalize and ops in flight on
other threads (agent/inproc/quiesce.py) and a target that exits while a window records.

Both targets are plain Python processes running the agent's own code: the first runs 60 windows,
all on the one profiler thread (agent/inproc/torchthread.py), while two threads run small ops and a
third starts and ends threads that run ops (without the quiet wait 4 of 25 such runs of 30
windows died of SIGSEGV here); the second starts the agent, a capture with a long torch window,
then exits with sys.exit while its first or second window records and ops run on daemon threads.
``benchmarks/kineto_stress.py`` repeats this at scale through `diagnose run` and `attach`."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO

pytest.importorskip("torch", reason="the target profiles torch ops")

OPS = """
import sys, threading, time
import torch
stop = threading.Event()

def loop(n=None):
    x = torch.ones(2)
    i = 0
    while not stop.is_set() and (n is None or i < n):
        torch.neg(x)
        i += 1

def churn():
    while not stop.is_set():
        t = threading.Thread(target=loop, args=(2000,))
        t.start()
        t.join()

def end_workers():  # torch aborts at exit ~1 time in 3 with daemon threads still in ops, diagnose or not
    stop.set()
    for t in workers:
        t.join()

workers = [threading.Thread(target=f, daemon=True) for f in (loop, loop, churn)]
for t in workers:
    t.start()
import atexit
atexit.register(end_workers)  # before the agent's own atexit stop: runs after it, ops still in flight then
"""


def _run(script: str, tmp_path, timeout: float = 150) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert res.returncode >= 0, f"target killed by {signal.Signals(-res.returncode).name}: {res.stderr[-1500:]}"
    return res


def test_sixty_windows_with_ops_in_flight_and_threads_coming_and_going(tmp_path):
    res = _run(OPS + """
import json, pathlib
from diagnose.agent.inproc import torchthread
from diagnose.agent.inproc.torchwin import TorchWindow
out = pathlib.Path(".")
records = []
for seq in range(1, 61):
    window = TorchWindow(out, seq)
    job = torchthread.THREAD.submit(lambda: window.run(0.01, 1e9, threading.Event()), "window")
    records.append(job.result(60))
print(json.dumps([[r["error"], r["events"], r["quiesce_s"]] for r in records]))
""", tmp_path)
    assert res.returncode == 0, res.stderr[-1500:]
    records = json.loads(res.stdout.splitlines()[-1])
    assert len(records) == 60 and all(err is None and events > 0 for err, events, _ in records), records
    assert len(list(tmp_path.glob("torch/*.json"))) == 60


@pytest.mark.parametrize("first", [1, 2], ids=["in-the-first-window", "in-the-second-window"])
def test_a_target_that_exits_while_a_window_records_exits_cleanly(first, tmp_path):
    """The agent started before torch is imported, as `diagnose run`'s preload does. Exiting in the
    first window (torch.jsonl not open yet) once lost it: the interpreter's exit ran weakref
    finalizers before the agent's exit hook, which closed the bundle's directory descriptor under the
    window still stopping (a traceback on the target's stderr)."""
    res = _run("import diagnose.agent\ndiagnose.agent.start()\n" + OPS + f"""
from diagnose.agent.inproc import runtime
reply = runtime._agent.capture({{"out_dir": ".", "duration_s": 60, "torch_window_s": 30}}, {{}})
assert reply["ok"], reply
session, deadline = runtime._agent.session, time.monotonic() + 30
while time.monotonic() < deadline and not (len(session._torch_windows) == {first} - 1 and session._torch is not None):
    time.sleep(0.001)  # until window {first} is handed to the profiler thread
assert session._torch is not None, "no window {first}"
sys.exit(0)
""", tmp_path)
    assert res.returncode == 0, res.stderr[-1500:]
    assert "Traceback" not in res.stderr, res.stderr[-1500:]
    index = [json.loads(x) for x in (tmp_path / "torch.jsonl").read_text().splitlines()]
    assert len(index) >= first and all(r["error"] is None for r in index), index


def test_the_cpu_guard_wakes_when_the_cap_could_be_reached_and_cuts_a_window_past_it(tmp_path):
    """The guard takes the target's GIL at each wake: far from the cap it sleeps until the cap could
    be reached at every CPU busy (it woke every 10 ms, ~25 wakes a second on average), and a window
    whose process CPU passes the cap is still cut."""
    res = _run(OPS + """
import json, pathlib
from diagnose.agent.inproc import torchthread
from diagnose.agent.inproc.torchwin import TorchWindow

class Counted(threading.Event):
    waits = 0
    def wait(self, timeout=None):
        self.waits += 1
        return super().wait(timeout)

out, rows = pathlib.Path("."), []
for seq, (window_s, cap_s) in enumerate([(0.3, 1e9), (5.0, 0.05)], 1):
    window, ev = TorchWindow(out, seq), Counted()
    t0 = time.monotonic()
    rec = torchthread.THREAD.submit(lambda: window.run(window_s, cap_s, ev), "window").result(60)
    rows.append([rec["error"], rec["cut_by_cpu"], ev.waits, time.monotonic() - t0, rec["cpu_s"]])
print(json.dumps(rows))
""", tmp_path)
    assert res.returncode == 0, res.stderr[-1500:]
    (err1, cut1, waits1, _, _), (err2, cut2, _, took2, cpu2) = json.loads(res.stdout.splitlines()[-1])
    assert err1 is None and not cut1 and waits1 <= 3  # 0.3 s window, cap out of reach: not 30 wakes
    assert err2 is None and cut2 and cpu2 > 0.05 and took2 < 2.5  # two threads in ops pass 0.05 s of CPU early
