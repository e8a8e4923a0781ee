"""Frame catalog and py-spy chrometrace parsing on real py-spy output."""
from __future__ import annotations

import json

from diagnose.catalogs.frames import Category
from diagnose.signals.stacks import Frame, classify, segments_from_chrometrace
from helpers import REPO


def f(function: str, file: str, line: int = 1) -> Frame:
    return Frame(function, file, line)


def test_parses_real_pyspy_window_into_thread_segments():
    events = json.loads((REPO / "fixtures/cpu/io-socket/pyspy/window-0001.json").read_text())
    segs = segments_from_chrometrace(events)
    threads = {s.thread for s in segs}
    assert "reader" in threads and "MainThread" in threads
    assert all(s.end_us > s.start_us for s in segs)
    reader = [s for s in segs if s.thread == "reader"]
    assert reader[0].frames[-1].function == "read_stream"
    assert sum(s.end_us - s.start_us for s in reader) / 1e6 > 2.0  # most of the 3 s window


def test_leaf_first_classification():
    json_stack = (f("main", "/app/x.py"), f("JSONEncoder.iterencode", "/usr/lib/python3.11/json/encoder.py"))
    assert classify(json_stack, {}) == Category.SERIALIZATION
    recv = (f("read_stream", "/app/x.py", 9),)
    assert classify(recv, {("/app/x.py", 9): "data = sock.recv(4096)"}) == Category.IO_WAIT
    assert classify(recv, {}) == Category.PYTHON


def test_wait_patterns_only_apply_to_the_innermost_frame():
    # A busy handler under socketserver's serve_forever is working, not idle.
    stack = (f("BaseServer.serve_forever", "/usr/lib/python3.11/socketserver.py"), f("handle", "/app/h.py", 3))
    assert classify(stack, {("/app/h.py", 3): "total += compute(x)"}) == Category.PYTHON


def test_keep_alive_read_of_next_request_is_idle():
    stack = (f("BaseHTTPRequestHandler.handle_one_request", "/usr/lib/python3.11/http/server.py", 404),
             f("SocketIO.readinto", "/usr/lib/python3.11/socket.py", 706))
    assert classify(stack, {}) == Category.IDLE


def test_torch_frames_are_framework_compute():
    stack = (f("forward", "/app/m.py"), f("Linear.forward", "/site-packages/torch/nn/modules/linear.py"))
    assert classify(stack, {}) == Category.FRAMEWORK_COMPUTE


def test_kernel_reading_decides_what_an_io_frame_means():
    from diagnose.catalogs.frames import Category as C
    from diagnose.signals.cpu import resolve_io
    from diagnose.signals.threads import Reading

    futex = Reading(0, "lock_wait", "futex_do_wait", None)
    sock = Reading(0, "io_wait", "wait_woken", None)
    kernel_copy = Reading(0, "running", None, 0.9)
    user_code = Reading(0, "running", None, 0.1)
    assert resolve_io(C.IO_WAIT, futex) == C.LOCK_WAIT  # GIL after the syscall returned
    assert resolve_io(C.IO_WAIT, sock) == C.IO_WAIT
    assert resolve_io(C.IO_WAIT, user_code) == C.IO_CPU  # socket call, running
    assert resolve_io(C.IO_MAYBE, kernel_copy) == C.IO_CPU  # file read from page cache
    assert resolve_io(C.IO_MAYBE, user_code) == C.PYTHON  # e.g. StringIO.write
    assert resolve_io(C.IO_MAYBE, None) == C.IO_WAIT
    assert resolve_io(C.SERIALIZATION, futex) == C.SERIALIZATION


def test_kernel_timeline_finds_nearest_reading():
    from diagnose.bundle.records.process import process_reading
    from diagnose.signals.threads import KernelTimeline, thread_usage

    t0 = 1_700_000_000_000_000_000
    rows = [("S", "futex_do_wait", 1.0, 0.0), ("R", None, 1.0, 0.5), ("S", "wait_woken", 1.1, 0.5)]
    records = [process_reading({"t_ns": t0 + i * 100_000_000, "threads": [[7, u, sy, st, w, 10 * i, 5 * i, i]]})
               for i, (st, w, u, sy) in enumerate(rows)]
    usage = thread_usage(records)
    assert usage[7].run_ns == 20 and usage[7].wait_ns == 10 and usage[7].slices == 2
    kernel = KernelTimeline(usage)
    assert kernel.at(7, t0 + 10_000_000, 60_000_000).cls == "lock_wait"
    r = kernel.at(7, t0 + 95_000_000, 60_000_000)
    assert r.cls == "running" and r.sys_share == 1.0
    assert kernel.at(7, t0 + 900_000_000, 60_000_000) is None
    assert kernel.at(8, t0, 60_000_000) is None


def test_threads_born_during_the_capture_count_from_zero():
    from diagnose.bundle.records.process import process_reading
    from diagnose.signals.threads import thread_usage

    records = [process_reading({"t_ns": 1, "threads": [[1, 1.0, 0.0, "R", None, 5, 1, 1]]}),
               process_reading({"t_ns": 100, "threads": [[1, 1.5, 0.0, "R", None, 9, 2, 2],
                                                          [2, 0.2, 0.1, "S", None, 300, 40, 3]]})]
    usage = thread_usage(records)
    assert usage[1].cpu_s == 0.5 and usage[1].run_ns == 4
    assert abs(usage[2].cpu_s - 0.3) < 1e-9 and usage[2].run_ns == 300 and usage[2].wait_ns == 40
