"""The typed (msgspec) decoding of event batches (and of a small whole document) and the orjson-dict
path it falls back to (typed.events_of) give the same trace: every column, name, count and thread
name, on real traces and on batches whose shape the structs reject."""
from __future__ import annotations

import numpy as np
import pytest

from diagnose.traces.columns import ColumnBuilder
from diagnose.traces.reader import read_trace
from helpers import REPO
from kineto_helpers import BENCH, MI250, NCCL, RANK0, shared, write

RECORDED = [REPO / "fixtures" / "torch" / "h200-train-step" / "trace.json.gz",
            REPO / "fixtures" / "flops" / "h200-cuda" / "trace.json.gz"]


def _same(a, b) -> None:
    assert a.names == b.names and a.report == b.report and a.meta == b.meta
    assert a.thread_names == b.thread_names and a.process_names == b.process_names
    for part in ("gpu", "runtime", "cpu", "flows"):
        ta, tb = getattr(a, part), getattr(b, part)
        assert ta.columns.keys() == tb.columns.keys()
        for k in ta.columns:
            assert np.array_equal(ta[k], tb[k], equal_nan=ta[k].dtype.kind == "f"), (part, k)


def _both(path, monkeypatch):
    typed = read_trace(path)
    with monkeypatch.context() as m:
        m.setattr(ColumnBuilder, "add_json_array", lambda self, body: False)
        m.setattr("diagnose.traces.reader.decode_document", lambda body: None)  # a small whole document too
        dicts = read_trace(path)
    return typed, dicts


@pytest.mark.parametrize("name", [NCCL, RANK0, BENCH, MI250])
def test_shared_traces_read_the_same_either_way(name, monkeypatch):
    typed, dicts = _both(shared(name), monkeypatch)
    _same(typed, dicts)
    assert len(typed.gpu) + len(typed.cpu) > 0


@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_recorded_traces_read_the_same_either_way(path, monkeypatch, tmp_path):
    if not path.exists():
        pytest.skip(f"{path} not recorded")
    # the recordings are small (one whole-document parse): repeat their events to pass the
    # streaming threshold so the typed path decodes the batches
    import gzip
    import json

    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc.pop("traceEvents")
    big = write(tmp_path / "big.json.gz", doc, events * max(1, (6 << 20) // len(json.dumps(events)) + 1))
    typed, dicts = _both(big, monkeypatch)
    _same(typed, dicts)
    assert np.isfinite(typed.cpu["flops"]).any()  # FLOPs counted on the typed path too


def test_batches_the_structs_reject_fall_back_to_dicts(tmp_path):
    """args that is a list, an event that is a number: that batch goes through orjson dicts."""
    ok = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
          "args": {"stream": 7, "device": 0}}
    padding = [dict(ok, ts=float(i) * 3.0) for i in range(60_000)]
    odd = [dict(ok, args=[1, 2]), 42]
    trace = read_trace(write(tmp_path / "t.json.gz", {}, padding + odd + padding))
    assert trace.report.events == 120_002 and trace.report.invalid == 1
    assert len(trace.gpu) == 120_001


def test_a_small_document_the_structs_reject_is_typed_event_by_event(tmp_path):
    """A whole document (no streaming) with args that is a list and an event that is a number: orjson
    reads it, and its events are typed one by one (args that is not an object reads as none)."""
    ok = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
          "args": {"stream": 7, "device": 0}}
    meta = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}
    trace = read_trace(write(tmp_path / "t.json.gz", {}, [ok, dict(ok, args=[1, 2], ts=4.0), 42, meta]))
    assert trace.report.events == 4 and trace.report.invalid == 1
    assert list(trace.gpu["stream"]) == [7, 7] and trace.thread_names == {(0, 7): "stream 7"}
