"""The open-loop load generator against hostile servers on 127.0.0.1 (break-it review): a body that
never ends, and one trickled a byte a second, held `diagnose sweep` forever and grew its memory by
~300 MB/s. A step now ends at its drain time, reads at most MAX_BODY of a response, and censors what
was unanswered then."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from diagnose.demo.openloop import MAX_BODY, run_open_loop


class _Endless(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"x" * 65536
        trickle = self.server.trickle  # type: ignore[attr-defined]
        try:
            while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                data = b"x" if trickle else chunk
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                if trickle:
                    time.sleep(0.5)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture(params=["endless", "trickle"])
def hostile_url(request):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    srv.daemon_threads = True
    srv.trickle, srv.stopping = request.param == "trickle", threading.Event()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/predict", request.param
    srv.stopping.set()
    srv.shutdown()
    srv.server_close()


def test_a_step_ends_at_its_drain_time_with_the_unanswered_censored(hostile_url):
    url, kind = hostile_url
    t0 = time.monotonic()
    r = run_open_loop(url, 8.0, 0.5, warmup_s=0.0, drain_s=0.5, connections=4, timeout_s=10.0)
    took = time.monotonic() - t0
    assert took < 0.5 + 0.5 + 2.5, took  # the step's span and drain, plus the cut's JOIN_S
    assert r.ok == 0 and r.scheduled >= 1 and r.errors + r.unfinished == r.scheduled, r
    if kind == "endless":
        assert r.errors >= 1 and f"over {MAX_BODY >> 20} MiB" in (r.first_error or ""), r
    else:
        assert r.unfinished >= 1 and r.p99_ms is not None and r.p99_ms <= 1100, r  # censored at the drain's end
