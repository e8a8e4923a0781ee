"""OTLP/HTTP receiver: spans from any service, in any language, for the capture window.

``--otlp-listen HOST:PORT`` (host defaults to 127.0.0.1; nothing listens unless asked, and only
while the capture runs) accepts ``POST /v1/traces`` with ``application/x-protobuf`` or
``application/json`` bodies, optionally gzip-encoded, as the OTLP/HTTP exporters send them
(point ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` at ``http://HOST:PORT/v1/traces``). Bodies over
``otlp_max_body_bytes`` (before or after gzip) get 413, undecodable ones 400; both are counted in
the manifest. Spans go to the SPANS stream with ``source: "otlp"`` (timestamps are the producer's
Unix ns: the receiver's clock does not enter).
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from diagnose.agent.inproc.records import SpanCounts
from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus
from diagnose.bundle.streams import SPANS
from diagnose.capture.target import Target
from diagnose.collectors.base import CaptureOptions, Collector, CollectorError, Probe

DEFAULT_HOST = "127.0.0.1"
TRACES_PATH = "/v1/traces"
REQUEST_TIMEOUT_S = 5.0
MAX_DISCARD_BYTES = 64 * 1024 * 1024  # an oversized body is read and dropped up to this much
PROTOBUF, JSON = "application/x-protobuf", "application/json"


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT', ':PORT' or 'PORT' -> (host, port). Raises ValueError."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r}: expected [IPv6]:PORT")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    else:
        host, port = "", text
    host = host or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT with a port in 0-65535, e.g. 127.0.0.1:4318")
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(ThreadingHTTPServer):
    # A client trickling bytes defeats per-read timeouts: the capture must end on time anyway, so
    # in-flight handlers are not joined (their requests arrive after the window and are dropped).
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address) -> None:
        return  # a client that hangs up mid-request is not the capture's problem (no traceback)

    def __init__(self, addr: tuple[str, int], handler: type, collector: OtlpCollector):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.collector = collector
        super().__init__(addr, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S
    server_version = "diagnose-otlp"

    def log_message(self, format: str, *args: Any) -> None:  # no stderr noise per request
        pass

    def do_POST(self) -> None:
        code, body, ctype = self.server.collector.handle(
            self.path.split("?", 1)[0], self.headers, self.rfile)
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._plain(405, "only POST /v1/traces is served")

    do_PUT = do_DELETE = do_GET

    def _plain(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


class OtlpCollector(Collector):
    name = "otlp"

    def __init__(self) -> None:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._spans = SpanCounts()
        self._http = {"requests": 0, "rejected_malformed": 0, "rejected_too_large": 0,
                      "rejected_unsupported": 0}
        self._listen = ""
        self._max_bytes = CaptureOptions().otlp_max_body_bytes

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        if not options.otlp_listen:
            return Probe(False, "not requested: pass --otlp-listen HOST:PORT to receive OTLP/HTTP spans")
        try:
            parse_listen(options.otlp_listen)
        except ValueError as exc:
            return Probe(False, f"bad --otlp-listen: {exc}")
        return Probe(True)

    def start(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        host, port = parse_listen(options.otlp_listen or "")
        self._max_bytes = options.otlp_max_body_bytes
        self._stream = bundle.stream(SPANS.name)
        try:
            self._server = _Server((host, port), _Handler, self)
        except OSError as exc:
            raise CollectorError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                                 "choose another --otlp-listen port") from None
        self._listen = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="diagnose-otlp", daemon=True)
        self._thread.start()

    def handle(self, path: str, headers: Any, rfile: Any) -> tuple[int, bytes, str]:
        """One request -> (HTTP status, body, content type). Runs on a server thread."""
        self._count("requests")
        if path != TRACES_PATH:
            return 404, f"unknown path {path}; POST spans to {TRACES_PATH}\n".encode(), "text/plain"
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype not in (PROTOBUF, JSON):
            self._count("rejected_unsupported")
            return 415, f"unsupported Content-Type {ctype!r}; send {PROTOBUF} or {JSON}\n".encode(), "text/plain"
        length = headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._count("rejected_unsupported")
            return 411, b"Content-Length required\n", "text/plain"
        if int(length) > self._max_bytes:
            self._count("rejected_too_large")
            _discard(rfile, int(length))  # so the client reads our 413 instead of a reset connection
            return 413, f"body of {length} bytes exceeds the {self._max_bytes}-byte limit\n".encode(), "text/plain"
        try:
            body = self._decompress(rfile.read(int(length)), headers.get("Content-Encoding"))
        except _TooLarge as exc:
            self._count("rejected_too_large")
            return 413, f"{exc}\n".encode(), "text/plain"
        except (zlib.error, ValueError) as exc:
            self._count("rejected_malformed")
            return 400, f"cannot decompress the body: {exc}\n".encode(), "text/plain"
        return self._ingest(body, ctype)

    def _ingest(self, body: bytes, ctype: str) -> tuple[int, bytes, str]:
        from diagnose.collectors.otlp_decode import OtlpDecodeError, decode_json, decode_protobuf, request_records

        try:
            request = decode_protobuf(body) if ctype == PROTOBUF else decode_json(body)
        except OtlpDecodeError as exc:
            self._count("rejected_malformed")
            return 400, f"{exc}\n".encode(), "text/plain"
        try:
            with self._lock:
                for rec in request_records(request, "otlp", self._spans):
                    self._stream.write(rec)
        except OSError as exc:  # the bundle's disk, not the client: ask it to retry later
            return 503, f"cannot store spans: {exc.strerror or exc}\n".encode(), "text/plain"
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        if ctype == PROTOBUF:
            return 200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF
        return 200, b"{}", JSON

    def _decompress(self, body: bytes, encoding: str | None) -> bytes:
        enc = (encoding or "identity").strip().lower()
        if enc == "identity":
            return body
        if enc not in ("gzip", "deflate"):
            raise ValueError(f"unsupported Content-Encoding {enc!r} (gzip, deflate or none)")
        d = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, auto-detected
        out = d.decompress(body, self._max_bytes + 1)
        if len(out) > self._max_bytes or d.unconsumed_tail:
            raise _TooLarge(f"body inflates beyond the {self._max_bytes}-byte limit")
        return out

    def _count(self, key: str) -> None:
        with self._lock:
            self._http[key] += 1

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {"listen": self._listen, **self._http, **self._spans.to_json()}

    def stop(self, timeout_s: float) -> CollectorStatus:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)
        counts = self.counts()
        bad = counts["rejected_malformed"] + counts["rejected_too_large"] + counts["rejected_unsupported"]
        note = "" if is_loopback(self._listen.rpartition(":")[0].strip("[]")) else \
            f"listened on non-loopback {self._listen} as asked; "
        if counts["spans"] == 0 and counts["requests"] == 0:
            return CollectorStatus(self.name, CollectorState.OK, note + (
                f"no OTLP requests arrived on {self._listen}: point OTEL_EXPORTER_OTLP_TRACES_ENDPOINT at "
                f"http://{self._listen}{TRACES_PATH}"), counts, [SPANS.name])
        if bad:
            state = CollectorState.PARTIAL if counts["spans"] else CollectorState.FAILED
            return CollectorStatus(self.name, state, note + f"{bad} request(s) rejected (see counts)",
                                   counts, [SPANS.name])
        return CollectorStatus(self.name, CollectorState.OK, note or None, counts, [SPANS.name])


class _TooLarge(ValueError):
    pass


def _discard(rfile: Any, length: int, cap: int = MAX_DISCARD_BYTES) -> None:
    left = min(length, cap)
    try:
        while left > 0:
            chunk = rfile.read(min(left, 1 << 20))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:  # the client gave up; the status line may still reach it
        pass
