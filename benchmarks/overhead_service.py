"""The overhead benchmark's target: the demo's request shape (POST /predict, 8 x 256 floats) served
by a torch MLP, traced with the OpenTelemetry SDK (request / preprocess / model / serialize spans),
so every source diagnose reads has something to record. Prints ``LISTENING <port>``."""
from __future__ import annotations

import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

torch.set_num_threads(1)
trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "overhead-bench"})))
tracer = trace.get_tracer("overhead-bench")
MODEL = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        with tracer.start_as_current_span("POST /predict", kind=trace.SpanKind.SERVER):
            with tracer.start_as_current_span("preprocess"):
                x = torch.tensor(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"])
            with tracer.start_as_current_span("model"), torch.no_grad():
                y = MODEL(x)
            with tracer.start_as_current_span("serialize"):
                data = json.dumps({"outputs": y.tolist()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)
