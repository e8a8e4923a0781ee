"""OTLP/HTTP receiver: the real opentelemetry-exporter-otlp-proto-http exporter delivers spans
(protobuf, gzip); OTLP/JSON with hex ids; malformed and oversized bodies answered and counted;
nothing listening after the capture."""
from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from diagnose.bundle import CollectorState
from diagnose.collectors.otlp import parse_listen
from helpers import SHARED_DATA, WORKLOADS, findings, only_bundle, run_diagnose
from otlp_helpers import free_port, post_request

OTLP_EXAMPLE = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"


@pytest.mark.parametrize("gzip_on", [False, True])
def test_real_otlp_http_exporter_delivers_spans(receiver, gzip_on):
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    r = receiver()
    provider = TracerProvider(resource=Resource.create({"service.name": "exporter-test"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{r.port}/v1/traces",
                                compression=Compression.Gzip if gzip_on else Compression.NoCompression)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER) as req:
        req.set_attribute("http.route", "/predict")
        with tracer.start_as_current_span("tokenize") as tok:
            tok.add_event("tokens", {"n": 12})
    provider.shutdown()
    status = r.collector.stop(5)
    assert status.state == CollectorState.OK, status
    spans = {s["name"]: s for s in r.spans()}
    assert set(spans) == {"request", "tokenize"}
    ctx = req.get_span_context()
    assert spans["request"]["trace_id"] == format(ctx.trace_id, "032x")
    assert spans["request"]["span_id"] == format(ctx.span_id, "016x")
    assert spans["tokenize"]["parent_span_id"] == spans["request"]["span_id"]
    assert spans["request"]["kind"] == "server" and spans["request"]["source"] == "otlp"
    assert spans["request"]["service"] == "exporter-test"
    assert spans["request"]["attributes"] == {"http.route": "/predict"}
    assert spans["tokenize"]["events"][0]["name"] == "tokens"
    assert spans["request"]["start_ns"] == req.start_time and spans["request"]["end_ns"] == req.end_time
    assert status.counts["requests"] == 2 and status.counts["spans"] == 2


@pytest.mark.skipif(not OTLP_EXAMPLE.is_file(), reason="shared OTLP example absent (../shared/data/otlp)")
def test_otlp_json_with_hex_ids(receiver):
    r = receiver()
    code, body, ctype = r.post(OTLP_EXAMPLE.read_bytes(), "application/json")
    assert (code, ctype) == (200, "application/json") and json.loads(body) == {}
    [span] = r.spans()
    assert span["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert span["span_id"] == "eee19b7ec3c1b174" and span["parent_span_id"] == "eee19b7ec3c1b173"
    assert span["kind"] == "server" and span["service"] == "my.service"
    assert span["start_ns"] == 1544712660000000000 and span["end_ns"] == 1544712661000000000
    assert span["attributes"] == {"my.span.attr": "some value"}


def test_malformed_and_unsupported_requests_are_answered_and_counted(receiver):
    r = receiver()
    assert r.post(b"\xff\x00garbage-not-protobuf\x07", "application/x-protobuf")[0] == 400
    assert r.post(b"{not json", "application/json")[0] == 400
    assert r.post(b'{"resourceSpans": "nope"}', "application/json")[0] == 400
    assert r.post(b"\x1f\x8b broken gzip", "application/x-protobuf",
                  headers={"Content-Encoding": "gzip"})[0] == 400
    assert r.post(b"<xml/>", "text/xml")[0] == 415
    assert r.post(b"{}", "application/json", path="/v1/metrics")[0] == 404
    conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=5)
    conn.request("GET", "/v1/traces")
    assert conn.getresponse().status == 405
    conn.close()
    assert r.post(b'{"resourceSpans": []}', "application/json")[0] == 200  # still serving
    status = r.collector.stop(5)
    assert status.counts["rejected_malformed"] == 4 and status.counts["rejected_unsupported"] == 1
    assert status.state == CollectorState.FAILED and "5 request(s) rejected" in status.reason


def test_body_over_the_size_limit_is_refused_before_and_after_gzip(receiver):
    r = receiver(otlp_max_body_bytes=2048)
    code, body, _ = r.post(b"\x00" * 4096, "application/x-protobuf")
    assert code == 413 and b"2048-byte limit" in body
    bomb = gzip.compress(b"\x00" * (1 << 20))  # 1 MiB of zeros in about 1 KiB
    assert len(bomb) < 2048
    code, body, _ = r.post(bomb, "application/x-protobuf", headers={"Content-Encoding": "gzip"})
    assert code == 413 and b"inflates beyond" in body
    assert r.collector.stop(5).counts["rejected_too_large"] == 2


def test_nothing_listens_after_the_capture(receiver):
    r = receiver()
    r.collector.stop(5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", r.port), timeout=2).close()


def test_listen_addresses():
    assert parse_listen("4318") == ("127.0.0.1", 4318)
    assert parse_listen(":4318") == ("127.0.0.1", 4318)
    assert parse_listen("0.0.0.0:4318") == ("0.0.0.0", 4318)
    assert parse_listen("[::1]:4318") == ("::1", 4318)
    for bad in ("host:99999", "host:port", "[::1]4318", ""):
        with pytest.raises(ValueError):
            parse_listen(bad)
    res = run_diagnose("attach", str(os.getpid()), "--otlp-listen", "localhost:http")
    assert res.returncode == 2 and "--otlp-listen" in res.stderr and "HOST:PORT" in res.stderr


def test_attach_with_otlp_listen_receives_a_service_spans_via_its_env(tmp_path):
    port = free_port()
    env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces"}
    # the service traces 1.5 s and exits once its last batch was answered, which ends the capture:
    # a batch still being received when a capture ends is refused (503, ended) and rightly partial
    svc = subprocess.Popen([sys.executable, str(WORKLOADS / "otlp_service.py"), "1.5"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "READY" in svc.stdout.readline()
        attach = subprocess.Popen(
            [sys.executable, "-m", "diagnose", "attach", str(svc.pid), "--duration", "5", "--no-tui",
             "--skip", "pyspy", "--otlp-listen", f"127.0.0.1:{port}", "--out", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while True:  # the receiver is up once the port accepts
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and attach.poll() is None, attach.stderr.read()
                time.sleep(0.05)
        svc.stdin.write("go\n")
        svc.stdin.flush()
        out, err = attach.communicate(timeout=60)
        assert attach.returncode == 0, err
    finally:
        svc.kill()
        svc.wait(10)
        for s in (svc.stdin, svc.stdout, svc.stderr):
            s.close()
    doc = findings(only_bundle(tmp_path))
    otlp = {c["name"]: c for c in doc["collectors"]}["otlp"]
    assert otlp["state"] == "ok" and otlp["counts"]["spans"] > 10, otlp
    names = {json.loads(x)["name"] for x in (only_bundle(tmp_path) / "spans.jsonl").read_text().splitlines()}
    assert names == {"handle", "tokenize", "generate"}


def test_one_span_protobuf_refuses_costs_that_span_not_the_request(receiver):
    r = receiver()
    spans = [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"{i + 1:016x}", "name": f"s{i}",
              "kind": 2, "startTimeUnixNano": str(1_700_000_000_000_000_000 + i * 1_000_000),
              "endTimeUnixNano": str(1_700_000_000_001_000_000 + i * 1_000_000)} for i in range(10)]
    spans[4]["endTimeUnixNano"] = str(1 << 65)  # past uint64: the JSON mapping refuses the whole document
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    code, body, _ = r.post(json.dumps(doc).encode(), "application/json")
    assert code == 200, body
    assert sorted(s["name"] for s in r.spans()) == [f"s{i}" for i in range(10) if i != 4]
    assert r.collector.counts()["spans_rejected"].get("time_out_of_range") == 1, r.collector.counts()


def _one_span_doc(name: str) -> bytes:
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "00000000000000aa", "name": name, "kind": 2,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000001000000"}
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}).encode()


def _wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_batch_being_received_when_the_capture_ends_is_kept_and_a_new_one_refused(receiver):
    """An exporter's last batch often arrives as the capture ends: the request already being received
    finishes and its spans are stored; a request that starts after the stop began gets 503."""
    r = receiver()
    body = _one_span_doc("last-batch")
    request = post_request("application/json", body)
    head, tail = request[:-10], request[-10:]
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        sock.sendall(head)  # headers and most of the body: the handler now waits for the rest
        _wait_until(lambda: r.collector._in_flight == 1)
        stopped = []
        stopper = threading.Thread(target=lambda: stopped.append(r.collector.stop(10)))
        stopper.start()
        _wait_until(lambda: r.collector._closing)
        code, _, answer = r.raw(post_request("application/json", _one_span_doc("too-late")))
        assert code == 503 and b"the capture has ended" in answer
        sock.sendall(tail)
        assert sock.recv(65536).split(b" ")[1] == b"200"
        stopper.join(15)
    assert [s["name"] for s in r.spans()] == ["last-batch"]
    [status] = stopped
    assert status.counts["spans"] == 1 and status.counts["rejected_busy"] == 1


def test_a_request_trickling_at_the_end_holds_the_stop_at_most_the_drain(receiver):
    from diagnose.collectors.otlp import DRAIN_S

    r = receiver()
    request = post_request("application/json", _one_span_doc("never-finished"))
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        sock.sendall(request[:-10])
        _wait_until(lambda: r.collector._in_flight == 1)
        t0 = time.monotonic()
        status = r.collector.stop(10)
        assert time.monotonic() - t0 < DRAIN_S + 2.0
    assert r.spans() == [] and status.counts["spans"] == 0
