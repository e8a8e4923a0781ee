"""The demo's children end when told: the open-loop load generator answers SIGTERM at once even when
the server never answers, and DemoRun.stop() kills what ignores SIGTERM within STOP_GRACE_S."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from diagnose.demo.bodies import request_body
from diagnose.demo.openloop import run_until_stopped
from diagnose.demo.runner import STOP_GRACE_S, DemoRun


@pytest.fixture
def silent_server():
    """A TCP listener on 127.0.0.1 that accepts and never answers (a server stuck in its work)."""
    srv = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/predict"
    stop.set()
    t.join(1)
    for c in conns:
        c.close()
    srv.close()


def test_load_generator_prints_its_stats_and_exits_within_a_second_of_sigterm(silent_server):
    proc = subprocess.Popen([sys.executable, "-m", "diagnose.demo.load", "--url", silent_server, "--scenario", "io",
                             "--qps", "50", "--connections", "4"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=5)
    took = time.monotonic() - t0
    assert took < 1.0, took  # its 4 connections are all stuck waiting on the server: it does not wait for them
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["requests"] == 0 and doc["unfinished"] > 5 and doc["offered_qps"] == 50
    assert doc["p99_ms"] >= 50  # the censored requests count from their scheduled arrival


def test_run_until_stopped_counts_answered_requests_and_returns_when_told():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Ok(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            return

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    t0 = time.monotonic()
    res = run_until_stopped(f"http://127.0.0.1:{srv.server_address[1]}/", 100, stop,
                            body=request_body("healthy"), connections=4)
    srv.shutdown()
    assert time.monotonic() - t0 < 2.0  # stopped at 1 s (plus a loaded machine)
    assert 30 <= res.ok <= 120 and res.errors == 0 and res.p99_ms is not None and res.p99_ms < 500


def test_stop_kills_a_child_that_ignores_sigterm_within_the_grace():
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal,time,sys; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"up\n"
    run = DemoRun("service", polite.pid, "", [stubborn, polite])
    t0 = time.monotonic()
    run.stop()
    took = time.monotonic() - t0
    assert stubborn.poll() == -signal.SIGKILL and polite.poll() == -signal.SIGTERM
    assert took < STOP_GRACE_S + 0.5 and run.stopped_in_s is not None and run.stopped_in_s <= took
    run.stop()  # idempotent: nothing left to stop
    stubborn.stdout.close()
