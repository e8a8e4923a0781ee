"""`diagnose analyze FILES`: artifacts a user already has become a bundle (torch traces, OTLP/JSON
or console-exporter span dumps, py-spy raw/speedscope output); bad files are one-line errors."""
from __future__ import annotations

import base64
import gzip
import io
import json
import stat
import subprocess
import time
from pathlib import Path

import pytest

from diagnose.collectors.pyspy import find_pyspy
from helpers import SHARED_DATA, findings, run_diagnose

TRACES = SHARED_DATA / "torch-traces"
OTLP_EXAMPLE = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="shared torch traces absent (../shared/data)")
needs_otlp = pytest.mark.skipif(not OTLP_EXAMPLE.is_file(), reason="shared OTLP example absent (../shared/data)")


def analyze(tmp_path: Path, *files: Path, fmt: str = "json"):
    out = tmp_path / "out"
    res = run_diagnose("analyze", *map(str, files), "--out", str(out), "--format", fmt)
    bundles = sorted(out.glob("diagnose-import-*")) if out.is_dir() else []
    return res, (bundles[0] if bundles else None)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def own_torch_trace(path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is needed to record a trace")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(64, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(5):
            model(torch.randn(8, 64))
    prof.export_chrome_trace(str(path))


@needs_traces
def test_torch_traces_json_and_gz_are_indexed_with_their_clock(tmp_path):
    own = tmp_path / "own.json"
    own_torch_trace(own)
    before_ns = time.time_ns()
    hta = TRACES / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    res, bundle = analyze(tmp_path, own, hta, TRACES / "backward_thread.json",
                          TRACES / "large_integer_rank-70.pt.trace.json.gz")
    assert res.returncode == 0, res.stderr
    assert f"bundle: {bundle}" in res.stderr
    index = lines(bundle / "torch.jsonl")
    assert [Path(r["imported_from"]).name for r in index] == [
        "own.json", hta.name, "backward_thread.json", "large_integer_rank-70.pt.trace.json.gz"]
    mine = index[0]
    assert mine["base_time_ns"] and mine["start_ns"] <= mine["end_ns"] <= before_ns
    assert before_ns - mine["start_ns"] < 120e9  # recorded just now, placed on the Unix clock
    assert index[1]["activities"] == ["cpu", "cuda"]
    # no baseTimeNanoseconds, but its ts are already Unix µs (2022): placed as they are
    assert index[2]["base_time_ns"] is None and 1.6e18 < index[2]["start_ns"] <= index[2]["end_ns"] < before_ns
    assert (bundle / index[1]["file"]).read_bytes() == hta.read_bytes()  # copied as it was
    copied = json.loads(gzip.decompress((bundle / index[0]["file"]).read_bytes()))
    assert any(e.get("name") == "aten::addmm" for e in copied["traceEvents"])
    agent = {c["name"]: c for c in findings(bundle)["collectors"]}["agent"]
    assert agent["state"] == "ok" and agent["counts"]["torch_traces"] == 4
    assert "no baseTimeNanoseconds" in agent["reason"]
    pyspy = {c["name"]: c for c in findings(bundle)["collectors"]}["pyspy"]
    assert pyspy["state"] == "unavailable" and "no py-spy output" in pyspy["reason"]
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == (0o700 if f.is_dir() else 0o600) for f in bundle.rglob("*"))


@needs_traces
def test_truncated_gzip_trace_is_a_clear_error_and_leaves_no_bundle(tmp_path):
    whole = (TRACES / "nccl_data.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    res, bundle = analyze(tmp_path, cut)
    assert res.returncode == 2
    assert "cut.json.gz is a truncated gzip file" in res.stderr and "again" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and bundle is None


def test_unknown_or_missing_files_are_usage_errors(tmp_path):
    odd = tmp_path / "notes.txt"
    odd.write_text("hello world\n")
    res, _ = analyze(tmp_path, odd)
    assert res.returncode == 2 and "not a recognised artifact" in res.stderr and "py-spy" in res.stderr
    res, _ = analyze(tmp_path, tmp_path / "nope.json")
    assert res.returncode == 2 and "does not exist" in res.stderr


def _b64_ids(node):
    if isinstance(node, list):
        return [_b64_ids(v) for v in node]
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId")
                    else _b64_ids(v)) for k, v in node.items()}
    return node


