"""A threaded numpy service whose math runs in OpenBLAS's own threads: each GET multiplies 400x400
matrices (OpenBLAS with its default thread count), so the busiest thread of the process is a BLAS
worker py-spy never sees, while the request threads mostly wait (for their next request, or on the
pool). It read "no load" until threads without Python frames entered the thread-time account.

Prints "READY <port>". ``--clients N``: also starts its own closed-loop client process with N
keep-alive connections, so a capture needs no driver (another process, never sampled with the
target). Bounded: exits after --max-s seconds (the client with it).
"""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from selfload import arguments, client_if_asked, reply, serve

args = arguments().parse_args()


client_if_asked(args, "/predict")

rng = np.random.default_rng(0)
A, B = rng.random((400, 400)), rng.random((400, 400))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        c = A @ B
        for _ in range(3):
            c = c @ B
            c /= c.max()
        reply(self, f"{float(c.sum()):.4f}".encode())

    def log_message(self, *a: object) -> None:
        return


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
serve(srv, __file__, args.max_s, ["--clients", str(args.clients)] if args.clients > 0 else None)
