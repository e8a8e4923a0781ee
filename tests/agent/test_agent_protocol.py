"""The agent's control socket against bad clients: other uids, malformed requests, a second
capture, and a target running as another user than diagnose. Real services under `diagnose run`."""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from agent_helpers import AS_NOBODY, NOBODY, agent_path, service  # noqa: F401  (fixture)
from diagnose.agent.inproc import protocol

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def raw_exchange(path: str, payload: bytes, timeout_s: float = 5.0) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(payload)
        return protocol.read_message(s, timeout_s)


def hello_as(uid: int, path: str) -> dict:
    """Fork, drop to ``uid`` and say hello; returns {"reply": ...} or {"errno": ...}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                out = {"reply": protocol.call(path, "hello", 3.0)}
            except OSError as exc:
                out = {"errno": exc.errno}
            os.write(w, json.dumps(out).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@needs_root
def test_other_uid_is_refused_by_permissions_and_by_peer_credentials(service):  # noqa: F811
    svc = service("--no-torch")
    path = agent_path(svc)
    sock = svc.runtime_dir / "diagnose" / os.path.basename(path)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    import errno

    assert hello_as(NOBODY, str(sock)) == {"errno": errno.EACCES}  # first wall: 0700 dir, 0600 socket
    # Second wall, if the files were ever world-accessible: SO_PEERCRED refuses uid 65534.
    for p, mode in ((svc.runtime_dir, 0o711), (sock.parent, 0o711), (sock, 0o666)):
        os.chmod(p, mode)
    out = hello_as(NOBODY, str(sock))
    assert "reply" in out, out
    reply = out["reply"]
    assert reply["ok"] is False and reply["error"]["code"] == "forbidden"
    assert f"uid {NOBODY}" in reply["error"]["message"]
    assert protocol.call(path, "hello")["pid"] == svc.pid  # still serving its own uid / root


def test_malformed_requests_get_error_replies_and_the_agent_keeps_serving(service):  # noqa: F811
    svc = service("--no-torch")
    path = agent_path(svc)
    cases = {
        b"this is not json\n": "bad_request",
        b"[1, 2, 3]\n": "bad_request",
        b'{"v": 99, "op": "hello"}\n': "unsupported_version",
        b'{"v": 1, "op": "explode"}\n': "unknown_op",
        b'{"v": 1, "op": "capture"}\n': "bad_request",
        b'{"v": 1, "op": "capture", "out_dir": 5, "duration_s": 1}\n': "bad_request",
        b'{"v": 1, "op": "capture", "out_dir": "/tmp", "duration_s": true}\n': "bad_request",
        b'{"v": 1, "op": "hello", "evil": 1}\n': "bad_request",
        b'{"v": 1, "op": "capture", "out_dir": "/tmp", "duration_s": NaN}\n': "bad_request",
        b"\xff\xfe\n": "bad_request",
        b"x" * (protocol.MAX_MESSAGE_BYTES + 10): "bad_request",
    }
    for payload, code in cases.items():
        reply = raw_exchange(path, payload)
        assert reply["ok"] is False and reply["error"]["code"] == code, (payload[:40], reply)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # connects, says nothing, leaves
        s.connect(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # half a message, then silence
        s.connect(path)
        s.sendall(b'{"v": 1, "op"')
        reply = protocol.read_message(s, 5.0)
    assert reply["error"]["code"] == "bad_request" and "no complete message" in reply["error"]["message"]
    hello = protocol.call(path, "hello")
    assert hello["ok"] and hello["pid"] == svc.pid and hello["protocol"] == protocol.PROTOCOL_VERSION
    assert hello["torch"] is None and "torch_profiler" not in hello["capabilities"]


def test_one_capture_at_a_time_and_stop_ends_it(service, tmp_path):  # noqa: F811
    svc = service("--no-torch")
    path = agent_path(svc)
    first = protocol.call(path, "capture", out_dir=str(tmp_path), duration_s=30.0, torch_window_s=1.0)
    assert first["ok"] and first["running"]
    second = protocol.call(path, "capture", out_dir=str(tmp_path), duration_s=1.0)
    assert second["ok"] is False and second["error"]["code"] == "busy"
    assert "already running" in second["error"]["message"]
    assert protocol.call(path, "status")["state"] == "capturing"
    time.sleep(0.5)
    t0 = time.monotonic()
    reply = protocol.call(path, "stop")
    while reply["state"] == "capturing":
        time.sleep(0.05)
        reply = protocol.call(path, "status")
    assert time.monotonic() - t0 < 10.0  # stopped early: the capture asked for 30 s
    report = reply["report"]
    assert report["parts"]["spans"]["state"] == "ok" and report["parts"]["spans"]["counts"]["spans"] > 0
    assert report["parts"]["torch"]["state"] == "unavailable"
    assert "has not imported torch" in report["parts"]["torch"]["reason"]
    assert (tmp_path / "spans.jsonl").is_file() and (tmp_path / "gc.jsonl").is_file()
    again = protocol.call(path, "capture", out_dir=str(tmp_path / "x"), duration_s=0.5)
    assert again["ok"] and again["note"]  # a missing out_dir is staged, not refused


def _nobody_can_run_python() -> bool:
    try:
        return subprocess.run(AS_NOBODY + [sys.executable, "-c", "import diagnose.agent, opentelemetry"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@needs_root
def test_target_of_another_user_stages_its_files_and_attach_collects_them(service, tmp_path):  # noqa: F811
    if not _nobody_can_run_python():
        pytest.skip("uid 65534 cannot run this Python (its directories are not readable by others)")
    from diagnose.bundle import BundleWriter
    from diagnose.capture.target import resolve_target
    from diagnose.collectors import CaptureOptions
    from diagnose.collectors.agent import AgentCollector

    svc = service("--no-torch", as_nobody=True)
    target = resolve_target(svc.pid)
    assert target.uid == NOBODY
    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir(mode=0o700)  # root's, not writable by the target
    collector = AgentCollector()
    opts = CaptureOptions(duration_s=1.5, torch_window_s=0.0)
    assert collector.probe(target, opts).available
    collector.start(target, opts, BundleWriter(bundle_dir))
    time.sleep(1.5)
    status = collector.stop(10.0)
    assert status.counts["spans"] > 0, status
    lines = (bundle_dir / "spans.jsonl").read_text().splitlines()
    assert len(lines) == status.counts["spans"]
    assert stat.S_IMODE((bundle_dir / "spans.jsonl").stat().st_mode) == 0o600
    assert not list((svc.runtime_dir / "diagnose").glob("capture-*"))  # staging removed
