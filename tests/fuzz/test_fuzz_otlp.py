"""Fuzzing the OTLP receiver (tests/fuzzing.py says how long and how to reproduce a case).

The decode path is the decoding child's own code (collectors/otlp_child.py ``decode_one``), run
in-process on mutated protobuf and OTLP/JSON bodies made by the OpenTelemetry SDK: it answers
every body with records then counts, or an error of status 400/413 with a one-line message, and
never falls into its last-resort handler (an exception it did not expect). The HTTP handler gets
mutated whole requests on a real socket: each is answered with a status line (never 500), the
decoding child never dies, and the receiver still serves afterwards.
"""
from __future__ import annotations

import io
import json
import socket

import pytest

from diagnose.collectors.otlp_child import decode_one
from diagnose.collectors.otlp_worker import HEAD
from fuzzing import fuzz
from otlp_helpers import post_request

ANSWERS = {200, 400, 404, 405, 408, 411, 413, 414, 415, 431, 501, 503, 505}  # never 500


def frames(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        kind, length = HEAD.unpack_from(data, pos)
        pos += HEAD.size
        out.append((kind, data[pos:pos + length]))
        pos += length
    return out


def check_record(rec: dict) -> None:
    assert len(rec["trace_id"]) == 32 and len(rec["span_id"]) == 16, rec
    assert isinstance(rec["start_ns"], int) and 0 < rec["start_ns"] < 2**63, rec
    assert rec["end_ns"] is None or rec["start_ns"] <= rec["end_ns"] < 2**63, rec
    assert len(rec["name"]) <= 256 and len(rec["events"]) <= 32 and len(rec["attributes"]) <= 64, rec


def decode_target(kind: bytes):
    def run(body: bytes) -> None:
        out = io.BytesIO()
        decode_one(kind, [body], 1000, out)
        *records, (last, payload) = frames(out.getvalue())
        assert all(k == b"R" for k, _ in records), records
        for _, chunk in records:
            for line in chunk.splitlines():
                check_record(json.loads(line))
        doc = json.loads(payload)
        if last == b"E":
            assert doc["status"] in (400, 413) and doc["message"].strip() and "\n" not in doc["message"], doc
            assert not doc["message"].startswith("cannot decode the body ("), doc  # the last-resort handler
        else:
            assert last == b"D" and doc["counts"]["spans"] == sum(len(c.splitlines()) for _, c in records), doc
    return run


@pytest.mark.parametrize("kind, seeds", [(b"P", "protobuf"), (b"J", "json")])
def test_fuzz_otlp_decode(otel_seeds, tmp_path, kind, seeds):
    fuzz(f"otlp-decode-{seeds}", otel_seeds[seeds], decode_target(kind), allowed=(), save_dir=tmp_path,
         max_len=256 * 1024)


def http_seeds(otel_seeds) -> list[bytes]:
    gz = b"Content-Encoding: gzip\r\n"
    import gzip

    pb, js = otel_seeds["protobuf"][0], otel_seeds["json"][0]
    return [post_request("application/x-protobuf", pb), post_request("application/json", js),
            post_request("application/x-protobuf", gzip.compress(pb), extra=gz),
            post_request("application/json; charset=utf-8", gzip.compress(js), extra=gz)]


def test_fuzz_otlp_http_handler(receiver, otel_seeds, tmp_path):
    r = receiver()

    def exchange(data: bytes) -> None:
        with socket.create_connection(("127.0.0.1", r.port), timeout=10) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            except OSError:  # EPIPE, ECONNRESET, ENOTCONN: answered and closed before it read all of it
                pass
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except OSError:
                pass  # a reset after the answer: what was answered is in ``answer``
        if not answer and not data.split(b"\n", 1)[0].strip():
            return  # a blank request line: http.server reads no request, so it answers none
        line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        assert line.startswith("HTTP/1.") and int(line.split()[1]) in ANSWERS, (line, answer[:300])
        assert b"cannot decode the body (" not in answer, answer[:300]  # the decoder's last resort

    fuzz("otlp-http", http_seeds(otel_seeds), exchange, allowed=(), save_dir=tmp_path, max_len=256 * 1024)
    assert r.post(otel_seeds["protobuf"][0], "application/x-protobuf")[0] == 200  # still serving
    status = r.collector.stop(5)
    assert status.counts["decoder_restarts"] == 0, status.counts  # the decoding child never died