@needs_otlp
def test_otlp_json_exports_with_hex_or_base64_ids_and_json_lines(tmp_path):
    doc = json.loads(OTLP_EXAMPLE.read_text())
    b64 = tmp_path / "b64.json"
    b64.write_text(json.dumps(_b64_ids(doc)))
    jsonl = tmp_path / "export.jsonl"  # the collector's file exporter: one request per line
    jsonl.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")
    res, bundle = analyze(tmp_path, OTLP_EXAMPLE, b64, jsonl)
    assert res.returncode == 0, res.stderr
    spans = lines(bundle / "spans.jsonl")
    assert len(spans) == 4
    assert {s["trace_id"] for s in spans} == {"5b8efff798038103d269b633813fc60c"}
    assert {s["parent_span_id"] for s in spans} == {"eee19b7ec3c1b173"}
    assert all(s["source"] == "import" and s["kind"] == "server" for s in spans)
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["started_ns"] == 1544712660000000000 and m["ended_ns"] == 1544712661000000000


def test_console_exporter_output_with_0x_ids_iso_times_and_bad_spans(tmp_path):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    buf = io.StringIO()
    provider = TracerProvider(resource=Resource.create({"service.name": "console-svc"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=buf)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("request") as req:
        with tracer.start_as_current_span("decode"):
            pass
    now = time.time_ns()
    tracer.start_span("backwards", start_time=now).end(end_time=now - 10**9)
    tracer.start_span("day", start_time=now - 24 * 3600 * 10**9).end(end_time=now)
    provider.shutdown()
    dump = tmp_path / "console.txt"
    dump.write_text(buf.getvalue())
    res, bundle = analyze(tmp_path, dump)
    assert res.returncode == 0, res.stderr
    spans = {s["name"]: s for s in lines(bundle / "spans.jsonl")}
    assert set(spans) == {"request", "decode", "day"}
    assert spans["request"]["trace_id"] == format(req.get_span_context().trace_id, "032x")
    assert spans["decode"]["parent_span_id"] == spans["request"]["span_id"]
    assert abs(spans["request"]["start_ns"] - req.start_time) < 1000  # ISO times carry microseconds
    assert spans["request"]["service"] == "console-svc"
    otlp = {c["name"]: c for c in findings(bundle)["collectors"]}["otlp"]
    assert "1 span(s) rejected (end_before_start)" in otlp["reason"]
    assert otlp["counts"]["spans_over_1h"] == 1
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["ended_ns"] - m["started_ns"] < 3600e9  # the day-long span does not stretch the bundle


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy not installed")
def test_pyspy_raw_and_speedscope_output_are_analysed_like_a_capture(workload, tmp_path):
    proc = workload("json_loop")
    files = []
    for fmt in ("raw", "speedscope"):
        out = tmp_path / f"profile.{fmt}"
        subprocess.run([find_pyspy(), "record", "--pid", str(proc.pid), "--duration", "2", "--rate", "100",
                        "--nonblocking", "--threads", "--format", fmt, "-o", str(out)],
                       capture_output=True, timeout=60, check=True)
        files.append(out)
    for f in files:
        res, bundle = analyze(tmp_path / f.suffix[1:], f)
        assert res.returncode == 0, res.stderr
        doc = findings(bundle)
        share = doc["signals"]["cpu.category_share_pct[serialization]"]["value"]
        assert share > 50, (f.name, share)
        assert any("serialize_payloads" in fr for s in doc["top_stacks"] for fr in s["frames"])
        [window] = lines(bundle / "pyspy.jsonl")
        assert window["format"] == f.suffix[1:] and 150 <= window["samples"] <= 250


def test_analyze_bundle_directory_still_works(tmp_path):
    own = tmp_path / "own.json"
    own_torch_trace(own)
    res, bundle = analyze(tmp_path, own)
    assert res.returncode == 0
    again = run_diagnose("analyze", str(bundle))
    assert again.returncode == 0 and "verdict:" in again.stdout
