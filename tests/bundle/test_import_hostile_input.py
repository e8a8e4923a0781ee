"""Hostile inputs to `diagnose analyze FILES`: deep nesting, JSON bombs, out-of-range times,
documents the whole-document and streaming readers could read differently. Each is a one-line
error (exit 2) or an import that keeps the good events, in bounded memory and time."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from diagnose.bundle.importers import import_files
from diagnose.bundle.importers.base import MAX_DOC_BYTES, Artifact, ImportFailed
from diagnose.bundle.importers.torch_trace import events_array_ahead
from diagnose.traces.reader import WHOLE_DOC_BYTES, read_trace
from diagnose.traces.scan import DocumentSizes

BASE_NS = 1_700_000_000_000_000_000
DEPTH = 100_000
# ru_maxrss of a child is measured from a small wrapper, not from pytest (see test_import_streaming)
MEASURE = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "_, st, ru = os.wait4(p.pid, 0); print(ru.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(st))")
RSS_BOUND = 400 << 20  # interpreter + numpy + analysers ~60-150 MiB; the bugs took 7-24 GB


def kernel(ts, name="k", corr=1) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 5,
            "args": {"stream": 7, "device": 0, "correlation": corr}}


def trace_text(events: list, base: str | None = str(BASE_NS), extra: str = "") -> str:
    head = f'"baseTimeNanoseconds":{base},' if base is not None else ""
    return "{" + head + extra + '"traceEvents":[' + ",".join(
        e if isinstance(e, str) else json.dumps(e) for e in events) + "]}"


def analyze_measured(tmp_path: Path, *files: Path) -> tuple[int, str, int]:
    res = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "diagnose", "analyze",
                          *map(str, files), "--out", str(tmp_path / "out"), "--format", "json"],
                         capture_output=True, text=True, timeout=60)
    return res.returncode, res.stderr, int(res.stdout.strip() or 0) * 1024


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def agent(m: dict) -> dict:
    return next(c for c in m["collectors"] if c["name"] == "agent")


# 1. deep nesting: linear cost everywhere ---------------------------------------------------------

def test_sniff_is_linear_in_nesting_depth():
    deep = b'{"x":' + b"[" * DEPTH + b"]" * DEPTH + b',"traceEvents":[]}'
    assert events_array_ahead(iter([deep])) is True
    assert events_array_ahead(iter([b'{"x":' + b"[" * DEPTH])) is False  # never closes: no key
    assert events_array_ahead(iter([b"[" * DEPTH])) is False


@pytest.mark.parametrize("where", ["metadata", "event args"])
def test_deep_nesting_imports_in_bounded_memory(tmp_path, where):
    nest = "[" * DEPTH + "]" * DEPTH
    if where == "metadata":
        text = trace_text([kernel(10), kernel(20)], extra=f'"x":{nest},')
    else:
        deep = json.dumps(kernel(10)).replace('"stream": 7', f'"stream": 7, "d": {nest}')
        text = trace_text([deep, kernel(20)])
    path = tmp_path / "deep.json.gz"
    path.write_bytes(gzip.compress(text.encode(), 9))
    code, err, rss = analyze_measured(tmp_path, path)
    assert code == 0, err
    assert "Traceback" not in err and rss < RSS_BOUND
    tr = read_trace(path)
    assert tr.report.kept == (2 if where == "metadata" else 1)
    assert tr.report.unparsable == (0 if where == "metadata" else 1)


def test_cut_off_deep_metadata_is_read_quickly(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(trace_text([kernel(10)])[:-1] + ',"x":' + "[" * DEPTH)
    tr = read_trace(path)
    assert tr.report.kept == 1 and tr.report.truncated_at_byte is not None


# 2. JSON bombs and bare NaN ----------------------------------------------------------------------

def test_list_bomb_is_refused_before_it_is_built(tmp_path):
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    path = tmp_path / "bomb.gz"
    block = b'{"a":[1]},' * 65536
    with path.open("wb") as fh:
        fh.write(co.compress(b"["))
        for _ in range(MAX_DOC_BYTES // len(block) + 4):
            fh.write(co.compress(block))
        fh.write(co.compress(b'{"a":[1]}]') + co.flush())
    code, err, rss = analyze_measured(tmp_path, path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{MAX_DOC_BYTES >> 20} MiB" in err and "split the file" in err and "bomb.gz" in err
    assert rss < RSS_BOUND


def test_documents_back_to_back_are_measured_not_parsed_whole(tmp_path):
    line = json.dumps({"a": list(range(50)), "s": 'x"\\]}'}) + "\n"
    path = tmp_path / "many.jsonl"
    path.write_text(line * (3 * (1 << 20) // len(line)))
    art = Artifact.open(path)
    assert not art.complete and art.doc is None and "JSON documents back to back" in art.parse_error
    sizes = DocumentSizes()
    data = path.read_bytes()
    for i in range(0, len(data), 4099):  # odd chunk sizes: cuts inside strings and escapes
        sizes.feed(data[i:i + 4099])
    assert sizes.documents == data.count(b"\n") and sizes.longest == len(line) - 1


def test_bare_nan_in_metadata_of_a_large_trace(tmp_path):
    events = [kernel(10 + i * 10, corr=i) for i in range(20000)]  # ~2.5 MB: past the sniff's head
    path = tmp_path / "nan.json"
    path.write_text(trace_text(events, extra='"x":NaN,"y":[Infinity],'))
    bundle = import_files([path], tmp_path / "out")
    assert agent(manifest(bundle))["counts"]["torch_events"] == 20000


# 4. one bad value never refuses the file --------------------------------------------------------

@pytest.mark.parametrize("base,bad_ts,placed", [
    (str(BASE_NS), 2**70, True), (str(BASE_NS), 1e17, True), (str(BASE_NS), -1e18, True),
    (str(2**70), 30, False), ("Infinity", 30, False), ("1e999", 30, False), ("true", 30, False),
    ("-5", 30, False), ('"1700000000000000000"', 30, False),
])
def test_out_of_range_times_keep_the_good_events(tmp_path, base, bad_ts, placed):
    path = tmp_path / "t.json"
    path.write_text(trace_text([kernel(10), kernel(bad_ts, name="bad"), kernel(100)], base=base))
    bundle = import_files([path], tmp_path / "out")
    m = manifest(bundle)
    if placed:
        assert (m["started_ns"], m["ended_ns"]) == (BASE_NS + 10_000, BASE_NS + 105_000)
        assert "impossible timestamp" in agent(m)["reason"]
    else:
        assert m["started_ns"] is None and m["ended_ns"] is None
        assert "not a Unix time in ns (ignored)" in agent(m)["reason"]
    tr = read_trace(next(bundle.glob("torch/*.json.gz")))
    assert len(tr.gpu) == (2 if placed else 3)
    if placed:
        assert tr.report.invalid == 1 and tr.meta.base_time_ns == BASE_NS
        assert tr.gpu["start_ns"].min() == BASE_NS + 10_000 and tr.gpu["end_ns"].max() == BASE_NS + 105_000
    else:
        assert tr.meta.base_time_ns is None


def test_analysis_of_an_out_of_range_kernel_is_clean(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(trace_text([kernel(10), kernel(1e17, name="bad"), kernel(100)]))
    res = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "diagnose", "analyze", str(path),
                          "--out", str(tmp_path / "out"), "--format", "json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "Warning" not in res.stderr, res.stderr


# 3. the whole-document and streaming paths agree -------------------------------------------------

def _both_paths(tmp_path: Path, text: str):
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    small.write_text(text)
    big.write_text(text + "\n" * (WHOLE_DOC_BYTES + (1 << 20)))
    return read_trace(small), read_trace(big)


def _facts(tr) -> tuple:
    r = tr.report
    return r.events, r.kept, r.invalid, r.skipped, len(tr.gpu), tr.meta.base_time_ns


def test_duplicate_events_key_reads_the_same_both_ways(tmp_path):
    text = trace_text([kernel(10 + i * 10, corr=i) for i in range(2000)])[:-1] + ',"traceEvents":[]}'
    a, b = _both_paths(tmp_path, text)
    assert _facts(a) == _facts(b) and a.report.kept == 2000
    bundle = import_files([tmp_path / "small.json"], tmp_path / "out")
    assert agent(manifest(bundle))["counts"]["torch_events"] == 2000 == len(read_trace(
        next(bundle.glob("torch/*.json.gz"))).gpu)


@pytest.mark.parametrize("elements", [
    ['1', '"x"', 'null', '[1,2]', 'true', "K", '7', '[{"nested":1}]', "K", 'false', '"y"'],
    ['1', '"x"', 'null'],
    ["K", '"a\\\\"', "K", '"b,\\"c"', "K"],
])
def test_non_object_elements_are_invalid_both_ways(tmp_path, elements):
    events = [json.dumps(kernel(10 + i)) if e == "K" else e for i, e in enumerate(elements)]
    a, b = _both_paths(tmp_path, trace_text(events))
    assert _facts(a) == _facts(b)
    assert a.report.events == len(elements) and a.report.invalid == sum(e != "K" for e in elements)


# 5. symlink loops, documents back to back --------------------------------------------------------

def test_symlink_loop_is_named(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    os.symlink(b, a)
    os.symlink(a, b)
    with pytest.raises(ImportFailed, match="symlink loop"):
        import_files([a], tmp_path / "out")
    dangling = tmp_path / "d.json"
    os.symlink(tmp_path / "nowhere.json", dangling)
    with pytest.raises(ImportFailed, match="which does not exist"):
        import_files([dangling], tmp_path / "out")


def test_second_document_is_ignored_and_noted(tmp_path):
    one = trace_text([kernel(10 + i * 10, corr=i) for i in range(50)])
    path = tmp_path / "two.json"
    path.write_text(one + "\n" + one)
    tr = read_trace(path)
    assert tr.report.kept == 50 and tr.report.ignored_after == len(one)
    bundle = import_files([path], tmp_path / "out")
    m = manifest(bundle)
    assert agent(m)["counts"]["torch_events"] == 50 and "after the first JSON document ignored" in agent(m)["reason"]
