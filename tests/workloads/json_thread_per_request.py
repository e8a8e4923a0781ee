"""A thread-per-request JSON service: http.server's ThreadingHTTPServer speaking HTTP/1.0, so every
request comes on a new connection and is served by a new thread that ends with it; each GET decodes
and re-encodes a ~100 KB JSON document (the work holds the GIL: one core at most for the process,
spread over short-lived threads none of which is busy on its own).

Prints "READY <port>". ``--clients N``: also starts its own closed-loop client process, N threads
each opening a new connection a request, so a capture needs no driver (another process, never
sampled with the target). Bounded: exits after --max-s seconds (the client with it).
"""
from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfload import closed_loop, reply, serve

p = argparse.ArgumentParser()
p.add_argument("--max-s", type=float, default=90.0)
p.add_argument("--clients", type=int, default=0)
p.add_argument("--client", metavar="PORT", type=int, help=argparse.SUPPRESS)
args = p.parse_args()


if args.client:
    closed_loop(args.client, args.clients, args.max_s, "/items", keep_alive=False)
    sys.exit(0)

DOC = json.dumps({"items": [{"id": i, "name": f"item{i}", "vals": [i * 0.001 * k for k in range(20)]}
                            for i in range(300)]})


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        reply(self, json.dumps(json.loads(DOC), sort_keys=True, indent=1).encode(), "application/json")

    def log_message(self, *a: object) -> None:
        return


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
serve(srv, __file__, args.max_s, ["--clients", str(args.clients)] if args.clients > 0 else None)
