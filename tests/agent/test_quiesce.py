"""A torch window stops only once no thread can still be inside an op that began while it recorded
(diagnose/agent/inproc/quiesce.py): threads parked in standard-library calls are cleared at once,
threads in a call that may be a torch op are waited for until they leave it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from diagnose.agent.inproc.quiesce import QUIET_S, callee_path, wait_quiet
from helpers import REPO


def _last_call_offset(fn) -> int:
    import dis

    return [i.offset for i in dis.get_instructions(fn) if i.opname.startswith("CALL")][-1]


class _Conf:
    max_s = 1.0


conf = _Conf()


def _sleep_attr():
    time.sleep(conf.max_s)


def _method_on_local(conn, n):
    conn.recv(n * 2, 0)


def _attribute_chain(self):
    self.sock.recv_into(memoryview(self.buf)[0:10])


def _conditional_argument(x):
    time.sleep(x if x else 1)


def _computed_callee(fns):
    fns[0](1)


class _Pipe:
    def __init__(self, raw):
        self._read = raw.read  # a bound method of a C object, kept on the instance (execnet does this)

    def read(self, n):
        return self._read(n)


@pytest.mark.parametrize("fn, expected", [
    (_sleep_attr, ("global", "time", "sleep")),
    (_method_on_local, ("", "conn", "recv")),
    (_attribute_chain, ("", "self", "sock", "recv_into")),
    (_conditional_argument, None),  # a jump among the arguments: not read off the bytecode
    (_computed_callee, None),
])
def test_the_callee_of_a_pending_call_is_read_off_the_bytecode(fn, expected):
    assert callee_path(fn.__code__, _last_call_offset(fn)) == expected


def _already_running() -> set[int]:
    """Threads of earlier tests and of the runner (pytest-xdist's execnet threads are not in
    threading.enumerate()): each test waits only for its own."""
    import sys

    return set(sys._current_frames())


def _start(target, *args) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def test_threads_parked_in_standard_library_calls_are_cleared_at_once():
    stop = threading.Event()
    a, b = socket.socketpair()
    lock = threading.Lock()
    lock.acquire()

    def reads():
        conn = a
        conn.recv(10)

    before = _already_running()
    r_fd, w_fd = os.pipe()
    pipe = _Pipe(os.fdopen(r_fd, "rb", buffering=0))
    threads = [_start(time.sleep, 2), _start(stop.wait), _start(reads), _start(lock.acquire), _start(pipe.read, 1)]
    time.sleep(0.05)
    try:
        quiet = wait_quiet(5.0, exclude=before)
        assert quiet.ok, quiet
        # each parked thread is cleared by naming its call, or as blocked in library code after QUIET_S
        assert quiet.waited_s < QUIET_S + 1.0, quiet
        assert sum(quiet.cleared.values()) >= len(threads)
    finally:
        stop.set()
        lock.release()
        os.write(w_fd, b"x")
        os.close(w_fd)
        b.send(b"x")
        a.close()
        b.close()


def test_a_thread_in_a_call_that_may_be_an_op_is_waited_for_until_it_returns():
    gate = threading.Lock()
    gate.acquire()
    calls = [gate.acquire]  # a callee read from a list: not a call the module can name

    def in_unknown_call():
        calls[0](timeout=0.4)  # returns no sooner than 0.4 s after it began

    before = _already_running()
    t = _start(in_unknown_call)
    time.sleep(0.05)
    quiet = wait_quiet(5.0, exclude=before)
    t.join(5)
    assert quiet.ok and sum(quiet.cleared.values()) == 1 and "blocked" not in quiet.cleared, quiet
    assert quiet.waited_s >= 0.4 - 0.05 - 0.01  # the wait began 0.05 s into the call: it outlasted it


def test_a_torch_op_in_flight_is_waited_for():
    torch = pytest.importorskip("torch", reason="the op in flight is a torch op")
    a = torch.randn(2000, 2000)
    took: list[float] = []

    def in_op():
        t0 = time.monotonic()
        torch.mm(a, a)
        took.append(time.monotonic() - t0)

    before = _already_running()
    t = _start(in_op)
    time.sleep(0.005)
    quiet = wait_quiet(30.0, exclude=before)
    t.join(30)
    assert quiet.ok and quiet.cleared in ({"moved": 1}, {"exited": 1}), quiet
    # the wait began 5 ms into the op and ended once it returned (the thread's own clock reads run
    # under the GIL, so they may be a switch interval late: 50 ms of slack on an op of ~0.2 s or more)
    assert took and quiet.waited_s >= took[0] - 0.005 - 0.05, (quiet, took)


def test_the_wait_is_bounded_and_names_the_thread_it_waited_for():
    gate = threading.Lock()
    gate.acquire()
    calls = [gate.acquire]

    def stuck():
        calls[0](timeout=5)

    before = _already_running()
    t = threading.Thread(target=stuck, name="stuck-worker", daemon=True)
    t.start()
    time.sleep(0.05)
    quiet = wait_quiet(0.2, exclude=before)
    gate.release()
    t.join(5)
    assert not quiet.ok and len(quiet.left) == 1 and quiet.left[0].startswith("stuck-worker at "), quiet
    assert __file__ in quiet.left[0]


GC_RACE = """
import gc, sys, threading, time
from diagnose.agent.inproc.quiesce import current_frames
frames_of = {"agent": current_frames, "raw": sys._current_frames}[sys.argv[1]]
go, ran = threading.Event(), []

class ReleasesTheGil:  # in a reference cycle: only a collection finalizes it
    def __del__(self):
        ran.append(threading.current_thread().name)
        go.set()  # the other thread returns now and, exiting, takes the runtime's thread-list lock
        time.sleep(0.3)  # released GIL, as a torch tensor's finalizer releases it

exits = threading.Thread(target=go.wait, name="exits")
exits.start()
gc.disable()
cycle = ReleasesTheGil()
cycle.self = cycle
del cycle
gc.set_threshold(1)  # the next tracked allocation collects: one of the frame objects built in the call
gc.enable()
frames = frames_of()
assert gc.isenabled() and gc.get_threshold()[0] == 1
gc.collect()
exits.join()
print(len(frames), ran)
"""


def test_current_frames_cannot_hang_the_target_when_a_collection_releases_the_gil():
    """python/cpython#106883 (3.11): a collection inside sys._current_frames() whose finalizer
    releases the GIL, while a thread exits, hung the target forever (3 of 4 targets within 300
    torch windows beside threads that start and end). ``raw`` runs the same script on the bare call:
    on 3.11 it hangs, which shows this test reaches the collection inside the call."""
    def run(frames_of: str, timeout_s: float) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", GC_RACE, frames_of], capture_output=True, text=True,
                              timeout=timeout_s, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})

    res = run("agent", 60)
    assert res.returncode == 0, res.stderr[-1500:]
    count, ran = res.stdout.split(" ", 1)
    assert int(count) >= 2 and "MainThread" in ran  # the finalizer ran, after the call, on this thread
    if sys.version_info < (3, 12):
        with pytest.raises(subprocess.TimeoutExpired):
            run("raw", 3)
