"""`diagnose analyze TRACE` on a trace of any size: sniffing reads a bounded head, importing streams
the file once, so memory stays far below the trace's object graph (hundreds of bytes per event)."""
from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from diagnose.bundle.importers.torch_trace import MAX_SNIFF_BYTES, events_array_ahead
from diagnose.traces import reader as reader_mod
from diagnose.traces import stream as stream_mod
from helpers import REPO, SHARED_DATA, findings

TRACES = SHARED_DATA / "torch-traces"
SEED = TRACES / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"  # 15 MB of JSON, 69 k events, GPU
needs_traces = pytest.mark.skipif(not SEED.is_file(), reason="shared torch traces absent (../shared/data)")
BASELINE_RSS = 150 << 20  # interpreter, numpy, orjson, the analysers' code and tables (measured ~60 MiB idle)


# A child's ru_maxrss starts at its parent's RSS at fork (Linux keeps the high-water mark across
# exec), so the CLI is started from a small wrapper process rather than from pytest itself.
MEASURE = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "_, st, ru = os.wait4(p.pid, 0); print(ru.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(st))")


def analyze_measured(out: Path, *files: Path) -> tuple[int, str, int]:
    """Run `diagnose analyze FILES --format json` in a child; (exit code, stderr, its peak RSS bytes)."""
    res = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "diagnose", "analyze",
                          *map(str, files), "--out", str(out), "--format", "json"],
                         capture_output=True, text=True, timeout=600)  # a hang guard, not a speed test
    return res.returncode, res.stderr, int(res.stdout.strip() or 0) * 1024  # ru_maxrss: KiB


def only_bundle(out: Path) -> Path:
    [bundle] = out.glob("diagnose-import-*")
    return bundle


def index(bundle: Path) -> list[dict]:
    return [json.loads(x) for x in (bundle / "torch.jsonl").read_text().splitlines()]


def agent_status(bundle: Path) -> dict:
    return {c["name"]: c for c in json.loads((bundle / "manifest.json").read_text())["collectors"]}["agent"]


