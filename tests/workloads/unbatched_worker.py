"""A threaded HTTP service with one model worker thread that runs a torch MLP one request at a
time (batch 1) while the request threads queue in front of it: the dynamic-batching case.

GET /predict on the printed port: the request thread queues its input and waits for the worker's
answer. Prints "READY <port>" once the worker has calibrated. Bounded: exits after --max-s seconds.

Saturated by construction on any host: the worker times the forward pass at startup and serves
each request as that many batch-1 passes (an unbatched decoder's steps) that its model work takes
--model-ms. A fixed model did not: on a host several times faster one 3072-wide forward took
2.9 ms while the HTTP path (16 http.client clients and the request threads, measured with a
64-wide model) ran out at ~360 requests/s, ~2.8 ms each, so the worker waited for work or for a
core about as long as it served and the capture read no load.

One thread by construction too: OMP_NUM_THREADS is set before torch loads. torch.set_num_threads(1)
sets the calling thread's OpenMP thread count only, and MKL's sgemv in another thread (the worker)
ran on a second OpenMP thread that py-spy does not sample (2 threads at ~50% each, forward 6.7 ms
instead of 2.9 ms), so the model's work happened where the account could not see it.
"""
from __future__ import annotations

import argparse
import math
import os
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ["OMP_NUM_THREADS"] = "1"  # before torch loads: every thread's OpenMP team is one thread

p = argparse.ArgumentParser()
p.add_argument("--width", type=int, default=3072)
p.add_argument("--model-ms", type=float, default=20.0, help="model work per request (calibrated)")
p.add_argument("--max-s", type=float, default=90.0)
args = p.parse_args()

import torch  # noqa: E402
import torch.profiler  # noqa: E402,F401  loaded up front: the agent's profiler window then starts at once

torch.set_num_threads(1)
W = args.width
MODEL = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, W), torch.nn.ReLU(),
                            torch.nn.Linear(W, 16))
JOBS: queue.Queue = queue.Queue()
CALIBRATED = threading.Event()
PASSES = [1]  # batch-1 forward passes per request, set by the worker's calibration


def calibrate() -> int:
    """Passes per request for --model-ms of model work, from this thread's own forward time."""
    x = torch.randn(1, W)
    with torch.no_grad():
        for _ in range(5):  # warm-up: first calls allocate and pick kernels
            MODEL(x)
        n, t0 = 0, time.perf_counter()
        while n < 10 or time.perf_counter() - t0 < 0.2:
            MODEL(x)
            n += 1
    forward_s = (time.perf_counter() - t0) / n
    return max(1, math.ceil(args.model_ms / 1e3 / forward_s))


def model_worker() -> None:
    PASSES[0] = calibrate()
    CALIBRATED.set()
    while True:
        x, box, done = JOBS.get()
        with torch.no_grad():
            for _ in range(PASSES[0]):  # one request per forward pass: batch 1
                y = MODEL(x)
        box.append(float(y.sum()))
        done.set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        box: list[float] = []
        done = threading.Event()
        JOBS.put((torch.randn(1, W), box, done))
        done.wait(30)
        body = repr(box).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a) -> None:
        return


threading.Thread(target=model_worker, name="model-worker", daemon=True).start()
CALIBRATED.wait(60)
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Timer(args.max_s, server.shutdown).start()
print(f"READY {server.server_address[1]} passes={PASSES[0]}", flush=True)
server.serve_forever()
