"""The process collector's thread readings on kept descriptors (collectors/task_files.py): fresh
values at every reading, the same rows as open/read/close, descriptors let go with their threads."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from diagnose.collectors.task_files import ProcessFiles, TaskFiles

# One busy thread and 5 sleeping ones, which all end when a line comes on stdin; the main thread
# then waits for EOF.
TARGET = """
import sys, threading, time
stop = threading.Event()
def busy():
    while not stop.is_set():
        sum(range(10000))
sleepers = [threading.Thread(target=busy)] + [threading.Thread(target=stop.wait) for _ in range(5)]
for t in sleepers: t.start()
print("READY", flush=True)
sys.stdin.readline()
stop.set()
for t in sleepers: t.join()
print("ENDED", flush=True)
sys.stdin.read()
"""


@pytest.fixture()
def target():
    p = subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    yield p
    p.kill()
    p.wait()


def test_kept_descriptors_read_fresh_values_and_follow_the_threads(target):
    tasks = TaskFiles(target.pid)
    tids = tasks.task_ids()
    assert tids == sorted(t.id for t in psutil.Process(target.pid).threads()) and len(tids) == 7
    deadline = time.monotonic() + 30
    while True:  # on a loaded host a sleeper may not have reached its wait yet: no wait channel then
        first = {r[0]: r for r in tasks.rows(tids)}
        if sum(1 for r in first.values() if r[4]) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert tasks.kept() == 3 * 7 - sum(1 for r in first.values() if r[3] == "R")  # no wchan for a running one
    assert {r[3] for r in first.values()} <= set("RSD")
    assert sum(1 for r in first.values() if r[4]) >= 5  # the sleepers wait in the kernel: a wait channel
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the busy thread's CPU grows on the same descriptors
        again = {r[0]: r for r in tasks.rows(tids)}
        if any(again[t][1] + again[t][2] > first[t][1] + first[t][2] for t in tids):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no thread's CPU time grew over the kept descriptors")
    # the same rows as a reader that opens each file every time (state and wait channel of the sleepers)
    # (a wait channel read as 0 mid-transition is kept until the thread runs again: those are left out)
    fresh = {r[0]: r for r in TaskFiles(target.pid, max_kept=0).rows(tids)}
    asleep = [t for t, r in again.items() if r[3] == "S" and r[4] and fresh[t][3] == "S"]
    assert len(asleep) >= 4 and {t: fresh[t][4] for t in asleep} == {t: again[t][4] for t in asleep}
    assert target.stdin is not None and target.stdout is not None
    target.stdin.write("\n")
    target.stdin.flush()
    assert target.stdout.readline().strip() == "ENDED"
    deadline = time.monotonic() + 30  # a joined thread's OS task ends a moment after its join returns
    while len(left := tasks.task_ids()) > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(left) == 1 and len(tasks.rows(left)) == 1 and tasks.kept() <= 3  # the ended threads' closed
    tasks.close()
    assert tasks.kept() == 0


def test_a_thread_read_after_it_ended_is_left_out(target):
    tasks = TaskFiles(target.pid)
    tids = tasks.task_ids()
    tasks.rows(tids)
    target.kill()
    target.wait()
    assert tasks.rows(tids) == [] and tasks.kept() == 0
    with pytest.raises(psutil.NoSuchProcess):
        tasks.task_ids()


def test_the_process_reading_says_what_psutil_says(target):
    files = ProcessFiles(target.pid)
    p = psutil.Process(target.pid)
    first = files.reading()
    ref = p.as_dict(["cpu_times", "num_threads", "memory_info", "io_counters", "num_ctx_switches"])
    again = files.reading()  # the same descriptors, read afresh: the busy thread's CPU grows
    assert first["num_threads"] == ref["num_threads"] == 7
    assert first["rss_bytes"] == pytest.approx(ref["memory_info"].rss, rel=0.05)
    assert first["cpu_user_s"] <= ref["cpu_times"].user <= again["cpu_user_s"] + 0.02
    assert (first["io_read_bytes"], first["io_write_bytes"]) == (ref["io_counters"].read_bytes,
                                                                 ref["io_counters"].write_bytes)
    ctx = files.context_switches()
    assert ctx["ctx_vol"] >= ref["num_ctx_switches"].voluntary and ctx["ctx_invol"] >= 0
    target.kill()
    target.wait()
    with pytest.raises(psutil.NoSuchProcess):
        files.reading()
    files.close()
