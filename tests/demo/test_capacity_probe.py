"""The demo's capacity probe (diagnose/demo/runner.py measure_capacity): the requests/s a real HTTP
server on 127.0.0.1 completes with the scenario's connections all busy, which the scenario's load
multiplies into the offered rate."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from diagnose.demo.runner import PROBE_S, DemoError, measure_capacity
from helpers import http_server

SERVICE_S = 0.01  # each request holds the one worker this long: capacity 100 requests/s


@contextmanager
def serial_server(status: int = 200) -> Iterator[str]:
    """A threaded server whose handlers take turns on one lock for SERVICE_S each (one worker)."""
    worker = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with worker:
                end = time.perf_counter() + SERVICE_S
                while time.perf_counter() < end:  # work, not a sleep: the lock is held throughout
                    pass
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as base:
        yield f"{base}/predict"


def test_the_probe_measures_what_one_serial_worker_completes():
    with serial_server() as url:
        t0 = time.monotonic()
        capacity = measure_capacity(url, "healthy", connections=4)
        took = time.monotonic() - t0
    # 1 / SERVICE_S = 100/s at most; the host's scheduling and HTTP handling take some of it
    assert 40 <= capacity <= 1 / SERVICE_S * 1.05, capacity
    assert took >= PROBE_S


def test_a_service_that_answers_nothing_right_stops_the_demo_with_the_cause():
    with serial_server(status=500) as url, pytest.raises(DemoError, match="answered no request"):
        measure_capacity(url, "healthy", connections=2)
