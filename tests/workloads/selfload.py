"""What the self-loading HTTP workloads share (preprocess_service, batched_service, blas_service,
json_thread_per_request): a handler's reply, serving on a daemon thread beside the workload's own
client process (the script run again with ``--client PORT``), READY on stdout, until --max-s or
SIGTERM, the client stopped with it; and that client's closed loop."""
from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def arguments(clients: int = 0) -> argparse.ArgumentParser:
    """The options every self-loading workload takes: --max-s, --clients and the hidden --client PORT
    its own client process is started with."""
    p = argparse.ArgumentParser()
    p.add_argument("--max-s", type=float, default=90.0)
    p.add_argument("--clients", type=int, default=clients)
    p.add_argument("--client", metavar="PORT", type=int, help=argparse.SUPPRESS)
    return p


def reply(handler: BaseHTTPRequestHandler, body: bytes, content_type: str | None = None) -> None:
    handler.send_response(200)
    if content_type:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve(srv: HTTPServer, script: str, max_s: float, client_args: list[str] | None) -> None:
    """Serve ``srv`` for ``max_s`` seconds; ``client_args``: the client's arguments after
    ``--client PORT --max-s S`` (None: no client)."""
    srv.handle_error = lambda *a: None  # type: ignore[method-assign]  # a client reset as it stops is not news
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    loader = None
    if client_args is not None:
        loader = subprocess.Popen([sys.executable, script, "--client", str(port), "--max-s", f"{max_s:g}",
                                   *client_args])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: the finally below stops the client too
    print(f"READY {port}", flush=True)
    try:
        time.sleep(max_s)
    finally:
        if loader is not None:
            loader.kill()
            loader.wait()


def closed_loop(port: int, n: int, max_s: float, path: str, keep_alive: bool = True) -> None:
    """``n`` threads each sending GET ``path`` and reading the answer until ``max_s`` has passed, on
    one keep-alive connection each or a new connection a request; they end when the service (this
    process's parent) is gone."""
    deadline = time.monotonic() + max_s
    parent = os.getppid()

    def one() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < deadline:
            try:
                conn.request("GET", path)
                conn.getresponse().read()
            except OSError:
                if os.getppid() != parent:  # the service is gone: so is its client
                    return
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if not keep_alive:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def client_if_asked(args: argparse.Namespace, path: str, keep_alive: bool = True) -> None:
    """Run as the workload's own closed-loop client (``--client PORT``) and exit, if so started."""
    if args.client:
        closed_loop(args.client, args.clients, args.max_s, path, keep_alive)
        sys.exit(0)
