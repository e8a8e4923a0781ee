"""Hostile receivers and mistyped export options (review 15): a trickling OTLP receiver is bounded
by the export's deadline and cannot keep the process alive, a 3xx is a failure and never followed,
reserved or colliding Prometheus label names and a bare ``prometheus=PORT`` are usage errors."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from diagnose.cli import EXIT_USAGE, main
from diagnose.export.otlp import ExportFailed, deadline_s, send
from diagnose.export.snapshot import Point, Snapshot
from diagnose.export.targets import label_conflict, parse_export

SNAP = Snapshot({"service.name": "t"}, (Point("diagnose.findings", "{finding}", "d", 1.0),), (), None)


class Receiver:
    """An HTTP server on 127.0.0.1 whose POST answer is ``mode``: ``trickle`` (200, then a body
    byte every 0.2 s), or a redirect status (302, 307) to /elsewhere, which answers 200."""

    def __init__(self, mode: str):
        seen = self.seen = []
        stop = self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                seen.append((self.command, self.path, len(self.rfile.read(n)) if n else 0))
                if mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    try:
                        while not stop.wait(0.2):  # until close(): the abandoned export then ends
                            self.wfile.write(b"x")
                            self.wfile.flush()
                    except OSError:
                        return
                code = int(mode) if self.path.startswith("/v1/") else 200
                self.send_response(code)
                if code != 200:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_trickling_receiver_is_bounded_by_the_export_deadline():
    """Before: send() with a 0.5 s timeout blocked as long as the body trickled (hours)."""
    rx = Receiver("trickle")
    try:
        t0 = time.monotonic()
        with pytest.raises(ExportFailed, match="had not finished answering after 3 s") as err:
            send(SNAP, rx.url, 0.5)
        assert time.monotonic() - t0 < deadline_s(0.5) + 1.0 and err.value.fix.startswith("check it is an OTLP")
    finally:
        rx.close()


def test_a_stuck_export_does_not_keep_the_process_alive():
    """The abandoned export thread is a daemon and the SDK providers register no atexit shutdown:
    the interpreter exits right after send() gives up."""
    rx = Receiver("trickle")
    code = ("import sys, time\n"
            "from diagnose.export.otlp import ExportFailed, send\n"
            "from diagnose.export.snapshot import Point, Snapshot\n"
            "snap = Snapshot({'service.name': 't'}, (Point('diagnose.findings', '{finding}', 'd', 1.0),), (), None)\n"
            "try:\n    send(snap, sys.argv[1], 0.5)\nexcept ExportFailed as exc:\n    print('failed:', exc)\n"
            "print('exiting', flush=True)\n")
    try:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", code, rx.url], capture_output=True, text=True, timeout=20)
        took = time.monotonic() - t0
    finally:
        rx.close()
    assert out.returncode == 0 and "failed:" in out.stdout and "exiting" in out.stdout, out.stderr
    assert took < deadline_s(0.5) + 6.0, f"{took:.1f} s"  # the imports and the deadline, no more


@pytest.mark.parametrize("status", ["302", "307"])
def test_a_redirect_is_a_failure_and_never_followed(status):
    """Before: a 302 was followed (as a GET without the body) and reported "exported 1 metric points"."""
    rx = Receiver(status)
    try:
        with pytest.raises(ExportFailed, match=f"HTTP {status}") as err:
            send(SNAP, rx.url, 2.0)
    finally:
        rx.close()
    assert "not followed" in str(err.value) and err.value.fix.startswith("pass the receiver's OTLP/HTTP base URL")
    assert all(path.startswith("/v1/") for _method, path, _n in rx.seen), rx.seen


def test_label_conflicts_name_both_keys():
    assert label_conflict(["service.name", "job.id", "job_id"]) == (
        "resource attributes 'job.id' and 'job_id' are both the Prometheus label 'job_id'; rename or drop one")
    assert "reserved" in (label_conflict(["__name__"]) or "")
    assert label_conflict(["service.name", "job.id", "rank"]) is None


@pytest.mark.parametrize("args, env, said", [
    (["--export-attr", "__name__=x"], {}, "reserved by Prometheus"),
    (["--export-attr", "job.id=1", "--export-attr", "job_id=2"], {}, "'job.id' and 'job_id'"),
    (["--export-attr", "service_name=x"], {}, "'service.name' and 'service_name'"),
    (["--export", "prometheus=:9464"], {"OTEL_RESOURCE_ATTRIBUTES": "job-id=1,job.id=2"}, "OTEL_RESOURCE_ATTRIBUTES"),
    (["--export", "prometheus=9464"], {}, "did you mean prometheus=:9464 (serve) or prometheus=./9464 (a file)?"),
])
def test_export_mistakes_are_usage_errors(args, env, said, tmp_path, monkeypatch):
    """Before: each was accepted; the report said "wrote" a page promtool rejects, a value was lost,
    or a file named 9464 appeared in the cwd."""
    monkeypatch.chdir(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = CliRunner().invoke(main, ["report", str(tmp_path / "no-such-bundle"), *args])
    assert res.exit_code == EXIT_USAGE and said in res.output, res.output
    assert not list(tmp_path.iterdir())


def test_a_file_named_by_digits_is_still_a_file():
    assert parse_export("prometheus=./9464").path is not None
