"""Helpers for the export tests: a bundle with requests, and a real OTLP/HTTP receiver for
metrics and logs (http.server on 127.0.0.1, decoding with opentelemetry-proto)."""
from __future__ import annotations

import json

COST = {"wall_s": 4.0, "diagnose_cpu_s": 0.5, "children_cpu_s": 0.25, "max_rss_bytes": 100 << 20}


def write_spans(bundle, n: int = 100) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    lo = m["started_ns"]
    spans = [{"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": None, "name": "POST /generate",
              "kind": "server", "start_ns": lo + i * 20_000_000, "end_ns": lo + i * 20_000_000 + (10 + i) * 1_000_000,
              "status": "ok", "service": "llm-api", "source": "agent",
              "attributes": {"gen_ai.server.time_to_first_token": 0.004, "gen_ai.usage.output_tokens": 11}}
             for i in range(n)]
    (bundle / "spans.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    m["cost"] = COST
    (bundle / "manifest.json").write_text(json.dumps(m))


class OtlpSink:
    """A real OTLP/HTTP receiver for metrics and logs on 127.0.0.1 (http.server), decoding every
    body with opentelemetry-proto; ``status`` is what it answers (200, or e.g. 404 to refuse)."""

    def __init__(self, status: int = 200):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        self.status = status
        self.metrics: list = []
        self.logs: list = []
        self.paths: list[str] = []
        sink = self
        kinds = {"/v1/metrics": (ExportMetricsServiceRequest, self.metrics), "/v1/logs": (ExportLogsServiceRequest,
                                                                                          self.logs)}

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 -- http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                sink.paths.append(self.path)
                kind = kinds.get(self.path)
                if kind is None or sink.status != 200:
                    self.send_response(404 if kind is None else sink.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                assert self.headers["Content-Type"] == "application/x-protobuf"
                msg = kind[0]()
                msg.ParseFromString(body)
                kind[1].append(msg)
                reply = kind[0]().SerializeToString()  # an empty Export*ServiceResponse is also b""
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
