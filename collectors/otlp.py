"""OTLP/HTTP receiver: spans from any service, in any language, for the capture window.

``--otlp-listen HOST:PORT`` (host defaults to 127.0.0.1; nothing listens unless asked, and only
while the capture runs) accepts ``POST /v1/traces`` with ``application/x-protobuf`` or
``application/json`` bodies, optionally gzip-encoded, as the OTLP/HTTP exporters send them
(point ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` at ``http://HOST:PORT/v1/traces``). Spans go to the
SPANS stream with ``source: "otlp"`` (timestamps are the producer's Unix ns: the receiver's clock
does not enter).

Any local user can reach the port and diagnose usually runs as root, so every bound holds for all
clients together (collectors/otlp_intake.py, collectors/otlp_worker.py):

- at most ``MAX_CONNECTIONS`` connections are served at once; one more is answered 503;
- bodies held in memory, as received and inflated, share one budget of ``max_inflight_bytes``
  (4 bodies of the 8 MiB limit by default): a body that does not fit is answered 503 with
  ``Retry-After``; one over ``otlp_max_body_bytes`` (before or after gzip) 413;
- bodies are decoded one at a time in a child process capped at ``DECODER_MEMORY_BYTES``, at most
  ``max_spans_per_request`` spans each (the rest are counted and reported to the exporter as OTLP
  ``partial_success.rejected_spans``, 200);
- every request is answered: 400 malformed (bad JSON, nesting past 100 levels, bad protobuf,
  corrupt gzip, a Content-Length that is not ASCII digits), 404, 405, 408 body too slow, 411 no
  Content-Length, 413, 415 content type or encoding, 503 busy or ended; each is counted in the
  manifest (``otlp`` collector counts);
- when the capture ends, a request that starts is answered 503; one already being received gets
  ``DRAIN_S`` to finish, so that an exporter's batch of the window's last spans is kept.
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from diagnose.agent.inproc.records import SpanCounts
from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus
from diagnose.bundle.streams import SPANS
from diagnose.collectors.base import CaptureOptions, Collector, CollectorError, Probe
from diagnose.collectors.otlp_intake import (
    ByteBudget,
    Lease,
    Refused,
    busy,
    content_length,
    discard,
    inflate,
    read_body,
)
from diagnose.collectors.otlp_worker import Decoded, Decoder, DecoderDown, Undecodable
from diagnose.model import Target

DEFAULT_HOST = "127.0.0.1"
TRACES_PATH = "/v1/traces"
REQUEST_TIMEOUT_S = 5.0  # each socket read (request line, headers, body)
CONNECTION_DEADLINE_S = 60.0  # a whole connection, however slowly its bytes trickle in
DRAIN_S = 1.0  # at the stop, the most the requests being received may take to finish (then 503)
MAX_CONNECTIONS = 64
LINGER_S, LINGER_BYTES = 0.5, 1024 * 1024  # read and dropped after an answer, before closing
MAX_INFLIGHT_BODIES = 4  # the in-flight budget, in bodies of the per-body limit
MAX_SPANS_PER_REQUEST = 16384  # twice the OpenTelemetry Collector's default batch
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
    if not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT with a port in 0-65535, e.g. 127.0.0.1:4318")
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, body, its Content-Type, and Retry-After seconds for 503."""

    status: int
    body: bytes
    content_type: str = "text/plain"
    retry_after_s: int | None = None


def _text(status: int, message: str, retry_after_s: int | None = None) -> Reply:
    return Reply(status, (message + "\n").encode(), "text/plain", retry_after_s)


