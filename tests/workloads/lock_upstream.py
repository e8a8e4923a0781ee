"""A threaded HTTP service whose request threads share one upstream connection behind a lock (a
connection pool of one) to a slow upstream HTTP service: the limit is the upstream and the pool.

GET /item on the printed port: take the pool lock, GET the upstream URL, answer with its body.
Prints "READY <port>". Bounded: exits after --max-s seconds.
"""
from __future__ import annotations

import argparse
import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("upstream", help="http://127.0.0.1:PORT/path of the slow upstream")
p.add_argument("--max-s", type=float, default=90.0)
args = p.parse_args()
UP = urllib.parse.urlsplit(args.upstream)
POOL = threading.Lock()  # one pooled connection: every request waits for it


def fetch_upstream() -> bytes:
    with POOL:
        conn = http.client.HTTPConnection(UP.hostname, UP.port, timeout=10)
        try:
            conn.request("GET", UP.path or "/")
            return conn.getresponse().read()
        finally:
            conn.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = fetch_upstream()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a) -> None:
        return


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Timer(args.max_s, server.shutdown).start()
print(f"READY {server.server_address[1]}", flush=True)
server.serve_forever()
