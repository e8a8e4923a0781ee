"""What the self-loading HTTP workloads share (preprocess_service, batched_service,
json_thread_per_request): a handler's reply, and serving on a daemon thread beside the workload's
own client process (the script run again with ``--client PORT``), READY on stdout, until --max-s
or SIGTERM, the client stopped with it."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


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
