"""A real OTLP receiver (diagnose.collectors.otlp) on 127.0.0.1 for tests, and raw HTTP clients."""
from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path

import pytest

from diagnose.bundle import BundleWriter
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.otlp import OtlpCollector


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """An OtlpCollector started on a free port, writing into the bundle directory ``out``."""

    def __init__(self, out: Path, collector_args: dict | None = None, **opts):
        self.port = free_port()
        self.out = out
        out.mkdir(mode=0o700)
        self.collector = OtlpCollector(**(collector_args or {}))
        options = CaptureOptions(otlp_listen=f"127.0.0.1:{self.port}", **opts)
        target = resolve_target(os.getppid())  # unused by the receiver; any live process
        assert self.collector.probe(target, options).available
        self.collector.start(target, options, BundleWriter(out))

    def post(self, body: bytes, ctype: str, path: str = "/v1/traces", headers: dict | None = None):
        """(status, body, Content-Type) of one POST through http.client."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": ctype, **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.getheader("Content-Type")
        finally:
            conn.close()

    def raw(self, data: bytes, timeout_s: float = 10) -> tuple[int, dict[str, str], bytes]:
        """Send ``data`` as it is and read the answer to EOF: (status, headers, body). Raises
        AssertionError when the connection closes without a status line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered (a 503, a 413) and closed before reading it all: read that answer
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass  # closed with our unread bytes still queued: what it sent before is kept
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/"), f"no HTTP answer, got {answer[:200]!r}"
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        return int(lines[0].split()[1]), headers, body

    def spans(self) -> list[dict]:
        p = self.out / "spans.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.is_file() else []


def post_request(ctype: str, body: bytes, length: bytes | None = None, extra: bytes = b"") -> bytes:
    """A raw POST /v1/traces with a Content-Length of our choosing (the real body's by default)."""
    length = str(len(body)).encode() if length is None else length
    return (b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + ctype.encode() +
            b"\r\nContent-Length: " + length + b"\r\n" + extra + b"\r\n" + body)


@pytest.fixture
def receiver(tmp_path):
    """A factory of Receivers in tmp_path; each one still running is stopped after the test."""
    made: list[Receiver] = []

    def _make(collector_args: dict | None = None, **opts) -> Receiver:
        r = Receiver(tmp_path / f"b{len(made)}", collector_args, **opts)
        made.append(r)
        return r

    yield _make
    for r in made:
        if r.collector._server is not None and r.collector._thread.is_alive():
            r.collector.stop(5)
