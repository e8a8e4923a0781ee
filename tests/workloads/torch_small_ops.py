"""A target that measures its own progress, for the torch window's stall bound.

``ops`` (default): a torch loop of small ops (~270k ops/s on one core here); every gap of more than
GAP_MS between two batches of ops is recorded. ``--serve``: an HTTP server on 127.0.0.1 whose
handler runs a small torch MLP per request, driven by a closed-loop client thread inside the
process; every request that took more than GAP_MS is recorded (``--churn``: a new connection per
request, so the server starts and ends a thread per request). On SIGTERM, or after --seconds, it
prints one JSON line: ops or requests per second, and the gaps ([Unix ns start, ms]). Never a
sleep standing in for work."""
import argparse
import http.client
import json
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

GAP_MS = 5.0
BATCH = 20

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=60.0)
p.add_argument("--serve", action="store_true")
p.add_argument("--churn", action="store_true")
args = p.parse_args()
torch.set_num_threads(1)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
gaps: list = []
done = [0]


def note(t0_ns: int, t1_ns: int) -> None:
    if t1_ns - t0_ns > GAP_MS * 1e6:
        gaps.append([time.time_ns() - (time.perf_counter_ns() - t0_ns), (t1_ns - t0_ns) / 1e6])


def ops_loop(deadline: float) -> None:
    x = torch.ones(2)
    last = time.perf_counter_ns()
    while not stop.is_set() and time.monotonic() < deadline:
        for _ in range(BATCH):
            torch.neg(x)
        done[0] += BATCH
        now = time.perf_counter_ns()
        note(last, now)
        last = now


MODEL = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: N802
        n = int(self.headers["Content-Length"])
        x = torch.tensor(json.loads(self.rfile.read(n)))
        with torch.no_grad():
            out = json.dumps(MODEL(x).tolist()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def serve(deadline: float) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    body = json.dumps([[0.1] * 64 for _ in range(4)])
    while not stop.is_set() and time.monotonic() < deadline:
        t0 = time.perf_counter_ns()
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
        note(t0, time.perf_counter_ns())
        done[0] += 1
        if args.churn:
            conn.close()  # the server's thread for this connection ends; the next request starts one
    server.shutdown()


print("READY", flush=True)
t_start = time.time_ns()
(serve if args.serve else ops_loop)(time.monotonic() + args.seconds)
elapsed = (time.time_ns() - t_start) / 1e9
print(json.dumps({"per_s": done[0] / elapsed, "gaps": gaps, "started_ns": t_start}), flush=True)
sys.exit(0)
