"""Shared fixtures: real workload processes, a trickling TCP server, and the diagnose CLI."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from helpers import WORKLOADS


def start_workload(name: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """Start tests/workloads/<name>.py and wait for its READY line."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / f"{name}.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})}, start_new_session=True,  # stop() kills its whole group
    )
    line = proc.stdout.readline()
    if "READY" not in line:
        proc.kill()
        raise RuntimeError(f"workload {name} did not start: {line!r} {proc.stderr.read()[-500:]}")
    time.sleep(0.3)
    proc.ready_line = line.strip()  # type: ignore[attr-defined]  # e.g. "READY <port>"
    return proc


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the workload and any children it forked
    except ProcessLookupError:
        pass
    proc.wait(10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


@pytest.fixture
def workload():
    started: list[subprocess.Popen] = []

    def _start(name: str, *args: str, **kw) -> subprocess.Popen:
        p = start_workload(name, *args, **kw)
        started.append(p)
        return p

    yield _start
    for p in started:
        stop(p)


@pytest.fixture
def trickle_server():
    """A TCP server on 127.0.0.1 that sends one byte every 50 ms to each client (bounded: 120 s)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        conns = []
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            try:
                conns.append(srv.accept()[0])
            except TimeoutError:
                pass
            for c in list(conns):
                try:
                    c.send(b"x")
                except OSError:
                    conns.remove(c)
            done.wait(0.05)
        for c in conns:
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    done.set()
    t.join(5)
    srv.close()


@pytest.fixture(autouse=True)
def no_leftovers():
    """No collector thread or child process may outlive its test."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        threads = [t.name for t in threading.enumerate() if t.name.startswith("diagnose-")]
        kids = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
        if not threads and not kids:
            return
        time.sleep(0.1)
    assert not threads, f"collector threads left running: {threads}"
    assert not kids, f"child processes left running: {[k.cmdline() for k in kids]}"
