"""Fuzzing the agent protocol on both sides of its Unix socket (tests/fuzzing.py says how long
and how to reproduce a case).

In the target: ``read_message`` + ``parse_request`` + ``CaptureRequest.from_args`` raise only
ProtocolError (or TimeoutError) for any bytes, and a real AgentServer answers every connection with
a protocol reply and keeps serving. On the host: ``AgentHandle.call`` against a fake agent sending
mutated replies raises only OSError/ProtocolError, and what it returns can be read by the attach
side (collectors/agent.py) without any other exception.
"""
from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from diagnose.agent.host.client import AgentHandle
from diagnose.agent.host.replies import Hello
from diagnose.agent.inproc import protocol
from diagnose.agent.inproc.capture import FAILED, OK, SKIPPED, UNAVAILABLE, CaptureRequest, Part
from diagnose.agent.inproc.server import AgentServer
from diagnose.collectors.agent import _flat_counts, status_from_report
from fake_agent import FakeAgent
from fuzzing import fuzz

MAX_FRAME = protocol.MAX_MESSAGE_BYTES + 4096  # a little past the limit; below a socket buffer


def request_seeds() -> list[bytes]:
    return [
        protocol.encode({"op": "hello"}), protocol.encode({"op": "status"}), protocol.encode({"op": "stop"}),
        protocol.encode({"op": "capture", "out_dir": "/tmp/diagnose-bundle", "duration_s": 30.5,
                         "torch_window_s": 10, "torch": True, "spans": True, "gc": False,
                         "record_shapes": False, "with_stack": True}),
        protocol.encode({"op": "capture", "out_dir": "/b", "duration_s": 1}),
    ]


def report(**parts: Part) -> dict:
    return {"capture_id": 3, "pid": 4242, "out_dir": "/tmp/diagnose-bundle", "started_ns": 1_700_000_000 * 10**9,
            "ended_ns": None, "running": False, "duration_s": 30.0, "torch_window_s": 10.0,
            "parts": {name: part.to_json() for name, part in parts.items()}, "error": None}


def reply_seeds() -> list[bytes]:
    done = report(torch=Part(OK, None, {"torch_traces": 1, "torch_events": 1500}),
                  spans=Part(OK, None, {"spans": 20, "spans_open": 0, "spans_rejected": {"bad_id": 1}}),
                  gc=Part(SKIPPED, "not requested"))
    failed = report(torch=Part(FAILED, "torch trace export failed: disk full"),
                    spans=Part(UNAVAILABLE, "opentelemetry is not imported"), gc=Part(OK, None, {"gc_pauses": 3}))
    return [protocol.encode(m) for m in (
        protocol.ok(pid=4242, uid=1000, agent_version="0.1.0", protocol=1, python="3.11.7",
                    capabilities=["gc", "spans"], capturing=False, max_capture_s=600.0),
        protocol.ok(**done, note=None),
        protocol.ok(state="done", report=done),
        protocol.ok(state="capturing", report=failed),
        protocol.ok(state="idle", report=None),
        protocol.error(protocol.BUSY, "a capture is already running in pid 4242 (capture 2)"),
    )]


def parse_in_target(data: bytes) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        request = protocol.parse_request(protocol.read_message(b, 1.0))
    spec = protocol.OPS[request.op]  # what was accepted has the declared types
    for name, value in request.args.items():
        assert isinstance(value, spec[name][0]), (name, value)
    if request.op == "capture":
        CaptureRequest.from_args(request.args)


def test_fuzz_request_parser_in_the_target(tmp_path):
    stats = fuzz("agent-request", request_seeds(), parse_in_target,
                 allowed=(protocol.ProtocolError, TimeoutError), save_dir=tmp_path, max_len=MAX_FRAME)
    assert stats.some_accepted


@pytest.fixture
def agent_server():
    directory = Path(tempfile.mkdtemp(prefix="dfz-", dir="/tmp"))  # short: AF_UNIX paths are <= 107 bytes
    server = AgentServer(directory, lambda request, peer: protocol.ok(op=request.op, args=sorted(request.args)))
    server.start()
    yield server
    server.close()
    directory.rmdir()


def test_fuzz_agent_server_answers_every_connection(agent_server, tmp_path):
    def exchange(data: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(agent_server.path))
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the agent answered (too long) before reading it all
            reply = protocol.read_message(s, 5.0)
        assert reply.get("v") == protocol.PROTOCOL_VERSION and isinstance(reply.get("ok"), bool), reply
        if not reply["ok"]:
            assert isinstance(reply["error"]["code"], str) and "\n" not in reply["error"]["message"], reply

    fuzz("agent-server", request_seeds(), exchange, allowed=(), save_dir=tmp_path, max_len=MAX_FRAME,
                 min_cases=50)
    exchange(protocol.encode({"op": "hello"}))  # still serving


def test_fuzz_reply_parser_on_the_host(tmp_path):
    agent = FakeAgent()
    handle = AgentHandle(4242, agent.path, Hello())

    def attach_side_reads(data: bytes) -> None:
        agent.reply = data
        for op in ("capture", "stop"):  # what collectors/agent.py reads of each reply
            reply = handle.call(op, 2.0)
            if op == "capture":
                if not reply.get("ok"):
                    assert isinstance(reply["error"]["message"], str)
                str(reply.get("out_dir") or "")
            elif reply.get("ok") and reply.get("report"):
                status_from_report("agent", reply["report"])
                _flat_counts(reply["report"])

    try:
        stats = fuzz("agent-reply", reply_seeds(), attach_side_reads,
                     allowed=(OSError, protocol.ProtocolError), save_dir=tmp_path, max_len=MAX_FRAME)
    finally:
        agent.close()
    assert stats.some_accepted
