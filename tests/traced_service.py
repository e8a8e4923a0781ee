"""A real HTTP service on 127.0.0.1 traced by the real OpenTelemetry SDK, under a closed-loop load,
captured as a bundle of its spans: the comparison tests' captures. ``work`` sets the CPU work per
request (hashing rounds), so a "slower service" is the same code doing more work."""
from __future__ import annotations

import hashlib
import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from diagnose.agent.inproc.spans import span_record
from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import SPANS

PAYLOAD = b"x" * 4096
CLIENTS = 3


def _handler(tracer, work: int):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()  # headers and body go out in two writes: no Nagle wait for the ACK
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802 - http.server's name
            from opentelemetry import trace

            with tracer.start_as_current_span("POST /predict", kind=trace.SpanKind.SERVER):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with tracer.start_as_current_span("model"):
                    digest = body
                    for _ in range(work):
                        digest = hashlib.sha256(digest + PAYLOAD).digest()
                with tracer.start_as_current_span("serialize_response"):
                    out = digest.hex().encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
    return Handler


def _client(port: int, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        conn.request("POST", "/predict", b"{}", {"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()


def capture(out: Path, work: int, seconds: float = 2.5) -> Path:
    """Serve under load for ``seconds`` and write the spans as a bundle at ``out``."""
    return capture_together({out: work}, seconds)[0]


def capture_together(services: dict[Path, int], seconds: float = 2.5) -> list[Path]:
    """Serve one service per bundle path (``work`` rounds each) at the same time, each under its own
    clients, and write each one's spans as a bundle: captures that share the host's conditions (an
    A/A test without the drift between runs that sequential captures of a shared VM show)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    running = []
    stop = threading.Event()
    for out, work in services.items():
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "compare-test"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider.get_tracer("t"), work))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        clients = [threading.Thread(target=_client, args=(server.server_address[1], stop)) for _ in range(CLIENTS)]
        running.append((out, work, exporter, server, clients))
    for *_, clients in running:
        for c in clients:
            c.start()
    time.sleep(0.3)  # warm-up, not captured
    started = time.time_ns()
    time.sleep(seconds)
    ended = time.time_ns()
    stop.set()
    for out, work, exporter, server, clients in running:
        for c in clients:
            c.join()
        server.shutdown()
        server.server_close()
        _write_bundle(out, work, exporter.get_finished_spans(), started, ended)
    return list(services)


def _write_bundle(out: Path, work: int, spans, started: int, ended: int) -> None:
    out.mkdir()
    w = BundleWriter(out)
    for s in spans:
        if started <= s.end_time <= ended:
            w.stream(SPANS.name).write(span_record(s))
    w.write_manifest({"schema_version": 1, "started_ns": started, "ended_ns": ended, "end_reason": "duration reached",
                      "target": {"pid": 1, "name": "compare-test",
                                 "cmdline": ["python", "service.py", f"--work={work}"]},
                      "collectors": [{"name": "otlp", "state": "ok"}]})
    w.close()