def make_synthetic(seed: Path, out: Path, min_bytes: int) -> Path:
    """The HTA benchmark's synthetic trace: ``seed`` repeated with shifted ts and ids (plain JSON)."""
    spec = importlib.util.spec_from_file_location("bench_vs_hta", REPO / "benchmarks" / "bench_vs_hta.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.make_synthetic(seed, out, min_bytes)


@needs_traces
@pytest.mark.slow
@pytest.mark.timeout(900)  # ~20 s idle, 165 s seen on an oversubscribed host; bounded memory is the point
def test_a_large_trace_imports_and_analyses_in_bounded_memory(tmp_path):
    plain = make_synthetic(SEED, tmp_path / "big.json", 80_000_000)  # ~85 MB of JSON, ~350k events
    size = plain.stat().st_size
    packed = tmp_path / "big.json.gz"
    with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    try:
        for path in (packed, plain):
            out = tmp_path / f"out-{path.name}"
            code, err, peak = analyze_measured(out, path)
            assert code == 0, err
            # the whole-document parse this replaces peaked at ~8.5x the JSON's size (1.76 GB for 207 MB)
            assert peak < BASELINE_RSS + size / 3, (path.name, peak >> 20, size >> 20)
            bundle = only_bundle(out)
            [rec] = index(bundle)
            assert rec["activities"] == ["cpu", "cuda"]
            assert agent_status(bundle)["counts"]["torch_events"] > 300_000
            stored = bundle / rec["file"]
            if path == packed:
                assert stored.read_bytes() == packed.read_bytes()  # copied as it was
            else:
                assert stored.stat().st_size < size / 5  # gzipped on the way in
            assert findings(bundle)["data_quality"]["torch"]["traces"] == 1
    finally:  # pytest keeps the last tmp dirs: do not leave 300 MB behind
        plain.unlink(missing_ok=True)
        packed.unlink(missing_ok=True)


def _trace_after_metadata(metadata_bytes: int) -> bytes:
    events = [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1000.5, "dur": 20.0,
               "args": {"correlation": 1, "stream": 7, "device": 0}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 990.0, "dur": 5.0},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "main"}}]
    device = {"name": "NVIDIA H100", "note": "x" * 1000}
    head = {"schemaVersion": 1, "deviceProperties": [device] * (metadata_bytes // 1050),
            "torch_version": "2.5.0"}
    return (orjson.dumps(head)[:-1] + b', "traceEvents": ' + orjson.dumps(events)
            + b', "baseTimeNanoseconds": 1700000000000000000}')


@pytest.mark.parametrize("packed", [True, False], ids=["gz", "plain"])
def test_events_after_a_large_metadata_block_are_found(tmp_path, packed):
    body = _trace_after_metadata(4 << 20)  # past the 1 MiB head: the sniff walks on, token by token
    path = tmp_path / ("late.json.gz" if packed else "late.json")
    path.write_bytes(gzip.compress(body) if packed else body)
    code, err, _ = analyze_measured(tmp_path / "out", path)
    assert code == 0, err
    bundle = only_bundle(tmp_path / "out")
    [rec] = index(bundle)
    base = 1_700_000_000_000_000_000
    assert (rec["start_ns"], rec["end_ns"]) == (base + 990_000, base + 1_020_500)
    assert rec["activities"] == ["cpu", "cuda"] and rec["torch_version"] == "2.5.0"
    assert agent_status(bundle)["counts"]["torch_events"] == 3
    assert gzip.decompress((bundle / rec["file"]).read_bytes()) == body


@needs_traces
def test_a_trace_cut_mid_file_imports_the_events_before_the_cut(tmp_path):
    whole = gzip.decompress(SEED.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(whole[: len(whole) * 3 // 5])
    code, err, _ = analyze_measured(tmp_path / "out", cut)
    assert code == 0, err
    bundle = only_bundle(tmp_path / "out")
    status = agent_status(bundle)
    assert "cut.json: the JSON document ends before its last event is complete" in status["reason"]
    assert 20_000 < status["counts"]["torch_events"] < 69_000
    [rec] = index(bundle)
    assert rec["activities"] == ["cpu", "cuda"] and (bundle / rec["file"]).is_file()
    errors = findings(bundle)["data_quality"]["torch"]["trace_errors"]
    assert len(errors) == 1 and "at byte" in errors[0]


@needs_traces
def test_corrupt_gzip_past_the_head_is_a_one_line_error(tmp_path):
    raw = bytearray(SEED.read_bytes())
    raw[600_000:600_064] = bytes(64)  # well past the first MiB of JSON
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(raw))
    code, err, _ = analyze_measured(tmp_path / "out", bad)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "bad.json.gz is a corrupt gzip file" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_trace_cut_before_its_first_event_is_refused(tmp_path):
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "k'))
    code, err, _ = analyze_measured(tmp_path / "out", cut)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "before any complete event" in err and "cut.json.gz" in err


def _chunked(data: bytes, size: int = 1 << 20):
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("text,answer", [
    (b'{"traceEvents": [', True),  # the array's start is enough
    (b' {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": [{"name": "\xff"}]}', True),
    (b'{"resourceSpans": [{"scopeSpans": []}]}', False),  # OTLP/JSON
    (b'[{"cat": "py-spy", "ph": "B"}]', False),  # a bare event array is py-spy's chrometrace
    (b'{"meta": {"traceEvents": []}}', False),  # not at the root
    (b'{"traceEvents": {"a": 1}}', False),
    (b'{"a": NaN, "traceEvents": []}', True),  # bare NaN in the metadata: the scanner reads past it
    (b'{"schemaVersion": 1, "devicePro', False),  # ends before the answer
    (b'{"a": 1} {"traceEvents": []}', False),  # only the first document counts
])
def test_sniffing_reads_tokens_only_up_to_the_events(text, answer):
    assert events_array_ahead(_chunked(text)) is answer


def test_sniffing_gives_up_past_its_bound():
    late = b'{"pad": "' + b"x" * MAX_SNIFF_BYTES + b'", "traceEvents": []}'
    assert events_array_ahead(_chunked(late)) is False
    assert events_array_ahead(_chunked(_trace_after_metadata(4 << 20))) is True


def test_an_endless_event_stops_the_read(tmp_path, monkeypatch):
    monkeypatch.setattr(stream_mod, "MAX_EVENT_BYTES", 2 << 20)  # 64 MiB in use; same code path
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 2, '
                                   b'"name": "k"}, {"name": "' + b"a" * (8 << 20)))
    trace = reader_mod.read_trace(path)
    assert len(trace.gpu) == 1 and "an event longer than 2 MiB" in trace.report.error
    assert trace.report.truncated_at_byte is not None
