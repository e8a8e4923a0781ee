"""A thread-per-request JSON service: http.server's ThreadingHTTPServer speaking HTTP/1.0, so every
request comes on a new connection and is served by a new thread that ends with it; each GET decodes
and re-encodes a ~100 KB JSON document (the work holds the GIL: one core at most for the process,
spread over short-lived threads none of which is busy on its own).

Prints "READY <port>". ``--clients N``: also starts its own closed-loop client process, N threads
each opening a new connection a request, so a capture needs no driver (another process, never
sampled with the target). Bounded: exits after --max-s seconds (the client with it).
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfload import arguments, client_if_asked, reply, serve

args = arguments().parse_args()


client_if_asked(args, "/items", keep_alive=False)

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
