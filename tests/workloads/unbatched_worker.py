"""A threaded HTTP service with one model worker thread that runs a torch MLP one request at a
time (batch 1) while the request threads queue in front of it: the dynamic-batching case.

GET /predict on the printed port: the request thread queues its input and waits for the worker's
answer. Prints "READY <port>". Bounded: exits after --max-s seconds.
"""
from __future__ import annotations

import argparse
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--width", type=int, default=3072)
p.add_argument("--max-s", type=float, default=90.0)
args = p.parse_args()

import torch  # noqa: E402
import torch.profiler  # noqa: E402,F401  loaded up front: the agent's profiler window then starts at once

torch.set_num_threads(1)
W = args.width
MODEL = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, W), torch.nn.ReLU(),
                            torch.nn.Linear(W, 16))
JOBS: queue.Queue = queue.Queue()


def model_worker() -> None:
    while True:
        x, box, done = JOBS.get()
        with torch.no_grad():
            box.append(float(MODEL(x).sum()))  # one request per forward: batch 1
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
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Timer(args.max_s, server.shutdown).start()
print(f"READY {server.server_address[1]}", flush=True)
server.serve_forever()
