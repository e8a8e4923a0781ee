"""In a real capture the samplers run at nice 19 (collectors/priority.py): the process and py-spy
collectors' threads and the py-spy windows; the manifest names them. The OTLP receiver's thread, its
request handlers and its decoder child keep diagnose's own priority: the target's exporter waits on
their answers."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from diagnose.capture.session import Capture
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.otlp import OtlpCollector
from diagnose.collectors.process import ProcessCollector
from diagnose.collectors.pyspy import PySpyCollector, find_pyspy

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


def _nice(tid: int) -> int:
    return int(open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16])


def _lowered_now(target_pid: int) -> dict[str, int] | None:
    """Nice value of each collector thread, request handler and child, once all are there."""
    me = psutil.Process()
    threads = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
    got = {name: _nice(tid) for tid, name in threads.items()
           if name.startswith("diagnose-") or "process_request_thread" in name}
    for child in me.children():
        if child.pid == target_pid:
            continue
        try:
            cmd = " ".join(child.cmdline())
            got["child " + ("py-spy" if "py-spy" in cmd else "otlp_child" if "otlp_child" in cmd else cmd)] = \
                os.getpriority(os.PRIO_PROCESS, child.pid)
        except (psutil.Error, OSError):
            continue
    want = {"diagnose-process", "diagnose-pyspy", "diagnose-otlp", "child py-spy", "child otlp_child"}
    if not want <= set(got) or not any("process_request_thread" in n for n in got):
        return None
    return got


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy not installed")
def test_the_samplers_run_at_nice_19_and_the_otlp_receiver_at_diagnoses_priority(tmp_path):
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "idle.py")], stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None and target.stdout.readline().strip() == "READY"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    cap = Capture(resolve_target(target.pid), CaptureOptions(duration_s=60, otlp_listen=f"127.0.0.1:{port}"),
                  tmp_path, collectors=(PySpyCollector(), ProcessCollector(), OtlpCollector()))
    runner = threading.Thread(target=cap.run, args=(stop,))
    runner.start()
    seen, held = None, None
    try:
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            held = held or _hold_a_request(port)  # a request never finished keeps its handler thread alive
            seen = _lowered_now(target.pid)
            time.sleep(0.1)
    finally:
        if held is not None:
            held.close()
        stop.set()
        runner.join(60)
        target.kill()
        target.wait()
    assert seen is not None, "a collector thread or child never appeared"
    own = os.getpriority(os.PRIO_PROCESS, 0)
    samplers = {"diagnose-process", "diagnose-pyspy", "child py-spy"}
    assert {n: v for n, v in seen.items() if n in samplers} == dict.fromkeys(samplers, 19), seen
    assert own < 19 and {v for n, v in seen.items() if n not in samplers} == {own}, seen
    manifest = json.loads(next(tmp_path.glob("*/manifest.json")).read_text())
    assert manifest["cost"]["collector_priority"] == {"diagnose-process": "nice 19", "diagnose-pyspy": "nice 19"}


def _hold_a_request(port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None  # not listening yet
    sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    return sock
