"""Frame catalog and py-spy chrometrace parsing on real py-spy output."""
from __future__ import annotations

import json

from diagnose.rules.frame_catalog import Category
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


def test_kernel_state_corrects_io_frames():
    from diagnose.rules.frame_catalog import Category
    from diagnose.signals.cpu import _kernel_checked
    from diagnose.signals.process import KernelTimeline
    from diagnose.signals.stacks import Segment

    t0 = 1_700_000_000_000_000_000
    records = [{"t_ns": t0 + i * 100_000_000, "threads": [[7, 0.0, 0.0, st, wchan]]}
               for i, (st, wchan) in enumerate([("S", "futex_do_wait"), ("R", None), ("S", "wait_woken")])]
    kernel = KernelTimeline(records)
    seg = lambda ms: Segment(7, "w", ms * 1000.0 - 5000, ms * 1000.0 + 5000, (f("f", "/a.py"),))
    assert _kernel_checked(Category.IO_WAIT, seg(0), t0, kernel) == Category.LOCK_WAIT
    assert _kernel_checked(Category.IO_WAIT, seg(100), t0, kernel) == Category.IO_CPU
    assert _kernel_checked(Category.IO_WAIT, seg(200), t0, kernel) == Category.IO_WAIT
    assert _kernel_checked(Category.IO_WAIT, seg(900), t0, kernel) == Category.IO_WAIT  # no reading near
    assert _kernel_checked(Category.SERIALIZATION, seg(0), t0, kernel) == Category.SERIALIZATION
