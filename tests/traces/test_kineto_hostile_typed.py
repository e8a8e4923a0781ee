"""Hostile inputs found by a break-it review of the typed trace decoding, the FP32/communication
signals and py-spy stack rebuilding; each one once crashed a signal source, hung, or misled."""
from __future__ import annotations

import numpy as np
import pytest

from diagnose.signals.kernel_timeline import trace_signals
from diagnose.signals.stacks import segments_from_chrometrace
from diagnose.traces import reader
from diagnose.traces.columns import ColumnBuilder
from diagnose.traces.reader import read_trace
from diagnose.traces.report import analyze_trace
from kineto_helpers import write

KERNEL = {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", "pid": 0,
          "tid": 7, "dur": 2.0, "args": {"stream": 7, "device": 0, "correlation": -1}}


@pytest.fixture(autouse=True)
def _small_whole_doc_bound(monkeypatch):
    # documents above WHOLE_DOC_BYTES take the streaming (typed) path: a 64 KiB bound lets small files take it
    monkeypatch.setattr(reader, "WHOLE_DOC_BYTES", 64 << 10)


def _big(events_mid: list[dict], n: int = 2_000) -> list[dict]:
    """``events_mid`` between two runs of plain kernels: > WHOLE_DOC_BYTES, so the streaming (typed)
    path reads it."""
    pad = [dict(KERNEL, ts=3.0 * i) for i in range(n)]
    return pad + events_mid + [dict(KERNEL, ts=3.0 * (n + i)) for i in range(n)]


def test_a_value_nested_a_thousand_deep_falls_back_instead_of_losing_the_trace(tmp_path):
    import gzip
    import json

    deep = json.dumps(dict(KERNEL, ts=1.0, args={"x": "DEEP"})).replace('"DEEP"', "[" * 1000 + "0" + "]" * 1000)
    pad = [json.dumps(e) for e in _big([])]
    body = ",\n".join(pad[:2_000] + [deep] + pad[2_000:])
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(('{"traceEvents": [' + body + "]}").encode()))
    trace = read_trace(path)
    assert trace.report.events == 4_001 and len(trace.gpu) >= 4_000


def test_list_valued_ids_and_times_are_invalid_values_not_a_square_matrix(tmp_path):
    events = [dict(KERNEL, ts=3.0 * i, tid=[7], pid=[0]) for i in range(20_000)]
    events += [dict(KERNEL, ts=[1.0], dur=[2.0])]
    trace = read_trace(write(tmp_path / "t.json.gz", {}, events))
    assert trace.gpu["tid"].ndim == 1 and len(trace.gpu) == 20_000 and trace.report.invalid == 1


def test_a_shape_longer_than_any_tensor_is_not_multiplied_out(tmp_path):
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0,
          "args": {"Input Dims": [[1 << 62] * 150_000, [1 << 62] * 150_000], "Input type": ["float", "float"]}}
    trace = read_trace(write(tmp_path / "t.json.gz", {}, [op, dict(KERNEL, ts=1.0)]))
    assert np.isnan(trace.cpu["flops"]).all()


def test_a_null_flops_arg_reads_the_same_on_both_paths(tmp_path, monkeypatch):
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0,
          "args": {"flops": None, "Input type": ["float"], "bytes": 123}}
    path = write(tmp_path / "t.json.gz", {}, _big([op]))
    typed = read_trace(path)
    monkeypatch.setattr(ColumnBuilder, "add_json_array", lambda self, body: False)
    dicts = read_trace(path)
    for k in ("precision", "bytes", "flops"):
        assert np.array_equal(typed.cpu[k], dicts.cpu[k], equal_nan=True), k
    assert typed.cpu["bytes"][0] == 123.0 and typed.cpu["precision"][0] == 0


def test_collectives_overlap_only_with_compute_on_their_own_device(tmp_path):
    """NCCL on device 1 while GEMMs run on device 0: device 1's collectives are fully exposed."""
    events = []
    for i in range(20):
        events.append(dict(KERNEL, ts=100.0 * i, dur=50.0, args={"stream": 7, "device": 0}))
        events.append(dict(KERNEL, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", tid=20, ts=100.0 * i,
                           dur=50.0, args={"stream": 20, "device": 1}))
    report = analyze_trace(read_trace(write(tmp_path / "t.json.gz", {}, events)))
    assert report.tables["comm_overlap"]["overlap_pct"] == 0.0
    assert trace_signals([report], "")["gpu.comm_exposed_ms"].value > 0.9


def test_same_microsecond_samples_of_forked_processes_do_not_fuse_stacks():
    """py-spy --subprocesses: parent and forked worker share tid 0 and are sampled in the same µs;
    the B/E stream must be replayed in file order."""
    def frame(ph, name, pid, ts):
        return {"ph": ph, "name": name, "pid": pid, "tid": 0, "ts": ts, "cat": "py-spy",
                "args": {"filename": "" if name.startswith("process ") else "/app/main.py", "line": 1}}
    parent = ['process 100:"python serve.py"', "main", "serve", "json_dumps"]
    worker = ['process 101:"python worker"', "main", "worker_loop", "sleep"]
    events, prev = [], []
    for k in range(50):
        for stack, pid in ((parent, 100), (worker, 101)):
            i = 0
            while i < min(len(prev), len(stack)) and prev[i] == stack[i]:
                i += 1
            events += [frame("E", n, pid, k * 10_000) for n in reversed(prev[i:])]
            events += [frame("B", n, pid, k * 10_000) for n in stack[i:]]
            prev = stack
    segments = segments_from_chrometrace(events)
    assert segments
    for seg in segments:
        names = {f.function for f in seg.frames}
        assert not ({"serve", "worker_loop"} <= names), names