class _Server(ThreadingHTTPServer):
    # A client trickling bytes defeats per-read timeouts: the capture must end on time anyway, so
    # handlers are not joined (the stop waits DRAIN_S at most for requests already being received).
    daemon_threads = True
    block_on_close = False
    request_queue_size = 2 * MAX_CONNECTIONS  # listen backlog: a burst of clients is answered, not SYN-dropped

    def handle_error(self, request, client_address) -> None:
        return  # a client that hangs up mid-request is not the capture's problem (no traceback)

    def __init__(self, addr: tuple[str, int], handler: type, collector: OtlpCollector):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.collector = collector
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._deadlines: dict[socket.socket, float] = {}  # open connections -> when they are cut
        self._open_lock = threading.Lock()
        super().__init__(addr, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.collector.refuse_connection(request)
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._deadlines[request] = time.monotonic() + CONNECTION_DEADLINE_S
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started
            self._forget(request)
            self.shutdown_request(request)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._open_lock:
            self._deadlines.pop(request, None)
        self._slots.release()

    def service_actions(self) -> None:
        """Every poll interval: cut connections past CONNECTION_DEADLINE_S (a slow client's reads
        then fail and its handler ends, freeing the slot)."""
        now = time.monotonic()
        with self._open_lock:
            late = [s for s, t in self._deadlines.items() if t < now]
        for sock in late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue  # already closed by its handler


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S
    server_version = "diagnose-otlp"
    # http.server's own errors (bad request line, 414, 431, 501): a status line even to a request
    # line it cannot read (its default, HTTP/0.9, has none), and one line of text, not an HTML page
    default_request_version = "HTTP/1.0"
    error_content_type = "text/plain"
    error_message_format = "%(code)d %(message)s\n"

    def log_message(self, format: str, *args: Any) -> None:  # no stderr noise per request
        pass

    def do_POST(self) -> None:
        self._send(self.server.collector.handle(self.path.split("?", 1)[0], self.headers, self.rfile))

    def do_GET(self) -> None:
        self._send(_text(405, "only POST /v1/traces is served"))

    def finish(self) -> None:
        """Lingering close: after the answer, read what the client still sends (more than its
        Content-Length, a refused body) for a moment, so closing does not reset the connection
        before the client has read the answer."""
        super().finish()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            left, deadline = LINGER_BYTES, time.monotonic() + LINGER_S
            while left > 0 and time.monotonic() < deadline:
                chunk = self.connection.recv(min(left, 65536))
                if not chunk:
                    return
                left -= len(chunk)
        except OSError:  # the client closed first, or went quiet: nothing more to wait for
            return

    do_PUT = do_DELETE = do_GET

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        if reply.retry_after_s is not None:
            self.send_header("Retry-After", str(reply.retry_after_s))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(reply.body)


class OtlpCollector(Collector):
    """The receiver. ``max_inflight_bytes`` (default: MAX_INFLIGHT_BODIES bodies of the per-body
    limit), ``max_spans_per_request`` and ``decoder_memory_bytes`` bound what all clients together
    can make it hold; see the module docstring."""

    name = "otlp"

    def __init__(self, max_inflight_bytes: int | None = None, max_spans_per_request: int = MAX_SPANS_PER_REQUEST,
                 decoder_memory_bytes: int | None = None) -> None:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._spans = SpanCounts()
        self._http = {"requests": 0, "rejected_malformed": 0, "rejected_too_large": 0,
                      "rejected_unsupported": 0, "rejected_busy": 0, "rejected_timeout": 0}
        self._listen = ""
        self._max_bytes = CaptureOptions().otlp_max_body_bytes
        self._inflight = max_inflight_bytes
        self._budget = ByteBudget(0)
        self._decoder = Decoder(max_spans_per_request, **({"memory_bytes": decoder_memory_bytes}
                                                          if decoder_memory_bytes else {}))
        self._closing = False  # stop() began: a request that starts now is refused
        self._ended = False  # stop() drained: nothing more is written into the closing bundle
        self._in_flight = 0  # requests past the closing check, not yet answered
        self._idle = threading.Condition(self._lock)

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
        self._budget = ByteBudget(self._inflight or MAX_INFLIGHT_BODIES * self._max_bytes)
        self._stream = bundle.stream(SPANS.name)
        try:
            self._decoder.start()
        except DecoderDown as exc:
            raise CollectorError(str(exc)) from None
        try:
            self._server = _Server((host, port), _Handler, self)
        except OSError as exc:
            self._decoder.close()
            raise CollectorError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                                 "choose another --otlp-listen port") from None
        self._listen = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="diagnose-otlp", daemon=True)
        self._thread.start()

    def refuse_connection(self, sock: socket.socket) -> None:
        """A connection past MAX_CONNECTIONS: 503 at once, without reading its request."""
        self._count("requests")
        self._count("rejected_busy")
        try:
            sock.settimeout(0.5)
            sock.sendall(b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
        except OSError:
            return

    def handle(self, path: str, headers: Any, rfile: Any) -> Reply:
        """One POST -> its Reply. Runs on a server thread; raises nothing but the socket's OSError
        while the answer is written by the caller."""
        self._count("requests")
        lease = Lease(self._budget)
        try:
            return self._handle(path, headers, rfile, lease)
        except Refused as exc:
            self._count(exc.counter)
            return _text(exc.status, exc.message, exc.retry_after_s)
        finally:
            lease.release()

    def _handle(self, path: str, headers: Any, rfile: Any, lease: Lease) -> Reply:
        if path != TRACES_PATH:  # a probe or a metrics exporter pointed here: answered, not counted
            return _text(404, f"unknown path {path[:100]}; POST spans to {TRACES_PATH}")
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype not in (PROTOBUF, JSON):
            raise Refused(415, f"unsupported Content-Type {ctype[:60]!r}; send {PROTOBUF} or {JSON}",
                          "rejected_unsupported")
        try:
            length = content_length(headers.get("Content-Length"), self._max_bytes)
        except Refused as exc:
            if exc.status == 413:
                discard(rfile, self._max_bytes + 1)  # so the client reads our 413, not a reset
            raise
        with self._lock:
            closing = self._closing
            if not closing:
                self._in_flight += 1
        if closing:
            discard(rfile, length)
            raise Refused(503, "the capture has ended", "rejected_busy", 1)
        try:
            if not lease.take(length):
                discard(rfile, length)
                raise busy(f"{self._budget.capacity_bytes} bytes")
            body = inflate(read_body(rfile, length), headers.get("Content-Encoding"), self._max_bytes, lease)
            return self._ingest(body, ctype)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    def _ingest(self, body: bytearray, ctype: str) -> Reply:
        try:
            decoded = self._decoder.decode(body, ctype == JSON, self._write)
        except Undecodable as exc:
            counter = "rejected_too_large" if exc.status == 413 else "rejected_malformed"
            raise Refused(exc.status, str(exc), counter) from None
        except (DecoderDown, OSError) as exc:  # the decoder or the bundle's disk: retry later
            msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise Refused(503, f"cannot store spans: {msg}", "rejected_busy", 1) from None
        return self._success(decoded, ctype)

    def _write(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            if self._ended:
                raise DecoderDown("the capture has ended")
            for rec in records:
                self._stream.write(rec)

    def _success(self, decoded: Decoded, ctype: str) -> Reply:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        rejected = dict(decoded.counts.get("spans_rejected") or {})
        if decoded.over_cap:
            rejected["over_request_cap"] = decoded.over_cap
        with self._lock:
            self._spans.spans += int(decoded.counts.get("spans", 0))
            self._spans.open += int(decoded.counts.get("spans_open", 0))
            self._spans.long += int(decoded.counts.get("spans_over_1h", 0))
            for why, n in rejected.items():
                self._spans.rejected[str(why)] = self._spans.rejected.get(str(why), 0) + int(n)
        response = ExportTraceServiceResponse()
        if rejected:
            response.partial_success.rejected_spans = sum(int(n) for n in rejected.values())
            response.partial_success.error_message = "spans rejected: " + ", ".join(
                f"{n} {why}" for why, n in sorted(rejected.items()))
        if ctype == PROTOBUF:
            return Reply(200, response.SerializeToString(), PROTOBUF)
        return Reply(200, json_format.MessageToJson(response, indent=None).encode(), JSON)

    def _count(self, key: str) -> None:
        with self._lock:
            self._http[key] += 1

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {"listen": self._listen, **self._http, **self._spans.to_json(),
                    "decoder_restarts": self._decoder.restarts}

    def stop(self, timeout_s: float) -> CollectorStatus:
        with self._lock:
            # an exporter's batch being received as the capture ends (its last spans) is kept: new
            # requests are refused from now on, those in flight get DRAIN_S to finish; past it a
            # late handler answers 503 and writes nothing into the closing bundle
            self._closing = True
            self._idle.wait_for(lambda: self._in_flight == 0, max(0.0, min(timeout_s, DRAIN_S)))
            self._ended = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._decoder.close()
        counts = self.counts()
        bad = sum(v for k, v in counts.items() if k.startswith("rejected_"))
        note = "" if is_loopback(self._listen.rpartition(":")[0].strip("[]")) else \
            f"listened on non-loopback {self._listen} as asked; "
        if counts["spans"] == 0 and counts["requests"] == 0:
            return CollectorStatus(self.name, CollectorState.OK, note + (
                f"no OTLP requests arrived on {self._listen}: point OTEL_EXPORTER_OTLP_TRACES_ENDPOINT at "
                f"http://{self._listen}{TRACES_PATH}"), counts, [SPANS.name])
        if bad:
            state = CollectorState.PARTIAL if counts["spans"] else CollectorState.FAILED
            failure = f"; {self._decoder.failure}" if self._decoder.failure else ""
            return CollectorStatus(self.name, state, note + f"{bad} request(s) rejected (see counts){failure}",
                                   counts, [SPANS.name])
        return CollectorStatus(self.name, CollectorState.OK, note or None, counts, [SPANS.name])
