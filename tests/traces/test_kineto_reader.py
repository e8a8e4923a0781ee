"""The streaming Kineto reader on real traces and on small malformed ones made from their events."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from diagnose.signals.kernel_timeline import NO_GPU, trace_signals
from diagnose.traces import stream as stream_mod
from diagnose.traces.reader import TraceReadError, read_trace
from diagnose.traces.report import analyze_trace
from diagnose.traces.schema import CAT_KERNEL
from kineto_helpers import BENCH, CPU_ONLY, LARGE_INT, MI250, NCCL, RANK0, RANK_NOT_FOUND, load, shared, snippet, write

ALL = (RANK0, NCCL, BENCH, MI250, CPU_ONLY, RANK_NOT_FOUND, LARGE_INT, "backward_thread.json")


@pytest.mark.parametrize("name", ALL)
def test_every_shared_trace_reads_completely(name):
    doc = load(name)
    tr = read_trace(shared(name))
    assert tr.report.error is None and tr.report.truncated_at_byte is None
    assert tr.report.events == len(doc["traceEvents"])
    assert tr.report.repaired == tr.report.unparsable == 0
    kept = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in (
        "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync", "cpu_op",
        "user_annotation"))
    assert tr.report.kept == len(tr.gpu) + len(tr.runtime) + len(tr.cpu) == kept
    for t in (tr.gpu, tr.runtime, tr.cpu):
        assert (t["end_ns"] >= t["start_ns"]).all() and (np.diff(t["start_ns"]) >= 0).all()


def test_float_ns_timestamps_and_base_time(tmp_path):
    meta, events = snippet(NCCL, lambda e: e.get("cat") == "kernel", 5)
    assert meta["baseTimeNanoseconds"] and isinstance(events[0]["ts"], float)
    tr = read_trace(write(tmp_path / "t.json.gz", meta, events))
    ts_text = repr(events[0]["ts"])  # e.g. 4458676983543.183: µs with a ns fraction
    whole, frac = ts_text.split(".")
    expected = meta["baseTimeNanoseconds"] + int(whole) * 1000 + int(frac.ljust(3, "0")[:3])
    first = int(np.argmin(tr.gpu["start_ns"]))  # the events are in time order in this snippet
    assert tr.gpu["start_ns"][first] == expected
    assert tr.gpu["dur_ns"][first] == round(events[0]["dur"] * 1000)
    assert tr.meta.base_time_ns == meta["baseTimeNanoseconds"] and tr.meta.unix_clock


def test_unix_microseconds_without_base_time():
    tr = read_trace(shared(BENCH))  # integer µs since the epoch, no baseTimeNanoseconds
    assert tr.meta.base_time_ns is None and tr.meta.unix_clock
    # read as Unix ns: the trace was recorded in September 2023 (1.69e18 ns = 2023-07, 1.70e18 = 2023-11),
    # not 1000x off (us taken for ns) nor relative to the trace's start
    assert 1.69e18 < tr.gpu["start_ns"].min() < 1.70e18


def test_missing_rank_schema_and_distributed_info(tmp_path):
    tr = read_trace(shared(RANK_NOT_FOUND))  # distributedInfo without rank, no schemaVersion
    assert tr.meta.rank is None and tr.meta.schema_version is None and tr.meta.backend == "nccl"
    meta, events = snippet(RANK0, lambda e: e.get("cat") in ("kernel", "cuda_runtime"), 50)
    meta.pop("distributedInfo"), meta.pop("schemaVersion")
    report = analyze_trace(read_trace(write(tmp_path / "t.json.gz", meta, events)))
    assert report.meta.rank is None and report.label == "rank ?" and report.has_gpu


def test_rocm_hip_names_are_linked_and_classified():
    report = analyze_trace(read_trace(shared(MI250)))
    assert report.tables["launches"]["linked_pct"] == 100.0  # hipLaunchKernel via correlation
    cats = {c["category"] for c in report.tables["kernel_categories"]["categories"]}
    assert "gemm" in cats  # Tensile Cijk_ kernels
    assert report.temporal is not None and report.temporal.idle_ns > 0
    sync_names = {c["name"] for c in report.tables["syncs"]["calls"]}
    assert "hipDeviceSynchronize" in sync_names


def test_integers_beyond_int64(tmp_path):
    tr = read_trace(shared(LARGE_INT))  # "Comms Id": 10159970886766084423 (> int64)
    assert tr.report.kept == 2 and tr.report.error is None
    meta, events = snippet(NCCL, lambda e: e.get("cat") == "cuda_runtime", 20)
    events[0]["args"]["correlation"] = 2 ** 70  # beyond int64 and uint64
    events[1]["args"]["External id"] = -(10 ** 30)
    tr = read_trace(write(tmp_path / "t.json.gz", meta, events))
    assert tr.report.kept == 20 and tr.report.unparsable == 0
    assert (tr.runtime["correlation"] == -1).sum() == 1 and (tr.runtime["external_id"] == -1).sum() == 1


def _raw_events(name: str, keep, n: int) -> tuple[dict, list[bytes]]:
    meta, events = snippet(name, keep, n)
    return meta, [json.dumps(e).encode() for e in events]


def _doc(meta: dict, raw_events: list[bytes]) -> bytes:
    head = json.dumps(meta).encode()[:-1] + b', "traceEvents": [\n'
    return head + b",\n".join(raw_events) + b"\n]}\n"


def test_bare_inf_and_nan(tmp_path):
    meta, raw = _raw_events(NCCL, lambda e: e.get("cat") == "kernel", 6)
    raw[0] = raw[0].replace(b'"dur": ', b'"dur": NaN, "_dur": ', 1)
    raw[1] = raw[1].replace(b'"ts": ', b'"ts": inf, "_ts": ', 1)
    raw[2] = raw[2].replace(b'"args": {', b'"args": {"memory bandwidth (GB/s)": -Infinity, "x": nan, ', 1)
    path = tmp_path / "t.json"
    path.write_bytes(_doc(meta, raw))
    tr = read_trace(path)
    assert tr.report.repaired == 3 and tr.report.unparsable == 0
    assert tr.report.invalid == 2  # NaN duration, infinite start: not placeable on the timeline
    assert len(tr.gpu) == 4  # the event with non-finite args is kept


def test_invalid_utf8_and_control_characters_in_names(tmp_path):
    meta, raw = _raw_events(NCCL, lambda e: e.get("cat") == "kernel", 4)
    raw[0] = raw[0].replace(b'"name": "', b'"name": "bad\xff\xfeutf8 ', 1)
    raw[1] = raw[1].replace(b'"name": "', b'"name": "ctl\x01\x1f ', 1)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_doc(meta, raw)))
    tr = read_trace(path)
    assert len(tr.gpu) == 4 and tr.report.repaired == 2
    names = [tr.names[i] for i in tr.gpu["name"]]
    assert any(n.startswith("bad\ufffd") for n in names)
    assert any(n.startswith("ctl\ufffd\ufffd") for n in names)
    assert all(n.isprintable() for n in names)


def test_escaped_quotes_and_braces_inside_strings(tmp_path):
    meta, raw = _raw_events(NCCL, lambda e: e.get("cat") == "kernel", 3)
    raw[1] = raw[1].replace(b'"name": "', b'"name": "q\\"}{\\\\\\"],[ ', 1)
    path = tmp_path / "t.json"
    path.write_bytes(_doc(meta, raw))
    tr = read_trace(path)
    assert len(tr.gpu) == 3 and tr.report.repaired == 0
    assert any(tr.names[i].startswith('q"}{\\"],[') for i in tr.gpu["name"])


def test_truncated_gzip_keeps_what_parsed_and_reports_the_offset(tmp_path):
    full = shared(RANK0).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(full[: len(full) // 2])
    tr = read_trace(path)
    whole = read_trace(shared(RANK0))
    assert tr.report.truncated_at_byte is not None and "truncated" in tr.report.error
    assert 0 < tr.report.kept < whole.report.kept and 0 < len(tr.gpu) < len(whole.gpu)
    raw = gzip.decompress(full)
    assert 0 < tr.report.truncated_at_byte < len(raw)
    assert raw[tr.report.truncated_at_byte:].lstrip()[:1] == b"{"  # the first incomplete event
    report = analyze_trace(tr)
    assert report.temporal is not None  # what parsed is analysed


def test_truncated_plain_json_mid_event(tmp_path):
    meta, raw = _raw_events(NCCL, lambda e: e.get("cat") in ("kernel", "cuda_runtime"), 10)
    doc = _doc(meta, raw)
    cut = doc.rindex(raw[-1]) + len(raw[-1]) // 2
    path = tmp_path / "cut.json"
    path.write_bytes(doc[:cut])
    tr = read_trace(path)
    assert tr.report.kept == 9
    assert tr.report.truncated_at_byte == doc.rindex(raw[-1])


def test_no_kernels_says_no_gpu_activity_never_cpu_bound():
    report = analyze_trace(read_trace(shared(CPU_ONLY)))
    assert not report.has_gpu and report.temporal is None
    signals = trace_signals([report], "unused")
    assert signals["gpu.idle_pct"].value is None and signals["gpu.idle_pct"].reason == NO_GPU
    assert "no GPU activity recorded" in NO_GPU
    assert not any(s.known for n, s in signals.items() if n.startswith("gpu."))


def test_plain_chrome_array_format(tmp_path):
    _, events = snippet(BENCH, lambda e: e.get("cat") in ("kernel", "cuda_runtime"), 1000)
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events))
    tr = read_trace(path)
    assert tr.report.kept == len(events) and tr.report.error is None
    assert analyze_trace(tr).tables["launches"]["linked_pct"] == 100.0


@pytest.mark.slow  # chunk-boundary parsing of a whole trace in 64-byte chunks: ~7 s
def test_tiny_chunks_give_the_same_columns(monkeypatch):
    path = shared(NCCL)
    whole = read_trace(path)
    monkeypatch.setattr(stream_mod, "CHUNK_BYTES", 997)  # boundaries fall inside strings and escapes
    small = read_trace(path)
    for col in ("cat", "name", "start_ns", "dur_ns", "correlation", "stream"):
        assert np.array_equal(whole.gpu[col], small.gpu[col]), col
    for col in ("name", "start_ns", "correlation", "external_id"):
        assert np.array_equal(whole.runtime[col], small.runtime[col]), col
    assert whole.names == small.names and len(whole.flows) == len(small.flows)
    assert whole.meta == small.meta


def test_not_a_trace_and_empty_file(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(TraceReadError, match="no JSON document"):
        read_trace(tmp_path / "empty.json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": [1, 2, {"a": 3}]}))
    tr = read_trace(tmp_path / "other.json")
    assert tr.report.kept == 0 and "no traceEvents" in tr.report.error
    with pytest.raises(TraceReadError, match="cannot open"):
        read_trace(tmp_path / "missing.json.gz")


def test_kernel_rows_keep_device_and_stream():
    tr = read_trace(shared(NCCL))
    k = tr.gpu["cat"] == CAT_KERNEL
    assert set(np.unique(tr.gpu["stream"][k])) == {7, 40}
    assert set(np.unique(tr.gpu["device"][k])) == {0}
