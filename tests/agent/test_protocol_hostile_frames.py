"""What the agent-protocol fuzzers found (tests/fuzz/test_fuzz_agent_protocol.py), one regression
test each: frames that made the agent close the connection without a reply, and replies that
made the attach side raise KeyError instead of recording the agent's error."""
from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

from diagnose.agent.host.client import AgentHandle
from diagnose.agent.host.replies import Hello
from diagnose.agent.inproc import protocol
from diagnose.agent.inproc.server import AgentServer
from diagnose.bundle import BundleWriter, CollectorState
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions, CollectorError
from diagnose.collectors.agent import AgentCollector
from fake_agent import FakeAgent


@pytest.fixture
def agent_server():
    directory = Path(tempfile.mkdtemp(prefix="dpf-", dir="/tmp"))
    server = AgentServer(directory, lambda request, peer: protocol.ok(op=request.op))
    server.start()
    yield server
    server.close()
    directory.rmdir()


def exchange(path: Path, payload: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(payload)
        return protocol.read_message(s, 5.0)


@pytest.mark.parametrize("op", [b'{"v":1,"op":"hello"}', b"[1]", b"null", b"7"])
def test_an_op_that_is_an_object_or_a_list_is_refused_with_a_reply(agent_server, op):
    """Was: ``op not in OPS`` raised TypeError (unhashable) and the agent hung up without a reply."""
    reply = exchange(agent_server.path, b'{"v":1,"op":' + op + b"}\n")
    assert reply["ok"] is False and reply["error"]["code"] == protocol.UNKNOWN_OP, reply
    assert exchange(agent_server.path, protocol.encode({"op": "hello"}))["ok"] is True


def test_a_number_too_large_for_a_float_is_a_bad_request():
    """Was: accepted, then CaptureRequest.from_args raised OverflowError inside the target."""
    msg = {"v": 1, "op": "capture", "out_dir": "/b", "duration_s": 10**400}
    with pytest.raises(protocol.ProtocolError, match="duration_s must be a finite number"):
        protocol.parse_request(msg)


@pytest.fixture
def collector(tmp_path):
    def _make(reply: dict) -> tuple[AgentCollector, FakeAgent]:
        agent = FakeAgent(protocol.encode(reply))
        made.append(agent)
        c = AgentCollector()
        c._handle = AgentHandle(4242, agent.path, Hello())
        return c, agent

    made: list[FakeAgent] = []
    yield _make
    for agent in made:
        agent.close()


@pytest.mark.parametrize("reply", [
    {"ok": False},  # no error at all
    {"ok": False, "error": "busy"},  # a string, not {"code", "message"}
    {"ok": "yes"},
    {"ok": True, "out_dir": ["/etc"]},
])
def test_a_capture_reply_that_breaks_the_protocol_is_the_agents_error(collector, tmp_path, reply):
    """Was: ``reply['error']['message']`` raised KeyError/TypeError out of the collector's start."""
    c, _ = collector(reply)
    bundle = tmp_path / "b"
    bundle.mkdir(mode=0o700)
    with pytest.raises(CollectorError, match="breaks the protocol"):
        c.start(resolve_target(os.getppid()), CaptureOptions(), BundleWriter(bundle))


def test_a_report_part_without_its_reason_is_recorded_not_raised(collector, tmp_path):
    """Was: status_from_report's ``p['reason']`` raised KeyError when the agent stopped."""
    c, agent = collector({"ok": True, "out_dir": str(tmp_path), "parts": {}})
    c.start(resolve_target(os.getppid()), CaptureOptions(), BundleWriter(tmp_path))
    agent.reply = protocol.encode({"ok": True, "state": "done",
                                   "report": {"parts": {"torch": {"state": "failed", "counts": {}}}}})
    status = c.stop(2)
    assert status.state == CollectorState.FAILED and "breaks the protocol" in status.reason, status


def _report(counts: dict) -> dict:
    return {"ok": True, "state": "done", "report": {"parts": {"spans": {"state": "ok", "reason": None,
                                                                        "counts": counts}}}}


def test_the_agents_list_counts_pass_the_check_and_other_lists_do_not():
    """Was: every report with the agent's drop ranges (spans_dropped_ranges_ns, a list of [ns, ns])
    broke the protocol check, so attach called the agent lost. Lists of numbers, or of lists of
    numbers, bounded in length, are counts; anything else in a list is not."""
    from diagnose.agent.host.replies import MAX_COUNT_ITEMS, checked

    ok = {"spans_dropped_ranges_ns": [[1, 2], [3, 4]], "spans_window_ns": [1, 5],
          "spans_keep_history": [[1, 1.0], [2, 0.5]], "spans_dropped_ranges": []}
    assert checked(_report(ok))["report"]["parts"]["spans"]["counts"] == ok
    for bad in ([["x", 1]], [[[1]]], [{"a": 1}], [True], list(range(MAX_COUNT_ITEMS + 1)),
                [list(range(MAX_COUNT_ITEMS + 1))]):
        with pytest.raises(protocol.ProtocolError, match="counts that are not numbers"):
            checked(_report({"c": bad}))


def test_replies_are_typed_once_and_an_odd_hello_field_is_unknown():
    """Typed replies: the fields the attach side reads come typed from one decode; a hello whose
    capabilities are not a list of strings (a doctor's ``', '.join`` raised TypeError on it) reads as none."""
    from diagnose.agent.host.replies import hello_of, reply_of

    reply = reply_of(_report({"spans_dropped_ranges_ns": [[1, 2]], "spans": 3}))
    assert reply.ok and reply.state == "done" and reply.refusal == "" and reply.report is not None
    assert reply.report.parts["spans"].counts == {"spans_dropped_ranges_ns": [[1, 2]], "spans": 3}
    refused = reply_of({"ok": False, "error": {"code": "busy", "message": "a capture is running"}})
    assert refused.refusal == "a capture is running" and refused.report is None
    hello = hello_of({"ok": True, "pid": 7, "capabilities": 5, "torch": ["2.1"], "python": "3.11.7"})
    assert (hello.pid, hello.capabilities, hello.torch, hello.python) == (7, (), None, "3.11.7")
    with pytest.raises(protocol.ProtocolError, match="'pid' is not a int"):
        reply_of({"ok": True, "pid": True})
