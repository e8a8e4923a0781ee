"""A batched model service below its capacity: keep-alive request threads hand their input to one
batching worker that collects requests for up to --window-ms (8), runs one numpy forward per batch (--model-ms, 10) and
answers them (the near-idle case: the worker busy a fraction of a core, P50 ~20 ms).

GET /predict on the printed port. Prints "READY <port>". ``--load-qps N``: also starts its own
open-loop client process (``--clients`` keep-alive connections, Poisson arrivals at N requests/s in
all), so a capture needs no driver; the client is another process, never sampled with the target.
Bounded: exits after --max-s seconds (the client with it).
"""
from __future__ import annotations

import http.client
import os
import queue
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core for the model, no BLAS thread pool
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402 - after the thread-count variables, which numpy reads at import
from selfload import arguments, reply, serve  # noqa: E402

p = arguments(clients=8)
p.add_argument("--window-ms", type=float, default=8.0, help="how long the worker collects a batch")
p.add_argument("--model-ms", type=float, default=10.0, help="one batch's forward, calibrated at start")
p.add_argument("--load-qps", type=float, default=0.0, help="start an own client process at this rate")
args = p.parse_args()


def client(port: int) -> None:
    """Open-loop arrivals over ``--clients`` keep-alive connections, until --max-s."""
    deadline = time.monotonic() + args.max_s
    parent = os.getppid()
    rate = args.load_qps / args.clients

    def one(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        nxt = time.monotonic()
        while time.monotonic() < deadline:
            nxt += rng.expovariate(rate)
            time.sleep(max(0.0, nxt - time.monotonic()))
            try:
                conn.request("GET", "/predict")
                conn.getresponse().read()
            except OSError:
                if os.getppid() != parent:  # the service is gone: so is its client
                    return
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if args.client:
    client(args.client)
    sys.exit(0)

W = np.random.default_rng(0).random((256, 256)).astype(np.float32)


def _step(y: np.ndarray) -> np.ndarray:
    # + 0.5: a fixed point near 0.7; without it each step halved y, and after ~130 chained steps
    # every value was a denormal float, 6x slower a step than the calibration measured (a 10 ms
    # forward took ~30 ms, and the "near-idle" service used 90% of a core on a fast, quiet host)
    return np.tanh(y @ W / 256.0 + 0.5)


y0 = np.ones((32, 256), np.float32)
t0 = time.perf_counter()
for _ in range(50):
    y0 = _step(y0)  # chained, as forward() runs them
STEPS = max(1, round(args.model_ms / 1e3 / ((time.perf_counter() - t0) / 50)))
work: queue.SimpleQueue[tuple[threading.Event, list[float]]] = queue.SimpleQueue()


def forward(n: int) -> float:
    """One padded batch of 32 (a fixed batch shape, as a compiled model has): --model-ms whatever ``n``."""
    y = np.ones((32, 256), np.float32) * min(n, 32) / 32.0
    for _ in range(STEPS):
        y = _step(y)
    return float(y[0, 0])


def batcher() -> None:
    while True:
        batch = [work.get()]
        until = time.monotonic() + args.window_ms / 1e3
        while (left := until - time.monotonic()) > 0:
            try:
                batch.append(work.get(timeout=left))
            except queue.Empty:
                break
        value = forward(len(batch))
        for done, out in batch:
            out.append(value)
            done.set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        done, out = threading.Event(), []
        work.put((done, out))
        done.wait(10)
        reply(self, f"{out[0] if out else 0.0:.4f}".encode())

    def log_message(self, *a: object) -> None:
        return


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
threading.Thread(target=batcher, daemon=True).start()
threading.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
threading.Thread(target=batcher, daemon=True).start()
serve(srv, __file__, args.max_s, ["--load-qps", f"{args.load_qps:g}", "--clients", str(args.clients)]
      if args.load_qps > 0 else None)
